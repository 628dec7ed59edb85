"""A node's store is bounded (issue 46, stage 2): leases on the builds running players use, use times, and the
least-recently-used eviction that keeps the store under ``max_bytes`` (docs/builds.md, "A bounded store").

- **Leases.** ``<root>/leases/<hex>`` is a per-build file; a process running a player of that build holds a shared
  ``flock`` on it for the player's lifetime (:func:`lease`). Any number of players (processes or threads) share a
  build; the kernel drops the lock when the holder's descriptor closes, so a crashed or SIGKILLed process leaves
  no lease behind. An evictor takes the lock exclusively and without waiting: a build whose lock it cannot take
  is in use and is never removed.
- **Use times.** Taking a lease (and releasing it) sets the lease file's mtime: the build's last use. A build
  never launched counts as used when it was added.
- **Eviction.** Before a publish would leave the store's blobs over ``max_bytes``, the least recently used builds
  that no lease holds are removed until it fits; the plan is made first (which blobs each removal frees: a blob
  goes when no remaining build links it), so a bound that cannot be reached removes nothing and the publish fails
  with :class:`StoreFullError`.

Nothing here needs the store's exclusive lock: a build leaves by one ``rename`` (a resolve sees it whole or not at
all), and a blob is freed by renaming it aside and unlinking it only if no add linked it meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from unirender.builds.errors import BuildError, BuildNotFoundError

MAX_BYTES_ENV = "UNIRENDER_BUILDS_MAX_BYTES"
HEX = re.compile(r"^[0-9a-f]{64}$")


class StoreFullError(BuildError):
    """A publish that would leave the store over its bound, with nothing evictable enough to make room."""


class BuildInUseError(BuildError):
    """``rm`` of a build a running player leases (``--force`` removes it anyway)."""


def parse_size(value: str | int | None) -> int | None:
    """``"50G"``, ``"512MiB"``, ``"1000000"`` -> bytes; None, ``""``, ``"0"`` or ``"none"``: unbounded."""
    if value is None:
        return None
    if isinstance(value, int):
        return value or None
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    if text in ("", "0", "none", "unbounded"):
        return None
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        size = int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    except (ValueError, KeyError):
        raise BuildError(f"{value!r}: a store bound is a byte count, optionally with K, M, G or T") from None
    if size < 0:
        raise BuildError(f"{value!r}: a store bound cannot be negative")
    return size or None


def default_max_bytes() -> int | None:
    return parse_size(os.environ.get(MAX_BYTES_ENV))


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def lease_path(root: Path, digest: str) -> Path:
    return Path(root) / "leases" / _hex(digest)


# ---------------------------------------------------------------------------------------------------------- leases
class Lease:
    """A held lease on one build (a shared flock on its lease file); :meth:`release` (or leaving the ``with``)
    gives it back and records the use time. Idempotent; a lease that could not be taken on a read-only store is
    a no-op lease (``held`` False): nobody can evict from a store nobody may write."""

    def __init__(self, digest: str, fd: int | None) -> None:
        self.digest = digest
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.utime(fd)  # the build's last use: when its last player stopped
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()

    def __repr__(self) -> str:
        return f"<Lease {self.digest[:19]} {'held' if self.held else 'not held'}>"


def lease(root: str | os.PathLike, digest: str) -> Lease:
    """Take a shared lease on the build ``digest`` of the store at ``root`` and record its use time.

    Waits only while an evictor holds the build's lock (the moment it takes to rename the build away); raises
    :class:`BuildNotFoundError` when the build is not (or no longer) in the store. Cost, measured on a tmpfs
    store (tests/builds/test_bounds.py prints it): about 15-25 microseconds (open, flock, fstat, stat, utime)."""
    root = Path(root)
    path = lease_path(root, digest)
    build = root / "builds" / _hex(digest) / "info.json"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            try:
                path.parent.mkdir(exist_ok=True)
            except OSError:
                return _unleased(build, digest)
            continue
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                return _unleased(build, digest)  # a read-only store: nobody evicts from it
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # An evictor unlinks the lease file of a build it removed: a lock on that old file guards nothing.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            if not build.exists():
                raise BuildNotFoundError(f"no build {digest} in the store {root} (evicted or removed)")
            with contextlib.suppress(OSError):  # another user's lease file: its mtime is theirs to set
                os.utime(fd)
            return Lease(digest, fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise


def _unleased(build: Path, digest: str) -> Lease:
    if not build.exists():
        raise BuildNotFoundError(f"no build {digest} in the store {build.parent.parent.parent}")
    return Lease(digest, None)


@contextlib.contextmanager
def _exclusive(root: Path, digest: str) -> Iterator[bool]:
    """The build's lease lock taken exclusively without waiting: True (held for the block) when no lease holds
    the build, False when one does."""
    path = lease_path(root, digest)
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def is_leased(root: str | os.PathLike, digest: str) -> bool:
    """Whether a player (of any process, this one included) holds a lease on the build."""
    path = lease_path(Path(root), digest)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def last_used(root: str | os.PathLike, digest: str, added: float) -> float:
    """The build's last launch (or release) time; ``added`` for a build never launched."""
    try:
        return max(added, lease_path(Path(root), digest).stat().st_mtime)
    except FileNotFoundError:
        return added


