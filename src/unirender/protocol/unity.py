"""The Unity side of the wire: what a player sends and how it reads actions (used by the reference player and
test fakes). Mirrors protocol.md 2.2-2.4 and 3.4-3.6 so a fake emits the bytes a real Unity build would.
"""

from __future__ import annotations

import json

import msgpack
import numpy as np

from unirender.protocol.errors import ProtocolError, UnknownFieldTypeError
from unirender.protocol.fifo import FORM_NAME_TO_FIELD_TYPE, FieldType, FifoMessage, encode_message
from unirender.protocol.multipart import build_wwwform
from unirender.protocol.state import NumpyAwareEncoder

# Per-agent and per-camera modality order inside one payload (protocol.md 2.4).
AGENT_IMAGE_FIELDS = ("image", "image_depth", "image_normals", "image_ids", "image_classes", "image_flow")
THIRD_PARTY_IMAGE_FIELDS = (
    "image-thirdParty-camera",
    "image_thirdParty_depth",
    "image_thirdParty_normals",
    "image_thirdParty_image_ids",
    "image_thirdParty_classes",
    "image_thirdParty_flow",
)

_METADATA_JSON = NumpyAwareEncoder(separators=(",", ":"))


def order_images(
    agents: list[dict[str, bytes]], cameras: list[dict[str, bytes]] = ()
) -> list[tuple[str, bytes]]:
    """Payload order of protocol.md 2.4: every third-party camera (RGB, depth, normals, ids, classes, flow), then every
    agent (``image``, depth, normals, ids, classes, flow). Each dict maps form field names to raw buffers."""
    images: list[tuple[str, bytes]] = []
    for camera in cameras:
        images.extend((name, camera[name]) for name in THIRD_PARTY_IMAGE_FIELDS if name in camera)
    for agent in agents:
        images.extend((name, agent[name]) for name in AGENT_IMAGE_FIELDS if name in agent)
    return images


def _pack(metadata: dict) -> bytes:
    return msgpack.packb(metadata, use_bin_type=True, default=_msgpack_default)


def _msgpack_default(obj):
    # numpy values in player metadata: same mapping as the JSON encoder (ndarray -> list, scalar -> Python)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialize {type(obj).__name__} in player metadata")


def encode_fifo_emission(metadata: dict, images: list[tuple[str, bytes]]) -> bytes:
    """One full emission: METADATA (msgpack) frame first, one frame per image in the given order, EOM."""
    frames: list[tuple[FieldType, bytes]] = [(FieldType.METADATA, _pack(metadata))]
    for name, data in images:
        field_type = FORM_NAME_TO_FIELD_TYPE.get(name)
        if field_type is None:
            raise ProtocolError(
                f"unknown image field name {name!r}; expected one of {sorted(FORM_NAME_TO_FIELD_TYPE)}"
            )
        frames.append((field_type, data))
    return encode_message(frames)


def encode_fifo_patch(patch: dict) -> bytes:
    """A fast-path METADATA_PATCH message (protocol.md 3.6): the patch frame and EOM, no images."""
    return encode_message([(FieldType.METADATA_PATCH, _pack(patch))])


def encode_wsgi_emission(
    metadata: dict, images: list[tuple[str, bytes]], token: str | None
) -> tuple[str, bytes]:
    """``(content_type, body)`` of a ``POST /train``: metadata first, images, token last (newer Unity order).
    Without images this is Unity's urlencoded branch."""
    fields: list[tuple[str, str | bytes]] = [("metadata", _METADATA_JSON.encode(metadata))]
    fields.extend(images)
    fields.append(("token", token or ""))
    return build_wwwform(fields)


def decode_action_json(body: bytes | memoryview) -> dict:
    """An action body (FIFO ACTION frame or HTTP response) -> dict."""
    try:
        action = json.loads(bytes(body))
    except ValueError as exc:
        raise ProtocolError(f"action is not JSON: {exc}") from exc
    if not isinstance(action, dict):
        raise ProtocolError(f"action must be a JSON object, got {type(action).__name__}")
    return action


def decode_fifo_action(msg: FifoMessage) -> dict:
    """Unity's reader: only ACTION frames are allowed; if several came, the last one wins (protocol.md 3.5)."""
    body = None
    for field_type, frame_body in msg.frames:
        if field_type is not FieldType.ACTION:
            raise UnknownFieldTypeError(
                f"invalid field type for the player: {field_type.name} (only ACTION)",
                field_type=int(field_type),
            )
        body = frame_body
    if body is None:
        raise ProtocolError("message to the player has no ACTION frame")
    return decode_action_json(body)


__all__ = [
    "AGENT_IMAGE_FIELDS",
    "THIRD_PARTY_IMAGE_FIELDS",
    "decode_action_json",
    "decode_fifo_action",
    "encode_fifo_emission",
    "encode_fifo_patch",
    "encode_wsgi_emission",
    "order_images",
]
