"""One process-supervision helper, used by the Controller, the Xvfb manager and the session backends.

Why a helper: every child we start must be reaped, logged and killed on every error path, and must die with
us (``PR_SET_PDEATHSIG``) so that a SIGKILLed parent never leaves a player holding a display or a GPU.
"""

from __future__ import annotations

import collections
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # pragma: no cover - non-Linux
        pass


class _Spawner:
    """One long-lived daemon thread that forks every child.

    Why: Linux fires ``PR_SET_PDEATHSIG`` when the *thread* that forked the child exits, not the process. A
    player started from a short-lived worker thread (a request thread, a job worker) would otherwise be killed
    when that thread ends. Forking from one thread that lives as long as the process ties the child to the
    process, which is what we mean.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable, *args, **kwargs):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="unirender-spawner", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future.result()

    def _loop(self) -> None:
        while True:
            future, fn, args, kwargs = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)


_spawner = _Spawner()


def run_in_spawner_thread(fn: Callable, *args, **kwargs):
    """Run ``fn`` (something that forks children) on the process-wide spawner thread and return its result."""
    return _spawner.call(fn, *args, **kwargs)


def _new_spawner_after_fork() -> None:
    global _spawner
    _spawner = _Spawner()


os.register_at_fork(after_in_child=_new_spawner_after_fork)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (owned by anyone). A zombie does not: its files and sockets are
    closed already, and an orphan's zombie can wait a while for whoever reaps it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: the signal check is all we have


def signal_name(returncode: int | None) -> str | None:
    """``-11`` -> ``"SIGSEGV"``; non-negative or None -> None."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    name = signal_name(returncode)
    if name:
        return f"killed by {name} (returncode {returncode})"
    return f"exited with code {returncode}"


def tail_file(path: str | os.PathLike | None, max_lines: int = 20, max_bytes: int = 8192) -> str:
    """The last lines of a (log) file, tolerant of a missing file and of binary garbage."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-max_lines:])


def in_terminal_foreground() -> bool:
    """Whether this process is in its controlling terminal's foreground process group, i.e. whether a Ctrl-C
    typed there reaches it and every child that stays in its group. Callers start children that must not see
    that SIGINT (players: the job stops them itself) with ``new_session`` when this is true."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal (a service, a Ray worker, CI): nothing to keep them out of
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class ManagedProcess:
    """A child process with its output in a log file, reaped and killed reliably.

    ``stdout``/``stderr`` go to ``log_path`` (appended), unless ``capture`` asks for pipes (used by Xvfb's
    ``-displayfd``). The child gets ``PR_SET_PDEATHSIG=SIGKILL`` and stays in our process group unless
    ``new_session`` is set (keep it off under Ray: the actor's group cleanup must reach it).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        cwd: str | os.PathLike | None = None,
        pass_fds: Sequence[int] = (),
        new_session: bool = False,
        name: str | None = None,
    ):
        self.argv = [str(a) for a in argv]
        self.name = name or Path(self.argv[0]).name
        self.log_path = str(log_path) if log_path else None
        self._log_file = open(self.log_path, "ab", buffering=0) if self.log_path else subprocess.DEVNULL
        try:
            self.popen = run_in_spawner_thread(
                subprocess.Popen,
                self.argv,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                pass_fds=tuple(pass_fds),
                preexec_fn=_pdeathsig_preexec,
                start_new_session=new_session,
                close_fds=True,
            )
        except BaseException:
            self._close_log()
            raise
        self.pid = self.popen.pid
        self.started_at = time.monotonic()
        self._lock = threading.Lock()

    # -- state -------------------------------------------------------------------------------------------
    def poll(self) -> int | None:
        return self.popen.poll()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        return self.popen.poll() is None

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid}) {describe_exit(self.poll())}"

    def log_tail(self, max_lines: int = 20) -> str:
        return tail_file(self.log_path, max_lines=max_lines)

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    # -- ending --------------------------------------------------------------------------------------------
    def terminate(self, grace: float = 2.0) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; always reaps. Idempotent."""
        with self._lock:
            if self.popen.poll() is None:
                try:
                    self.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
                if self.wait(grace) is None:
                    self.kill()
            self._close_log()
            return self.popen.returncode

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
            self.popen.wait()

    def _close_log(self) -> None:
        f = self._log_file
        if f not in (None, subprocess.DEVNULL):
            try:
                f.close()
            except OSError:
                pass
        self._log_file = None

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.terminate()

    def __del__(self) -> None:  # last resort: never leave a child behind
        try:
            if getattr(self, "popen", None) is not None and self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait(1)
        except Exception:
            pass


class RestartBudget:
    """The controllers' restart policy: at most ``max_restarts`` restarts within a rolling ``window_s``."""

    def __init__(self, max_restarts: int, window_s: float = 600.0) -> None:
        self.max_restarts, self.window_s = int(max_restarts), float(window_s)
        self._times: collections.deque[float] = collections.deque()

    def __len__(self) -> int:
        """Restarts within the window (as of the last ``take``)."""
        return len(self._times)

    def take(self) -> bool:
        """Count one restart if the budget allows it; False (nothing counted) when it is spent."""
        now = time.monotonic()
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    def describe(self) -> str:
        return f"{len(self)} restart(s) within {self.window_s:g} s (max_restarts={self.max_restarts})"


class RestartWindow:
    """``restart_window_s`` for a controller with a ``restarts`` :class:`RestartBudget`, and its crash supervision,
    written once for every family's controller: :meth:`_supervised` runs one exchange with the player.

    On a crash (``_crash_error``) the player is shut down and, while the budget allows, relaunched, and
    ``_restarted_error`` raised (the episode is lost); beyond the budget, when the controller cannot relaunch
    (``_may_restart``) or when the relaunch fails, the controller is ended and the error raised. On a hang or garbage
    (``_unusable_errors``) the controller is ended at once. The controllers name the error types (this module sits
    below ``unirender.errors``) and fill in the hooks.
    """

    restarts: RestartBudget
    log_path: Any
    _crash_error: type[BaseException] | tuple[type[BaseException], ...]  # relaunched within the budget
    _restarted_error: type[BaseException]
    _unusable_errors: tuple[type[BaseException], ...]
    _noted_errors: tuple[type[BaseException], ...] = ()  # unusable errors that get a note naming the player log
    _ended = "stopped"  # what ending the controller is called ("stopped", "closed")

    def _shutdown_player(self) -> None:
        raise NotImplementedError

    def _relaunch(self) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError

    def _may_restart(self) -> bool:
        return True

    def _restarted_message(self, crash: BaseException) -> str:
        raise NotImplementedError

    def _supervised(self, operation: Callable[[], Any]) -> Any:
        try:
            return operation()
        except self._crash_error as crash:
            self._shutdown_player()
            if not self._may_restart() or not self.restarts.take():
                self._end()
                crash.add_note(f"unirender: not restarted ({self.restarts.describe()})")
                raise
            try:
                self._relaunch()
            except BaseException as exc:
                self._end()
                raise exc from crash
            raise self._restarted_error(self._restarted_message(crash)) from crash
        except self._unusable_errors as exc:
            if isinstance(exc, self._noted_errors):
                exc.add_note(f"unirender: the controller was {self._ended}; player log: {self.log_path}")
            self._end()
            raise

    @property
    def restart_window_s(self) -> float:
        """The rolling window ``max_restarts`` counts restarts in (seconds)."""
        return self.restarts.window_s

    @restart_window_s.setter
    def restart_window_s(self, seconds: float) -> None:
        self.restarts.window_s = float(seconds)


