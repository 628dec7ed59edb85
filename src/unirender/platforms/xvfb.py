"""Virtual X displays (Xvfb) that unirender starts itself: free display number, GLX, depth 24, cleaned up.

* ``-displayfd``: Xvfb picks a free display number itself (lock files make parallel starts race-free) and
  writes it to a pipe we read.
* Lifetime: ``stop()``/``release()``, an ``atexit`` hook, and PDEATHSIG. ``ManagedProcess`` asks for SIGKILL on
  the owner's death, which would leave ``/tmp/.X<n>-lock`` and the socket behind; when ``setpriv`` exists we
  re-arm PDEATHSIG as SIGTERM, which Xvfb handles by removing both. Leftovers of dead servers (e.g. Xvfb itself
  SIGKILLed) are removed before every start.
* PDEATHSIG fires when the *thread* that forked the child exits, so Xvfb is forked by one long-lived daemon
  thread, never by a short-lived worker thread that happened to resolve a platform.
* ``acquire_virtual_display()`` shares one server per process among sessions, reference counted.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import select
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field

from unirender._process import ManagedProcess, pid_alive, run_in_spawner_thread, tail_file
from unirender.errors import PlatformError
from unirender.platforms.x11 import X11_SOCKET_DIR, handshake

log = logging.getLogger(__name__)

DEFAULT_SIZE = (1280, 1024)  # large enough that most sessions share one server
START_TIMEOUT = 20.0
LOCK_RE = re.compile(r"\.X(\d+)-lock")
RECORD_RE = re.compile(r"X(\d+)")


@dataclass(frozen=True)
class ScreenSpec:
    width: int
    height: int
    depth: int = 24

    def arg(self) -> str:
        return f"{self.width}x{self.height}x{self.depth}"


@dataclass
class VirtualDisplay:
    """A running Xvfb. ``display`` is ``":N"``; use ``stop()`` (owner) or ``release()`` (shared lease)."""

    number: int
    screens: list[ScreenSpec]
    process: ManagedProcess
    log_dir: str
    shared: bool = False
    refs: int = 0
    _stopped: bool = field(default=False, repr=False)

    @property
    def display(self) -> str:
        return f":{self.number}"

    @property
    def width(self) -> int:
        return self.screens[0].width

    @property
    def height(self) -> int:
        return self.screens[0].height

    @property
    def socket_path(self) -> str:
        return f"{X11_SOCKET_DIR}/X{self.number}"

    def alive(self) -> bool:
        return not self._stopped and self.process.alive()

    def fits(self, width: int, height: int) -> bool:
        s = self.screens[0]
        return s.width >= width and s.height >= height and s.depth == 24

    def release(self) -> None:
        """Drop one lease of a shared display; the last one stops it."""
        _release_shared(self)

    def stop(self) -> None:
        """SIGTERM (Xvfb then removes its lock file and socket), SIGKILL after a grace; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.process.terminate(grace=3.0)
        _remove_files_of(self.number, self.process.pid)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        with _registry_lock:
            if self in _started:
                _started.remove(self)
        log.info("stopped Xvfb %s (pid %d)", self.display, self.process.pid)

    def __enter__(self) -> VirtualDisplay:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# -- stale files ------------------------------------------------------------------------------------------
# With -displayfd Xvfb writes no /tmp/.X<n>-lock, only its socket; so we keep our own record of which pid
# holds which number, to recognise a leftover socket as ours and dead without touching anybody else's.
RECORD_DIR = os.path.join(tempfile.gettempdir(), f"unirender-xvfb-{os.getuid()}")


def _read_pid(path: str) -> int | None:
    """The pid on the first line of a lock file or one of our records."""
    try:
        with open(path) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def _recorded_log_dir(record: str) -> str | None:
    """The log folder a record names (its second line), if it is one of ours under the temp dir."""
    try:
        with open(record) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    path = lines[1] if len(lines) > 1 else ""
    ours = os.path.join(tempfile.gettempdir(), "unirender-xvfb-")
    return path if path.startswith(ours) and os.sep not in path[len(ours):] else None


