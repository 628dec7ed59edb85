"""The service's view of the HTTP body formats: :mod:`unirender.http_format` (shared with the client) plus content
negotiation, which only the service does and which uses werkzeug's ``Accept`` parser."""

from __future__ import annotations

import functools

from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from unirender.http_format import (
    BATCHED,
    BODY_HEADER,
    FORMATS,
    JSON,
    MAX_DEPTH,
    METADATA_AS_SENT,
    METADATA_HEADER,
    METADATA_JSON,
    MSGPACK,
    MULTIPART,
    NPY,
    PNG,
    STEP,
    PackedMsgpack,
    UnsupportedMediaType,
    WireError,
    array_to_npy,
    array_to_png,
    decode_document,
    decode_request_body,
    encode_document,
    encode_request_body,
    json_default,
    msgpack_pieces,
    split_multipart,
)

__all__ = [
    "BATCHED", "BODY_HEADER", "FORMATS", "JSON", "MAX_DEPTH", "METADATA_AS_SENT", "METADATA_HEADER", "METADATA_JSON", "MSGPACK", "MULTIPART", "NPY", "PNG", "STEP",
    "PackedMsgpack", "UnsupportedMediaType", "WireError",
    "json_default", "array_to_npy", "array_to_png", "decode_document", "decode_request_body", "encode_document",
    "encode_request_body", "msgpack_pieces", "negotiate", "split_multipart",
]


def negotiate(accept_header: str | None) -> str | None:
    """The response format for an ``Accept`` header: JSON when absent or ``*/*``; None when none fits."""
    if not accept_header:
        return JSON
    if len(accept_header) > _ACCEPT_CACHED:
        return _negotiate.__wrapped__(accept_header)
    return _negotiate(accept_header)


_ACCEPT_CACHED = 256  # a client sends the same Accept on every step: headers up to this long are memoised


@functools.lru_cache(maxsize=128)
def _negotiate(accept_header: str) -> str | None:
    return parse_accept_header(accept_header, MIMEAccept).best_match(FORMATS, default=None)
