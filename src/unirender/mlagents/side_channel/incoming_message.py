"""``IncomingMessage``: reads a message the game sent, over the core's :class:`PayloadReader`."""

from __future__ import annotations

from unirender.protocol.mlagents.side_channels import PayloadReader


class IncomingMessage:
    """Values are read in the order they were written; a read past the end returns its ``default_value``."""

    def __init__(self, buffer: bytes, offset: int = 0):
        self._reader = PayloadReader(buffer)
        self._reader.offset = offset

    @property
    def buffer(self) -> bytes:
        return self._reader.payload

    @property
    def offset(self) -> int:
        return self._reader.offset

    def read_bool(self, default_value: bool = False) -> bool:
        return self._reader.bool(default_value)

    def read_int32(self, default_value: int = 0) -> int:
        return self._reader.int32(default_value)

    def read_float32(self, default_value: float = 0.0) -> float:
        return self._reader.float32(default_value)

    def read_float32_list(self, default_value: list[float] | None = None) -> list[float]:
        return self._reader.float_list(default_value)

    def read_string(self, default_value: str = "") -> str:
        return self._reader.string(default_value)

    def get_raw_bytes(self) -> bytearray:
        """A copy of the whole message."""
        return bytearray(self._reader.payload)
