"""Errors of the ML-Agents protocol core: all are :class:`~unirender.protocol.errors.ProtocolError`."""

from __future__ import annotations

from unirender.protocol.errors import ProtocolError


class MLAgentsProtocolError(ProtocolError):
    """A message that does not follow the ML-Agents communicator protocol (or arrives in the wrong state)."""


class SideChannelError(MLAgentsProtocolError):
    """Side-channel bytes that cannot be framed (a record cut short, a non-ASCII string)."""


class ObservationError(MLAgentsProtocolError):
    """An observation whose data does not decode to its declared shape."""


class VersionMismatchError(MLAgentsProtocolError):
    """The peer's communication API version is not compatible with ours; the message names both."""

    def __init__(self, message: str, *, ours: str, theirs: str, package_version: str = ""):
        self.ours, self.theirs, self.package_version = ours, theirs, package_version
        super().__init__(message)


class CommunicatorStoppedError(MLAgentsProtocolError):
    """The peer said it is closing (a header status other than 200)."""
