"""Sans-I/O AI2-THOR wire protocol: FIFO frames, Unity HTTP/WWWForm, metadata patches, sequence ids, images."""

from unirender.protocol.errors import (
    FrameTooLargeError,
    HttpFramingError,
    ImageSizeError,
    LengthRequiredError,
    MetadataError,
    MultipartError,
    ProtocolError,
    SequenceIdMismatchError,
    TruncatedFrameError,
    UnknownFieldTypeError,
)
from unirender.protocol.event import Event, MultiAgentEvent, build_event
from unirender.protocol.fifo import FieldType, FifoDecoder, FifoMessage, decode_player_message, encode_message
from unirender.protocol.http import RequestReader, ResponseReader, build_response, build_train_request
from unirender.protocol.images import DepthFormat
from unirender.protocol.multipart import build_wwwform, parse_form, payload_parts_from_form
from unirender.protocol.payload import Payload
from unirender.protocol.state import ControllerProtocol, encode_json_action

__all__ = [
    "ControllerProtocol",
    "DepthFormat",
    "Event",
    "FieldType",
    "FifoDecoder",
    "FifoMessage",
    "FrameTooLargeError",
    "HttpFramingError",
    "LengthRequiredError",
    "ImageSizeError",
    "MetadataError",
    "MultiAgentEvent",
    "MultipartError",
    "Payload",
    "ProtocolError",
    "RequestReader",
    "ResponseReader",
    "SequenceIdMismatchError",
    "TruncatedFrameError",
    "UnknownFieldTypeError",
    "build_event",
    "build_response",
    "build_train_request",
    "build_wwwform",
    "decode_player_message",
    "encode_json_action",
    "encode_message",
    "parse_form",
    "payload_parts_from_form",
]
