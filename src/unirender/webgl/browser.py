"""One headless Chromium process with one page, driven over the DevTools protocol; nothing left behind.

Chromium runs in a process group of its own (its GPU, renderer and zygote processes are its children), so
``close()`` kills the whole group on every path and removes the fresh profile directory it was given. The
DevTools port is the one Chromium picked (``--remote-debugging-port=0``), read from ``DevToolsActivePort`` in
the profile: no port is chosen by us and raced for.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from unirender._process import ManagedProcess, describe_exit, signal_name
from unirender.errors import PlayerCrashedError, PlayerTimeoutError
from unirender.platforms.chromium import Renderer, browser_flags
from unirender.webgl.cdp import CDPConnection


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
        self.profile = tempfile.mkdtemp(prefix="unirender-chromium-")
        self.process: ManagedProcess | None = None
        self.page: CDPConnection | None = None
        self.log_path = log_path
        try:
            argv = [binary, *browser_flags(renderer, self.profile, width, height), "about:blank"]
            # new_session: the whole browser (GPU, renderers, zygotes) is one process group we can kill.
            self.process = ManagedProcess(argv, log_path=log_path, new_session=True, name="chromium")
            port, _ = self._devtools_port(start_timeout)
            self.page = CDPConnection(self._page_url(port, start_timeout), timeout=command_timeout)
        except BaseException:
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
            page.close()
        process, self.process = self.process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # every child too; Chromium has nothing to save
            except (ProcessLookupError, PermissionError):
                pass
            process.terminate(0)  # reaps, closes the log
            wait_group_gone(process.pid)
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = ""

    def __del__(self) -> None:  # last resort
        try:
            self.close()
        except Exception:
            pass

    # -- start-up --------------------------------------------------------------------------------------------
    def _devtools_port(self, timeout: float) -> tuple[int, str]:
        """Chromium writes ``<port>\\n<browser path>`` once it listens; there is no other announcement but its
        log line, so we look for the file, checking the process between looks."""
        path = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                port, browser_path = path.read_text().split("\n")[:2]
                if port.strip().isdigit() and browser_path.strip():
                    return int(port), browser_path.strip()
            except (OSError, ValueError):
                pass
            if not self.process.alive():
                raise self.crash_error("starting")
            if time.monotonic() > deadline:
                raise PlayerTimeoutError(f"Chromium did not open its DevTools port within {timeout:g} s",
                                         log_path=self.log_path, log_tail=self.process.log_tail())
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _page_url(self, port: int, timeout: float) -> str:
        """The websocket of the tab Chromium opened (about:blank)."""
        import json
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as answer:
            targets = json.load(answer)
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if not pages:
            raise self.crash_error("looking for its tab (none open)")
        return pages[0]["webSocketDebuggerUrl"]