# ---------------------------------------------------------------------------------------------------------- eviction
@dataclass(frozen=True)
class Eviction:
    """What an eviction removed (digests, least recently used first) and the bytes it freed."""

    removed: tuple[str, ...]
    freed_bytes: int
    usage: int  # the store's bytes afterwards


def disk_usage(root: Path) -> int:
    blobs = root / "blobs" / "sha256"
    if not blobs.is_dir():
        return 0
    return sum(b.lstat().st_size for shard in blobs.iterdir() for b in shard.iterdir())


def _candidates(root: Path, exclude: set[str]) -> list[tuple[float, str]]:
    """(last use, digest) of every published build, least recently used first."""
    import json

    found = []
    builds = root / "builds"
    if not builds.is_dir():
        return found
    for folder in builds.iterdir():
        if not HEX.match(folder.name) or ("sha256:" + folder.name) in exclude:
            continue
        try:
            added = json.loads((folder / "info.json").read_bytes()).get("added", 0.0)
        except (OSError, ValueError):
            continue
        digest = "sha256:" + folder.name
        found.append((last_used(root, digest, added), digest))
    return sorted(found)


def _inodes(tree: Path) -> dict[int, tuple[int, int]]:
    """inode -> (links from this tree, size) of the regular files under ``tree``."""
    found: dict[int, tuple[int, int]] = {}
    for directory, _dirs, files in os.walk(tree):
        for name in files:
            st = os.lstat(os.path.join(directory, name))
            if st.st_mode & 0o170000 == 0o100000:
                count, _ = found.get(st.st_ino, (0, 0))
                found[st.st_ino] = (count + 1, st.st_size)
    return found


def _blob_links(root: Path) -> dict[int, tuple[Path, int, int]]:
    """inode -> (blob path, links, size) of every blob."""
    found = {}
    blobs = root / "blobs" / "sha256"
    if blobs.is_dir():
        for shard in blobs.iterdir():
            for blob in shard.iterdir():
                st = blob.lstat()
                found[st.st_ino] = (blob, st.st_nlink, st.st_size)
    return found


