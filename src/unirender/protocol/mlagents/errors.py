"""Errors of the ML-Agents protocol core: all are :class:`~unirender.protocol.errors.ProtocolError`."""

from __future__ import annotations

import numpy as np

from unirender.protocol.errors import ProtocolError


class MLAgentsProtocolError(ProtocolError):
    """A message that does not follow the ML-Agents communicator protocol (or arrives in the wrong state)."""


class SideChannelError(MLAgentsProtocolError):
    """Side-channel bytes that cannot be framed (a record cut short, a non-ASCII string)."""


class ObservationError(MLAgentsProtocolError):
    """An observation whose data does not decode to its declared shape."""


class NonFiniteError(MLAgentsProtocolError):
    """NaN or infinite values where a game must send finite ones. ``source`` is ``"observations"``, ``"rewards"``
    or ``"group_rewards"`` (mlagents-envs' words), ``kind`` ``"NaN"`` or ``"Infinite"`` (NaN when both)."""

    def __init__(self, source: str, values: np.ndarray, where: str = ""):
        self.source = source
        self.kind = "NaN" if np.isnan(values).any() else "Infinite"
        super().__init__(f"The {source} provided had {self.kind} values{f' ({where})' if where else ''}.")

    @staticmethod
    def check(source: str, values: np.ndarray, where: str = "") -> None:
        """Raise if ``values`` holds a NaN or an infinity."""
        if values.size and not np.isfinite(values).all():
            raise NonFiniteError(source, values, where)


class VersionMismatchError(MLAgentsProtocolError):
    """The peer's communication API version is not compatible with ours; the message names both."""

    def __init__(self, message: str, *, ours: str, theirs: str, package_version: str = ""):
        self.ours, self.theirs, self.package_version = ours, theirs, package_version
        super().__init__(message)


class CommunicatorStoppedError(MLAgentsProtocolError):
    """The peer said it is closing (a header status other than 200)."""
