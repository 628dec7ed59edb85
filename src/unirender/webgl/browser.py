"""One headless Chromium process with one page, driven over the DevTools protocol; nothing left behind.

Chromium runs in a process group of its own (its GPU, renderer and zygote processes are its children), so
``close()`` kills the whole group on every path and removes the fresh profile directory it was given. DevTools
is its pipe (``--remote-debugging-pipe``: the browser reads commands on fd 3 and writes on fd 4), never a port
(webgl/cdp.py says why); bash (dash takes only one-digit fds) puts our two pipe ends on those numbers and execs
the browser.

Chromium makes its singleton socket in a directory of its own under ``TMPDIR``
(``org.chromium.Chromium.XXXXXX/SingletonSocket``), and a Unix socket's path has 107 bytes at most: under a long
``TMPDIR`` (a test's scratch folder, say) the browser died at start with nothing but its DevTools pipe closing.
So its ``TMPDIR`` is the fresh profile, made where that path fits (``/tmp`` when the temp folder's path is too
long); whatever it leaves there goes with the profile.

A process SIGKILLed while it ran a browser (a killed job, a Ray actor torn down with its driver) cannot remove its
profile; the next browser started on the machine does (:func:`remove_stale_profiles`): a profile whose
``SingletonLock`` names this host and a process that is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time

from unirender._process import ManagedProcess, describe_exit, signal_name
from unirender.errors import PlayerCrashedError
from unirender.platforms.chromium import Renderer, browser_flags
from unirender.webgl.cdp import CDPConnection

SOCKET_PATH_MAX = 107  # sun_path's 108 bytes, less the terminating NUL
SOCKET_IN_PROFILE = len("/org.chromium.Chromium.XXXXXX/SingletonSocket")
PROFILE_PREFIX = "unirender-chromium-"
PROFILE_NAME = len(f"/{PROFILE_PREFIX}XXXXXXXX")


def profile_root() -> str:
    """Where a profile goes: the temp folder, or ``/tmp`` when the browser's socket would not fit under it."""
    root = tempfile.gettempdir()
    return root if len(root) + PROFILE_NAME + SOCKET_IN_PROFILE <= SOCKET_PATH_MAX else "/tmp"


def remove_stale_profiles(root: str) -> list[str]:
    """Remove the profiles under ``root`` left by browsers that are gone; the paths removed. Chromium's
    ``SingletonLock`` (a symlink to ``<hostname>-<pid>``, made at start) says whose a profile is: one of this host
    whose process no longer exists is stale. A profile without the lock (a browser starting now) or of another
    host (a shared /tmp) is left alone."""
    import socket

    host = socket.gethostname()
    removed = []
    try:
        names = [name for name in os.listdir(root) if name.startswith(PROFILE_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(root, name)
        try:
            owner = os.readlink(os.path.join(path, "SingletonLock"))
        except OSError:
            continue
        owner_host, _, pid = owner.rpartition("-")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def wait_group_gone(pgid: int, timeout: float = 10.0) -> list[int]:
    """Wait (bounded) until the SIGKILLed group's processes are gone; the ones still there after ``timeout``.
    SIGKILL is delivered at once but a process with much memory takes a moment to be torn down."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)  # one forked between killpg and its own death
            except ProcessLookupError:
                pass
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return left


class Browser:
    """``Browser(binary, renderer, width, height, log_path)``: started; ``page`` is the DevTools connection of
    its one tab. ``close()`` is idempotent."""

    def __init__(self, binary: str, renderer: Renderer, width: int, height: int, *, log_path: str | None,
                 start_timeout: float = 60.0, command_timeout: float = 60.0) -> None:
        root = profile_root()
        remove_stale_profiles(root)  # those of killed processes: nobody else will
        self.profile = tempfile.mkdtemp(prefix=PROFILE_PREFIX, dir=root)
        self.process: ManagedProcess | None = None
        self.page: CDPConnection | None = None
        self.log_path = log_path
        to_browser = from_browser = None
        try:
            to_browser, from_browser = os.pipe(), os.pipe()
            theirs = (to_browser[0], from_browser[1])
            argv = ["/bin/bash", "-c", f'exec "$0" "$@" 3<&{theirs[0]} 4>&{theirs[1]} {theirs[0]}<&- {theirs[1]}>&-',
                    binary, *browser_flags(renderer, self.profile, width, height), "--remote-debugging-pipe",
                    "about:blank"]
            # new_session: the whole browser (GPU, renderers, zygotes) is one process group we can kill.
            self.process = ManagedProcess(argv, log_path=log_path, new_session=True, pass_fds=theirs,
                                          env={**os.environ, "TMPDIR": self.profile}, name="chromium")
            for fd in theirs:
                os.close(fd)
            self.page = CDPConnection(to_browser[1], from_browser[0], timeout=command_timeout)
            to_browser = from_browser = None  # the connection owns our ends now
            self.page.session_id = self._attach_page(start_timeout)
        except BaseException:
            for pair in (to_browser, from_browser):
                for fd in pair or ():
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.close()
            raise

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def crash_error(self, what: str) -> PlayerCrashedError:
        """The error for a browser that died (or a tab that crashed) while we were ``what``."""
        process = self.process
        # The DevTools socket closes a moment before the process is reaped: give a dying browser that moment.
        returncode = process.wait(2.0) if process else None
        state = describe_exit(returncode) if returncode is not None else "running, but its tab crashed or closed"
        return PlayerCrashedError(
            f"Chromium (pid {self.pid}) {state} while {what}", returncode=returncode,
            signal_name=signal_name(returncode), log_path=self.log_path,
            log_tail=process.log_tail() if process else "",
        )

    def close(self) -> None:
        page, self.page = self.page, None
        if page is not None:
            page._fail_all("closed by unirender")
        process, self.process = self.process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # every child too; Chromium has nothing to save
            except (ProcessLookupError, PermissionError):
                pass
            process.terminate(0)  # reaps, closes the log
            wait_group_gone(process.pid)
        if page is not None:
            page.close()  # its reader ends: the browser's end of the pipe is gone
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = ""

    def __del__(self) -> None:  # last resort
        try:
            self.close()
        except Exception:
            pass

    # -- start-up --------------------------------------------------------------------------------------------
    def _attach_page(self, timeout: float) -> str:
        """The DevTools session of the tab Chromium opened (about:blank)."""
        targets = self.page.send("Target.getTargets", timeout=timeout, session_id=None)["targetInfos"]
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            raise self.crash_error("looking for its tab (none open)")
        attached = self.page.send("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True},
                                  timeout=timeout, session_id=None)
        return attached["sessionId"]
