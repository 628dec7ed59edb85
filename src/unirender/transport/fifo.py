"""FIFO transport (protocol.md 3): two named pipes in a private temp dir.

``server.pipe`` carries player -> us, ``client.pipe`` us -> player. Open order (protocol.md 3.2): we open server.pipe for
reading before we ever open client.pipe for writing, both non-blocking with a deadline, so a player that never
starts is a timeout, not 5.0.0's endless ``open()``. Every wait also watches the child (a pidfd in the same
``poll``), and EOF on server.pipe is reported at once as a crash, not busy-spun until the timeout.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import shutil
import tempfile
import time
from collections import deque

from unirender._process import pid_alive
from unirender.protocol import Payload, ProtocolError
from unirender.protocol.fifo import FieldType, FifoDecoder, encode_message, split_player_message
from unirender.protocol.state import encode_json_action
from unirender.transport.base import WATCH_PERIOD_S, Transport, deadline_after, remaining

_READ_CHUNK = 1 << 20  # one read per pipe-buffer's worth; the pipe is grown to this size when allowed
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_OPEN_RETRY_S = 0.002


FIFO_DIR_PREFIX = "unirender-fifo-"


def remove_stale_fifo_dirs(base: str | None = None) -> list[str]:
    """Remove pipe dirs whose owner (the pid in the name) is dead.

    ``stop()`` removes a server's own dir; only an owner killed outright (SIGKILL, OOM, a Ray actor killed with
    its node) leaves one behind. The next server to start on the machine sweeps those up.
    """
    base = base or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(FIFO_DIR_PREFIX):
            continue
        pid_text = name[len(FIFO_DIR_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        path = os.path.join(base, name)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class FifoServer(Transport):
    """Python's end of the FIFO transport for one player."""

    server_type = "FIFO"

    def __init__(
        self,
        *,
        open_timeout: float = 60.0,
        max_frame_size: int | None = None,
        send_timeout: float | None = 100.0,
    ):
        super().__init__()
        self.open_timeout = open_timeout  # bound on opening client.pipe (the player opens it after its 1st message)
        # bound on a send() the player does not read (only an action larger than the pipe can wait at all)
        self.send_timeout = send_timeout
        self.tmp_dir: str | None = None
        self.server_pipe_path: str | None = None
        self.client_pipe_path: str | None = None
        self._read_fd: int | None = None
        self._write_fd: int | None = None
        self._connected = False  # the player has written at least one byte to server.pipe
        self._decoder = FifoDecoder(max_frame_size) if max_frame_size else FifoDecoder()
        self._pending: deque = deque()

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.tmp_dir is not None:
            return
        remove_stale_fifo_dirs()
        self.tmp_dir = tempfile.mkdtemp(prefix=f"{FIFO_DIR_PREFIX}{os.getpid()}-")
        try:
            self.server_pipe_path = os.path.join(self.tmp_dir, "server.pipe")
            self.client_pipe_path = os.path.join(self.tmp_dir, "client.pipe")
            os.mkfifo(self.server_pipe_path, 0o600)
            os.mkfifo(self.client_pipe_path, 0o600)
            # Opening the read end non-blocking never waits for a writer; doing it now means the player's
            # blocking open-for-write of server.pipe completes as soon as it tries.
            self._read_fd = os.open(self.server_pipe_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                fcntl.fcntl(self._read_fd, _F_SETPIPE_SZ, _READ_CHUNK)
            except OSError:  # above /proc/sys/fs/pipe-max-size: keep the default
                pass
        except BaseException:
            self.stop()
            raise

    def player_env(self) -> dict[str, str]:
        if self.tmp_dir is None:
            raise RuntimeError("FifoServer.player_env() before start()")
        return {
            "AI2THOR_SERVER_TYPE": "FIFO",
            "AI2THOR_FIFO_SERVER_PIPE_PATH": self.server_pipe_path,
            "AI2THOR_FIFO_CLIENT_PIPE_PATH": self.client_pipe_path,
            "AI2THOR_CLIENT_TOKEN": self.client_token,
        }

    def stop(self) -> None:
        """Close both pipes and remove the temp dir. Idempotent; the player process is the caller's."""
        for name in ("_read_fd", "_write_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._close_pidfd()
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            self.tmp_dir = None

    # -- Python -> player ---------------------------------------------------------------------------------
    def send(self, action: dict) -> dict:
        prepared = self._prepare(action)
        message = encode_message([(FieldType.ACTION, encode_json_action(prepared))])
        if self._write_fd is None:
            self._open_client_pipe()
        view = memoryview(message)
        deadline = None
        try:
            # One write: an action is far below the pipe buffer (64 KiB), so the kernel writes it whole (Unity
            # reads a frame header with one Read and must not see it split). Only a larger one (a big
            # CreateHouse) waits for the player to read, bounded and watching the child.
            while view:
                try:
                    view = view[os.write(self._write_fd, view) :]
                except BlockingIOError:
                    if deadline is None:
                        deadline = deadline_after(self.send_timeout)
                    self._wait_writable(deadline)
        except BrokenPipeError:
            raise self._crash_error("closed client.pipe") from None
        return prepared

    def _wait_writable(self, deadline: float | None) -> None:
        poller = select.poll()
        poller.register(self._write_fd, select.POLLOUT)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        wait = remaining(deadline)
        if self._pidfd is None and self.process is not None:
            wait = WATCH_PERIOD_S if wait is None else min(wait, WATCH_PERIOD_S)
        ready = {fd for fd, _mask in poller.poll(None if wait is None else wait * 1000.0)}
        if self._write_fd in ready:
            return  # writable, or the reader is gone: the next write says which
        if self._exited():
            raise self._crash_error("exited before reading its action")
        if deadline is not None and time.monotonic() >= deadline:
            raise self._timeout_error("did not read its action from client.pipe", self.send_timeout)

    def _open_client_pipe(self) -> None:
        if self._read_fd is None:
            raise RuntimeError("FifoServer.send() before start()")
        if not self._connected:
            raise RuntimeError("FifoServer.send() before the player's first message (protocol.md 3.2 open order)")
        deadline = time.monotonic() + self.open_timeout
        while True:
            try:
                fd = os.open(self.client_pipe_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as exc:  # ENXIO: the player has not opened its read end yet
                if exc.errno != errno.ENXIO:
                    raise
            if self._exited():
                raise self._crash_error("exited before opening client.pipe")
            if time.monotonic() > deadline:
                raise self._timeout_error("did not open client.pipe for reading", self.open_timeout)
            time.sleep(_OPEN_RETRY_S)
        self._write_fd = fd  # stays non-blocking: send() waits for room with a deadline

    # -- player -> Python ---------------------------------------------------------------------------------
    def receive(self, timeout: float | None) -> Payload:
        if self._read_fd is None:
            raise RuntimeError("FifoServer.receive() before start()")
        if not self._pending:
            self._read_messages(timeout)
        metadata, files, is_patch = split_player_message(self._pending.popleft())  # metadata read lazily
        if is_patch:
            return self.protocol.accept_patch(metadata)
        return self.protocol.accept(metadata, files)

    def _read_messages(self, timeout: float | None) -> None:
        """Read until at least one complete message is queued; raise on exit, EOF or deadline.

        ``poll`` only when the pipe is empty: while data is flowing, reads follow each other directly (a read
        that finds the player mid-write waits for that write on the pipe's lock, then takes all of it), so a
        300x300 three-image emission costs one ``poll`` and about five ``readv`` instead of ten of each.
        """
        deadline = deadline_after(timeout)
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        if self._pidfd is not None:
            poller.register(self._pidfd, select.POLLIN)
        fd, decoder, pending = self._read_fd, self._decoder, self._pending
        readable = False
        while not pending:
            if readable:
                try:
                    n = os.readv(fd, decoder.get_buffers())
                except BlockingIOError:
                    readable = False
                    continue
                if n == 0:  # every writer is gone: the player closed the pipe, almost always by dying
                    self._on_eof()
                self._connected = True
                try:
                    pending.extend(decoder.buffers_updated(n))
                except ProtocolError as exc:
                    raise type(exc)(f"{exc} (garbage on server.pipe from {self._who()})") from exc
                continue
            wait = remaining(deadline)
            if self._pidfd is None and self.process is not None:
                wait = WATCH_PERIOD_S if wait is None else min(wait, WATCH_PERIOD_S)
            for ready_fd, _mask in poller.poll(None if wait is None else wait * 1000.0):
                if ready_fd == fd:
                    readable = True
            if readable:
                continue
            if self._exited():
                # Exit seen on the pidfd: whatever it wrote before dying is still readable, then EOF follows.
                if self._connected and self._drain_until_eof():
                    continue
                raise self._crash_error("exited" if self._connected else "exited before connecting")
            if deadline is not None and time.monotonic() >= deadline:
                what = "did not answer" if self._connected else "did not connect (no message on server.pipe)"
                raise self._timeout_error(what, timeout)

    def _drain_until_eof(self) -> bool:
        """After the child's exit: queue any complete message still in the pipe. True if one was queued."""
        while True:
            try:
                n = os.readv(self._read_fd, self._decoder.get_buffers())
            except BlockingIOError:  # a grandchild still holds the write end: nothing more is coming from it
                return bool(self._pending)
            if n == 0:
                return bool(self._pending)
            self._pending.extend(self._decoder.buffers_updated(n))

    def _on_eof(self):
        truncated = ""
        try:
            self._decoder.end_of_stream()
        except ProtocolError as exc:
            truncated = f" in the middle of a message ({exc})"
        raise self._crash_error(f"closed server.pipe{truncated}")

    def _who(self) -> str:
        return f"{self.process.name} (pid {self.process.pid})" if self.process else "the player"
