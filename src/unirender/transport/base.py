"""What every transport shares: the player's token, the watched child process and the error reports.

A transport only moves bytes between the controller and one player; the protocol state (sequence ids, metadata
patches) is a sans-I/O :class:`~unirender.protocol.state.ControllerProtocol` it owns, and the decoding of images
is left to the Event, lazily.
"""

from __future__ import annotations

import abc
import os
import time
import uuid

from unirender._process import ManagedProcess, describe_exit, signal_name
from unirender.errors import PlayerCrashedError, PlayerTimeoutError
from unirender.protocol import Payload
from unirender.protocol.state import ControllerProtocol

# How long to wait for the child's exit status once its pipe/socket says it is gone: the exit code and the signal
# name are the most useful part of a crash report, and the kernel closes descriptors just before it reaps.
_EXIT_STATUS_GRACE_S = 1.0
# Poll period where no kernel notification exists (pidfd unavailable, queue waits): bounds crash detection.
WATCH_PERIOD_S = 0.05


class Transport(abc.ABC):
    """Common interface of :class:`FifoServer` and :class:`WsgiTransport` (see ``docs/internals.md``).

    ``last_action`` is the one record of the action last sent (as prepared, with its sequence id): the crash
    reports quote it and ``Controller.last_action`` reads it."""

    server_type: str = ""

    def __init__(self) -> None:
        self.client_token = str(uuid.uuid4())
        self.protocol = ControllerProtocol()
        self.process: ManagedProcess | None = None
        self.last_action: dict | None = None
        self._pidfd: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def player_env(self) -> dict[str, str]:
        """``AI2THOR_*`` variables telling the player how to reach us (not SERVER_SIDE_SCREENSHOT)."""

    def attach(self, process: ManagedProcess | None) -> None:
        """The child to watch while waiting: its exit ends any wait at once with :class:`PlayerCrashedError`."""
        self._close_pidfd()
        self.process = process
        if process is not None and hasattr(os, "pidfd_open"):
            try:
                self._pidfd = os.pidfd_open(process.pid)
            except OSError:  # already reaped, or a kernel without pidfd: fall back to polling
                self._pidfd = None

    @abc.abstractmethod
    def send(self, action: dict) -> dict: ...

    @abc.abstractmethod
    def receive(self, timeout: float | None) -> Payload: ...

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- shared helpers -------------------------------------------------------------------------------------
    def _prepare(self, action: dict) -> dict:
        prepared = self.protocol.prepare_action(action)
        self.last_action = prepared
        return prepared

    def _exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:
                pass
            self._pidfd = None

    def _crash_error(self, what: str) -> PlayerCrashedError:
        """A crash report: exit status (waiting briefly for it), last action sent, log tail."""
        process = self.process
        rc = None
        if process is not None:
            rc = process.poll()
            if rc is None:
                rc = process.wait(_EXIT_STATUS_GRACE_S)
        status = describe_exit(rc) if process is not None else "not started by us"
        name = f"{process.name} (pid {process.pid})" if process is not None else "the player"
        last = self.last_action.get("action") if self.last_action else None
        message = f"{name} {what} ({self.server_type} transport): {status}"
        message += f"; last action sent: {last!r}" if last else "; no action had been sent yet"
        return PlayerCrashedError(
            message,
            returncode=rc,
            signal_name=signal_name(rc),
            last_action=self.last_action,
            log_path=process.log_path if process else None,
            log_tail=process.log_tail() if process else "",
        )

    def _timeout_error(self, what: str, timeout: float | None) -> PlayerTimeoutError:
        process = self.process
        name = f"{process.name} (pid {process.pid}, {process.argv[0]})" if process else "the player"
        last = self.last_action.get("action") if self.last_action else None
        message = f"{name} {what} within {timeout:g} s ({self.server_type} transport)"
        if last:
            message += f"; last action sent: {last!r}"
        return PlayerTimeoutError(
            message,
            log_path=process.log_path if process else None,
            log_tail=process.log_tail() if process else "",
        )


def deadline_after(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
