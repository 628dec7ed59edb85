"""Every error unirender raises on purpose derives from :class:`UnirenderError`.

Protocol errors (bad bytes on the wire) live in :mod:`unirender.protocol.errors` and derive from
:class:`unirender.protocol.errors.ProtocolError` (itself a :class:`UnirenderError` and a ``ValueError``).
"""

from __future__ import annotations


class UnirenderError(Exception):
    """Base class of unirender's own errors."""


class PlatformError(UnirenderError):
    """No platform can run the requested player; the message lists every reason and what to install."""


class PlayerError(UnirenderError):
    """Something is wrong with the player process. ``log_path`` points at its stdout/stderr log."""

    def __init__(self, message: str, *, log_path: str | None = None, log_tail: str = ""):
        self.log_path = log_path
        self.log_tail = log_tail
        if log_path:
            message += f"\n  player log: {log_path}"
        if log_tail:
            message += "\n  last lines of the player log:\n" + "\n".join(
                "    " + line for line in log_tail.rstrip().splitlines()
            )
        super().__init__(message)


class PlayerCrashedError(PlayerError):
    """The player process exited while we were waiting on it (exit code or signal in the message)."""

    def __init__(
        self,
        message: str,
        *,
        returncode: int | None = None,
        signal_name: str | None = None,
        last_action: dict | None = None,
        log_path: str | None = None,
        log_tail: str = "",
    ):
        self.returncode = returncode
        self.signal_name = signal_name
        self.last_action = last_action
        super().__init__(message, log_path=log_path, log_tail=log_tail)


class PlayerTimeoutError(PlayerError, TimeoutError):
    """The player did not connect or did not answer in time. Also a builtin ``TimeoutError``."""


class RestartError(UnirenderError):
    """The player crashed and was restarted; the caller's episode is lost and must be started again."""


class ActionError(UnirenderError, ValueError):
    """The player rejected an action (errorCode InvalidAction, InvalidArgument, MissingArguments, ...)."""

    def __init__(self, message: str, *, error_code: str | None = None, action: dict | None = None):
        self.error_code = error_code
        self.action = action
        super().__init__(message)


class SpecError(UnirenderError, ValueError):
    """A declarative spec is invalid; ``errors`` is a list of (key path, message)."""

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None):
        self.errors = errors or []
        super().__init__(message)


def raising(exc: BaseException):
    """A function that raises ``exc``: the second half of a two-half step (``begin_step``) whose first half
    failed, so that the failure comes out where the step's outcome is taken."""

    def raise_it():
        raise exc

    return raise_it