def _socket_refuses(number: int) -> bool:
    """True when the socket file exists and nothing listens on it (a leftover of a dead server)."""
    path = f"{X11_SOCKET_DIR}/X{number}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)
    try:
        sock.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return os.path.exists(path)
    except OSError:
        return False
    finally:
        sock.close()
    return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)


def _remove_files_of(number: int, pid: int) -> None:
    """After server ``pid`` of display ``number`` is gone: its lock, its socket (if dead) and our record."""
    if _read_pid(f"/tmp/.X{number}-lock") == pid:
        _unlink(f"/tmp/.X{number}-lock")
    if _socket_refuses(number):
        _unlink(f"{X11_SOCKET_DIR}/X{number}")
    record = os.path.join(RECORD_DIR, f"X{number}")
    if _read_pid(record) == pid:
        # An owner that died without stop() (SIGKILL) leaves the log folder: it goes with the record.
        log_dir = _recorded_log_dir(record)
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
        _unlink(record)


def _write_record(number: int, pid: int, log_dir: str) -> None:
    os.makedirs(RECORD_DIR, mode=0o700, exist_ok=True)
    previous = os.path.join(RECORD_DIR, f"X{number}")
    if _read_pid(previous) not in (None, pid):
        # Display numbers are reused: the server this record named is gone (ours holds :number now), and
        # without this its log folder would outlive the record we are about to overwrite.
        stale = _recorded_log_dir(previous)
        if stale is not None and stale != log_dir:
            shutil.rmtree(stale, ignore_errors=True)
    tmp = os.path.join(RECORD_DIR, f".X{number}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{pid}\n{log_dir}\n")
    os.replace(tmp, os.path.join(RECORD_DIR, f"X{number}"))


def clean_stale_displays() -> list[int]:
    """Remove what dead servers left: our recorded Xvfbs' sockets, and lock files naming dead pids."""
    cleaned = set()
    for directory, pattern in ((RECORD_DIR, RECORD_RE), ("/tmp", LOCK_RE)):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            m = pattern.fullmatch(name)
            if not m:
                continue
            number = int(m.group(1))
            pid = _read_pid(os.path.join(directory, name))
            if pid is not None and pid > 0 and not pid_alive(pid):
                _remove_files_of(number, pid)
                cleaned.add(number)
                log.info("removed files left by dead X server :%d (pid %d)", number, pid)
    return sorted(cleaned)


# -- starting ---------------------------------------------------------------------------------------------
def xvfb_path() -> str | None:
    return shutil.which("Xvfb")


_registry_lock = threading.RLock()
_started: list[VirtualDisplay] = []
_shared: list[VirtualDisplay] = []


def start_xvfb(
    screens: list[ScreenSpec] | None = None,
    *,
    glx: bool = True,
    extra_args: list[str] | tuple[str, ...] = (),
    timeout: float = START_TIMEOUT,
) -> VirtualDisplay:
    """Start a private Xvfb (the caller owns it: ``stop()`` or use it as a context manager)."""
    screens = screens or [ScreenSpec(*DEFAULT_SIZE)]
    binary = xvfb_path()
    if not binary:
        raise PlatformError("Xvfb is not installed: sudo apt-get install -y xvfb")
    clean_stale_displays()
    argv = [binary, "-nolisten", "tcp", "-noreset", "+extension" if glx else "-extension", "GLX", "+render"]
    for index, screen in enumerate(screens):
        argv += ["-screen", str(index), screen.arg()]
    argv += list(extra_args)
    setpriv = shutil.which("setpriv")
    if setpriv:  # re-arm PDEATHSIG as SIGTERM so that Xvfb cleans up after itself when we die
        argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
    display = run_in_spawner_thread(_spawn, argv, screens, timeout)
    with _registry_lock:
        _started.append(display)
    return display


