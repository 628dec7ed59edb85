"""``OutgoingMessage``: builds a message for the game, over the core's :class:`PayloadWriter`."""

from __future__ import annotations

import logging

from unirender.protocol.mlagents.side_channels import PayloadWriter

logger = logging.getLogger(__name__)


class OutgoingMessage:
    """Little-endian values appended to ``buffer`` (strings ASCII, with their int32 length)."""

    def __init__(self) -> None:
        self._writer = PayloadWriter()

    @property
    def buffer(self) -> bytearray:
        return self._writer.buffer

    def write_bool(self, b: bool) -> None:
        self._writer.bool(b)

    def write_int32(self, i: int) -> None:
        self._writer.int32(i)

    def write_float32(self, f: float) -> None:
        """Truncated to 32-bit precision."""
        self._writer.float32(f)

    def write_float32_list(self, float_list: list[float]) -> None:
        self._writer.float_list(float_list)

    def write_string(self, s: str) -> None:
        self._writer.string(s)

    def set_raw_bytes(self, buffer: bytearray) -> None:
        """Replace the whole buffer (a warning if something was written already, as mlagents-envs)."""
        if self._writer.buffer:
            logger.warning("Called set_raw_bytes but the message already has been written to. This will overwrite data.")
        self._writer.buffer = bytearray(buffer)