def evict(
    root: str | os.PathLike, max_bytes: int, *, exclude: tuple[str, ...] = (), reason: str = ""
) -> Eviction:
    """Remove least recently used, unleased builds until the store's blobs fit in ``max_bytes``.

    All or nothing: the builds to remove are chosen (and their lease locks held) before any is removed; when
    removing every unleased build would not be enough, nothing is removed and :class:`StoreFullError` says what
    holds the space. ``exclude``: builds never to remove (the one being published). Evictors take turns
    (``<root>/evict.lock``)."""
    root = Path(root)
    (root / "leases").mkdir(parents=True, exist_ok=True)
    with open(root / "evict.lock", "a+") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        usage = disk_usage(root)
        if usage <= max_bytes:
            return Eviction((), 0, usage)
        blobs = _blob_links(root)
        # Links left on each blob inode once the chosen builds are gone; the blob's own name is one of them.
        remaining = {ino: links - 1 for ino, (_blob, links, _size) in blobs.items()}
        freed, chosen, leased = 0, [], []
        with contextlib.ExitStack() as locks:
            for _used, digest in _candidates(root, set(exclude)):
                if not locks.enter_context(_exclusive(root, digest)):
                    leased.append(digest)
                    continue
                tree = root / "builds" / _hex(digest)
                if not tree.is_dir():
                    continue  # removed meanwhile (rm)
                chosen.append(digest)
                for ino, (count, size) in _inodes(tree / "files").items():
                    if ino in remaining:
                        remaining[ino] -= count
                        if remaining[ino] == 0:
                            freed += size
                if usage - freed <= max_bytes:
                    break
            else:
                held = f"; {len(leased)} build(s) in use by running players were spared" if leased else ""
                raise StoreFullError(
                    f"the build store {root} is bounded to {max_bytes:,} bytes (max_bytes, ${MAX_BYTES_ENV}) and "
                    f"holds {usage:,}{' ' + reason if reason else ''}; removing every build not in use would "
                    f"free only {freed:,}{held}. Nothing was removed; raise the bound or stop players"
                )
            for digest in chosen:
                _remove_build(root, digest)
            # The lease files go while their locks are held: a lease waiting on one retries and finds no build.
            for digest in chosen:
                with contextlib.suppress(FileNotFoundError):
                    lease_path(root, digest).unlink()
        actually = 0
        for ino, (blob, _links, size) in blobs.items():
            if remaining[ino] <= 0 and _free_blob(root, blob):
                actually += size
        return Eviction(tuple(chosen), actually, disk_usage(root))


def _remove_build(root: Path, digest: str) -> None:
    """Untag, then take the build away by one rename (a resolve sees it whole or not at all), then delete it."""
    tags = root / "tags"
    if tags.is_dir():
        for name_dir in tags.iterdir():
            for tag_file in name_dir.iterdir():
                with contextlib.suppress(OSError):
                    if not tag_file.name.startswith(".") and tag_file.read_text().strip() == digest:
                        tag_file.unlink()
    gone = root / "builds" / f".evicted-{_hex(digest)[:16]}-{secrets.token_hex(4)}"
    os.rename(root / "builds" / _hex(digest), gone)
    _remove_tree(gone)


def _remove_tree(root: Path) -> None:
    """A published (read-only) tree, deleted (store.remove_tree's way; not imported: store imports this module)."""
    for directory, _dirs, _files in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o755)
    shutil.rmtree(root, ignore_errors=True)


def _free_blob(root: Path, blob: Path) -> bool:
    """Unlink a blob no build links, safe against an add linking it at this moment: it is renamed aside first
    (an add then finds no blob and stores its own), and put back if a link appeared before the rename."""
    aside = root / "tmp" / f".freeing-{secrets.token_hex(8)}"
    aside.parent.mkdir(exist_ok=True)
    try:
        os.rename(blob, aside)
    except FileNotFoundError:
        return False
    if os.lstat(aside).st_nlink == 1:
        aside.unlink()
        return True
    with contextlib.suppress(FileExistsError):
        os.link(aside, blob)  # an add linked it just now: it stays a blob
    aside.unlink()
    return False


def collect_leftovers(root: str | os.PathLike) -> None:
    """``gc``'s part: blobs an evictor set aside and died before unlinking, and lease files of builds no longer
    stored that nobody holds."""
    root = Path(root)
    for aside in (root / "tmp").glob(".freeing-*"):
        with contextlib.suppress(FileNotFoundError):
            aside.unlink()  # a build linking it keeps its bytes; the blob name is what goes
    leases = root / "leases"
    if leases.is_dir():
        for path in leases.iterdir():
            if HEX.match(path.name) and not (root / "builds" / path.name).is_dir():
                with _exclusive(root, path.name) as free:
                    if free:
                        with contextlib.suppress(FileNotFoundError):
                            path.unlink()


def measure_lease_seconds(root: str | os.PathLike, digest: str, rounds: int = 1000) -> float:
    """The mean seconds of one lease and release (tests print it; docs/builds.md quotes it)."""
    start = time.perf_counter()
    for _ in range(rounds):
        lease(root, digest).release()
    return (time.perf_counter() - start) / rounds
