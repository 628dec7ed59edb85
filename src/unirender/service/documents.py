"""Event documents: what a session's ``step``/``reset`` and a one-shot ``/v1/render`` answer, for every family,
and their encoding into a response (JSON, msgpack, multipart/mixed: :mod:`unirender.http_format`).

A document is a dict with numpy frames, encoded by :func:`encoded_body`:

- AI2-THOR (:func:`ai2thor_document`): ``{"metadata" | "metadata_json", "step" (when forwarded as sent), "frames":
  {Event.frames() name: array}}``. msgpack forwards the player's metadata as it sent it, never decoded here just to
  be re-packed (:func:`metadata_entries`).
- ML-Agents (``service.mlagents_sessions.mlagents_document``, the family's adapter): ``{"metadata": {"step",
  "behaviors": {name: {"agents": [...]}}}, "frames": {"<sensor>.<i>": uint8 (H, W, C)}}``, exactly a dataset
  frame's record (``jobs.mlagents_episodes.frame_of``).
- a one-shot render: ``{"events": [document, ...]}``.

``?modalities=`` (:func:`parse_modalities`) selects frames: AI2-THOR by spec modality (``rgb``, ``depth``, ...:
the agent's and the cameras' frames) or Event attribute name (:func:`select_ai2thor_frames`), ML-Agents by sensor
name (every agent's frame of it) or frame key (``mlagents_sessions.select_sensor_frames``). JSON carries frames only on request
(:func:`frames_wanted`). The web console reads the same documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unirender.service import http_format
from unirender.service.errors import ApiError
from unirender.service.gathered_body import GatheredBody, takes_gathered_body

# Spec modality names -> the Event's frame attributes (agent, then third-party cameras).
MODALITY_FRAMES = {
    "rgb": ("frame", "third_party_camera_frames"),
    "depth": ("depth_frame", "third_party_depth_frames"),
    "instance_segmentation": ("instance_segmentation_frame", "third_party_instance_segmentation_frames"),
    "semantic_segmentation": ("semantic_segmentation_frame", "third_party_semantic_segmentation_frames"),
    "normals": ("normals_frame", "third_party_normals_frames"),
    "flow": ("flow_frame", "third_party_flow_frames"),
}


def parse_modalities(args: Mapping[str, str]) -> list[str] | None:
    """``?modalities=rgb,depth_frame`` -> frame names; ``none`` -> []; absent -> None (the format's default)."""
    raw = args.get("modalities")
    if raw is None:
        return None
    names = [m.strip() for m in raw.split(",") if m.strip()]
    return [] if names == ["none"] else names


def frames_wanted(modalities: list[str] | None, fmt: str) -> list[str] | None:
    """What a step's document carries: JSON carries frames only on request (``?modalities=rgb,...``)."""
    if fmt == http_format.JSON and modalities is None:
        return []
    return modalities


# -- AI2-THOR ------------------------------------------------------------------------------------------------
def select_ai2thor_frames(frames: dict, wanted: list[str]) -> dict:
    """Spec modality names (``rgb``, ``depth``, ...) select the agent's and the cameras' frames; Event attribute
    names (``frame``, ``third_party_depth_frames``, ...) select exactly one; anything else is a 400."""
    selected = {}
    for name in wanted:
        if name in MODALITY_FRAMES:
            selected.update({f: frames[f] for f in MODALITY_FRAMES[name] if f in frames})
        elif name in frames:
            selected[name] = frames[name]
        else:
            raise ApiError(400, "unknown_modality",
                           f"{name!r} is not in this event; it has {sorted(frames)} (or use "
                           f"{sorted(MODALITY_FRAMES)})")
    return selected


def metadata_entries(event: Any, fmt: str | None, json_as_sent: bool = False) -> dict:
    """An AI2-THOR event's metadata for a response in ``fmt``, as document entries. msgpack: as the player sent
    it, never decoded here just to be re-packed: a FIFO player's msgpack bytes forwarded; a WSGI player's JSON
    forwarded as ``metadata_json`` (``Event.metadata_json_document``: for a one-agent scene the player's document
    itself) if the client sent ``Unirender-Metadata: as-sent`` (``json_as_sent``), else converted once
    (``Event.metadata_msgpack``); with either, ``step``: the step keys read from it here, so that the client need
    not scan it again. Otherwise (or where the event has no raw form) the decoded dict as ``metadata``."""
    if fmt == http_format.MSGPACK and hasattr(event, "metadata_msgpack"):
        text = event.metadata_json_document() if json_as_sent else None
        if text is not None:
            return {http_format.METADATA_JSON: text, http_format.STEP: event.step_keys()}
        packed = event.metadata_msgpack()
        if packed is not None:
            return {"metadata": http_format.PackedMsgpack(packed), http_format.STEP: event.step_keys()}
    return {"metadata": event.metadata}


def ai2thor_document(event: Any, modalities: list[str] | None, fmt: str | None = None,
                     json_as_sent: bool = False) -> dict:
    """An Event -> {"metadata" or "metadata_json", "step" where forwarded as sent, "frames"}; ``modalities`` None
    means every decoded modality."""
    frames = event.frames()
    if modalities is not None:
        frames = select_ai2thor_frames(frames, modalities)
    return {**metadata_entries(event, fmt, json_as_sent), "frames": frames}


# -- encoding ------------------------------------------------------------------------------------------------
class EncodedResponse:
    """A 200 with an encoded body, as a bare WSGI response: werkzeug's Response costs ~0.2 ms per frame-carrying
    response (header fix-ups, iterator wrapping) on the hot path of every step."""

    status_code = 200

    def __init__(self, body: bytes | list[bytes], content_type: str, size: int):
        self.body = [body] if isinstance(body, bytes) else body
        self.headers = {"Content-Type": content_type, "Content-Length": str(size)}

    def __call__(self, environ, start_response):
        start_response("200 OK", list(self.headers.items()))
        return self.body


def encoded_body(doc: dict, fmt: str, environ: dict | None = None) -> EncodedResponse:
    """``doc`` encoded as ``fmt``; msgpack for a channel that sends buffers as they are (the service's own server,
    ``environ`` says) as a :class:`GatheredBody` of pieces, its frames never copied into a joined body."""
    if fmt == http_format.MSGPACK and environ is not None and takes_gathered_body(environ):
        content_type, body = http_format.MSGPACK, GatheredBody(http_format.msgpack_pieces(doc))
    else:
        content_type, body = http_format.encode_document(doc, fmt)
    size = len(body) if isinstance(body, bytes) else sum(len(c) for c in body)
    return EncodedResponse(body, content_type, size)


__all__ = [
    "MODALITY_FRAMES", "EncodedResponse", "ai2thor_document", "encoded_body", "frames_wanted", "metadata_entries",
    "parse_modalities", "select_ai2thor_frames",
]  # fmt: skip
