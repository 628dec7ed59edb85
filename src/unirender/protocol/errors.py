"""Errors for malformed wire data. Each names what was wrong; none of them is ever a hang.

All derive from :class:`ProtocolError`, which is also a ``ValueError`` so that code written against AI2-THOR
(which raised ``ValueError`` for a sequence id mismatch) keeps working.
"""

from __future__ import annotations

from unirender.errors import UnirenderError


class ProtocolError(UnirenderError, ValueError):
    """Bytes or messages that do not follow the AI2-THOR wire protocol."""


class TruncatedFrameError(ProtocolError):
    """The stream ended (or a message was cut) in the middle of a frame or message."""


class UnknownFieldTypeError(ProtocolError):
    """A FIFO frame header carries a field type that protocol.md 3.3 does not define (or one not valid here)."""

    def __init__(self, message: str, *, field_type: int | None = None):
        self.field_type = field_type
        super().__init__(message)


class FrameTooLargeError(ProtocolError):
    """A FIFO frame or HTTP body announces more bytes than the configured limit."""

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None):
        self.size = size
        self.limit = limit
        super().__init__(message)


class MultipartError(ProtocolError):
    """A form body (multipart or urlencoded) cannot be parsed."""


class HttpFramingError(ProtocolError):
    """An HTTP request or response is not framed the way Unity and we agree on (protocol.md 2.2, 2.7)."""


class LengthRequiredError(HttpFramingError):
    """A request with a body (``POST``) has no ``Content-Length`` (HTTP 411)."""


class MetadataError(ProtocolError):
    """Metadata is missing, not JSON/msgpack, or lacks keys the protocol needs."""


class SequenceIdMismatchError(ProtocolError):
    """The player echoed a different ``sequenceId`` than the last action we sent (protocol.md 5.5)."""

    def __init__(self, message: str, *, expected: int | None = None, got: object = None):
        self.expected = expected
        self.got = got
        super().__init__(message)


class ImageSizeError(ProtocolError):
    """An image buffer's size does not fit the screen size in the metadata."""

    def __init__(
        self, message: str, *, field: str | None = None, expected: object = None, got: int | None = None
    ):
        self.field = field
        self.expected = expected
        self.got = got
        super().__init__(message)


__all__ = [
    "FrameTooLargeError",
    "HttpFramingError",
    "ImageSizeError",
    "MetadataError",
    "MultipartError",
    "ProtocolError",
    "SequenceIdMismatchError",
    "TruncatedFrameError",
    "UnknownFieldTypeError",
]
