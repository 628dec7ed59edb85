"""Sans-I/O AI2-THOR wire protocol: FIFO frames, Unity HTTP/WWWForm, metadata patches, sequence ids, images."""

from unirender.protocol.errors import (
    FrameTooLargeError,
    HttpFramingError,
    ImageSizeError,
    MetadataError,
    MultipartError,
    ProtocolError,
    SequenceIdMismatchError,
    TruncatedFrameError,
    UnknownFieldTypeError,
)
from unirender.protocol.payload import Payload

__all__ = [
    "FrameTooLargeError",
    "HttpFramingError",
    "ImageSizeError",
    "MetadataError",
    "MultipartError",
    "Payload",
    "ProtocolError",
    "SequenceIdMismatchError",
    "TruncatedFrameError",
    "UnknownFieldTypeError",
]