def _spawn(argv: list[str], screens: list[ScreenSpec], timeout: float) -> VirtualDisplay:
    log_dir = tempfile.mkdtemp(prefix="unirender-xvfb-")
    log_path = os.path.join(log_dir, "xvfb.log")
    read_fd, write_fd = os.pipe()
    proc = None
    number: int | None = None
    try:
        argv = list(argv)
        insert_at = argv.index("-nolisten")
        argv[insert_at:insert_at] = ["-displayfd", str(write_fd)]
        proc = ManagedProcess(argv, log_path=log_path, pass_fds=[write_fd], name="Xvfb")
        os.close(write_fd)
        write_fd = -1
        number = _read_display_number(read_fd, proc, timeout)
        deadline = time.monotonic() + timeout
        while (why := handshake(number, timeout=2.0)) is not None:
            if not proc.alive() or time.monotonic() > deadline:
                raise PlatformError(f"Xvfb :{number} does not answer: {why}")
            time.sleep(0.02)
    except BaseException as exc:
        tail = tail_file(log_path, 10)
        if proc is not None:
            proc.terminate(grace=2.0)
            if number is not None:
                _remove_files_of(number, proc.pid)
        shutil.rmtree(log_dir, ignore_errors=True)
        if isinstance(exc, PlatformError):
            raise PlatformError(f"{exc}\n  Xvfb command: {' '.join(argv)}\n  Xvfb log:\n{tail}") from None
        raise
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    _write_record(number, proc.pid, log_dir)
    log.info("started Xvfb :%d (pid %d, screens %s)", number, proc.pid, [s.arg() for s in screens])
    return VirtualDisplay(number=number, screens=list(screens), process=proc, log_dir=log_dir)


def _read_display_number(fd: int, proc: ManagedProcess, timeout: float) -> int:
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PlatformError(f"Xvfb did not report its display number within {timeout:g} s")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(fd, 64)
            if not chunk:
                raise PlatformError(f"Xvfb exited before reporting a display number: {proc.describe()}")
            data += chunk
        elif not proc.alive():
            raise PlatformError(f"Xvfb exited before reporting a display number: {proc.describe()}")
    return int(data.split(b"\n", 1)[0])


# -- sharing ----------------------------------------------------------------------------------------------
def acquire_virtual_display(width: int, height: int) -> VirtualDisplay:
    """A shared Xvfb at least ``width`` x ``height`` (depth 24, GLX); call ``release()`` once per acquire."""
    with _registry_lock:
        for display in list(_shared):
            if not display.alive():
                log.warning(
                    "shared Xvfb %s died (%s); starting another", display.display, display.process.describe()
                )
                _shared.remove(display)
                display.stop()
            elif display.fits(width, height):
                display.refs += 1
                return display
        size = ScreenSpec(max(width, DEFAULT_SIZE[0]), max(height, DEFAULT_SIZE[1]))
        display = start_xvfb([size])
        display.shared = True
        display.refs = 1
        _shared.append(display)
        return display


def lease_shared(number: int) -> VirtualDisplay | None:
    """Another lease on our shared display ``:number`` (when a scan found it), so it outlives its first user."""
    with _registry_lock:
        for display in _shared:
            if display.number == number and display.alive():
                display.refs += 1
                return display
    return None


def _release_shared(display: VirtualDisplay) -> None:
    with _registry_lock:
        if display.refs > 0:
            display.refs -= 1
        if display.refs == 0:
            if display in _shared:
                _shared.remove(display)
            display.stop()


def started_here(number: int) -> VirtualDisplay | None:
    """The live Xvfb this process started on ``:number``, if any."""
    with _registry_lock:
        return next((d for d in _started if d.number == number and d.alive()), None)


def shared_displays() -> list[VirtualDisplay]:
    with _registry_lock:
        return list(_shared)


@atexit.register
def stop_all() -> None:
    """Stop every Xvfb this process started (also registered with ``atexit``)."""
    with _registry_lock:
        displays = list(_started)
        _shared.clear()
    for display in displays:
        display.stop()


def _forget_after_fork() -> None:
    """A forked child does not own its parent's servers: it must neither share nor stop them at its exit."""
    global _registry_lock
    _registry_lock = threading.RLock()
    _started.clear()
    _shared.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
