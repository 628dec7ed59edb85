"""One service per data root: an exclusive ``flock`` on ``<data_root>/service.lock``, then the records database.

Two services writing one queue would run every resumed job twice, into the same directories. The kernel drops
a ``flock`` when its holder dies, even by SIGKILL, so a crashed service never blocks its successor; a second
live one is refused with the holder's pid and address. (On NFS, ``flock`` is only as good as the server's lock
support: keep a data root on a local or block volume, such as a Kubernetes PersistentVolume.)
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from unirender.errors import UnirenderError
from unirender.service.store import DATABASE, ServiceStore

LOCK_FILE = "service.lock"


class DataRootError(UnirenderError):
    """The data root cannot be used (not creatable, not writable)."""


class DataRootInUse(DataRootError):
    """Another live service holds this data root."""


class DataRoot:
    """The held lock and the open store of one data root; ``close()`` releases both."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None
        self.store: ServiceStore | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, *, holder: str = "") -> DataRoot:
        root = cls(path)
        try:
            root.path.mkdir(parents=True, exist_ok=True)
            root._lock(holder)
        except OSError as exc:
            raise DataRootError(f"cannot use the data root {root.path}: {exc}") from exc
        try:
            root.store = ServiceStore(root.path / DATABASE)
        except BaseException:
            root.close()
            raise
        return root

    def _lock(self, holder: str) -> None:
        lock_path = self.path / LOCK_FILE
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                who = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise DataRootInUse(
                f"the data root {self.path} is in use by another unirender service ({who}); stop it first, or "
                "give this one another --data-root (two services on one data root would both run its jobs)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}{', ' + holder if holder else ''}\n".encode(), 0)
        self._fd = fd

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
