"""mlagents-envs' exception classes (``mlagents_envs.exception``), same names, bases and messages.

They also derive from :class:`unirender.errors.UnirenderError`, so code that catches unirender's errors catches
these too. Where unirender knows more (a crashed player's exit status, the last lines of its log), the message
carries it after mlagents-envs' own text.
"""

from __future__ import annotations

from unirender.errors import UnirenderError


class UnityException(UnirenderError):
    """Any error related to ml-agents environment."""


class UnityEnvironmentException(UnityException):
    """Related to errors starting and closing environment."""


class UnityCommunicationException(UnityException):
    """Related to errors with the communicator."""


class UnityCommunicatorStoppedException(UnityException):
    """Raised when communicator has stopped gracefully."""


class UnityObservationException(UnityException):
    """Related to errors with receiving observations."""


class UnityActionException(UnityException):
    """Related to errors with sending actions."""


class UnityTimeOutException(UnityException, TimeoutError):
    """Related to errors with communication timeouts (also a builtin ``TimeoutError``)."""


class UnitySideChannelException(UnityException):
    """Related to errors with side channels."""


class UnityWorkerInUseException(UnityException):
    """This error occurs when the port for a certain worker ID is already reserved."""

    MESSAGE_TEMPLATE = (
        "Couldn't start socket communication because worker number {} is still in use. "
        "You may need to manually close a previously opened environment "
        "or use a different worker number."
    )

    def __init__(self, worker_id):
        super().__init__(self.MESSAGE_TEMPLATE.format(str(worker_id)))


class UnityPolicyException(UnityException):
    """Related to errors with the Trainer."""
