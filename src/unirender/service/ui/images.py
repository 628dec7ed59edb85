"""A session's frames as browser images: colour as JPEG, depth through the turbo colour map, ids as PNG.

Views are Event frame attributes (``frame``, ``depth_frame``, ``instance_segmentation_frame``, ...) or a
third-party camera's, as ``third_party_camera_frames.0``. Segmentation goes out as PNG (lossless: JPEG would
smear the colour of each object's edges); everything else as JPEG, ~5x smaller than PNG for rendered scenes.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from unirender.jobs.contact_sheet import visualize
from unirender.protocol.event import AGENT_FRAME_FIELDS, THIRD_PARTY_FRAME_FIELDS

JPEG_QUALITY = 85  # rendered scenes: no visible artefacts at 300x300, ~25 KB a frame
LOSSLESS = ("instance_segmentation", "semantic_segmentation")

# A person's words for each attribute, shown in the view selector.
LABELS = {
    "frame": "colour",
    "depth_frame": "depth (colour map: near blue, far red)",
    "instance_segmentation_frame": "instance segmentation",
    "semantic_segmentation_frame": "semantic segmentation",
    "normals_frame": "normals",
    "flow_frame": "optical flow",
    "third_party_camera_frames": "camera {n}: colour",
    "third_party_depth_frames": "camera {n}: depth",
    "third_party_instance_segmentation_frames": "camera {n}: instance segmentation",
    "third_party_semantic_segmentation_frames": "camera {n}: semantic segmentation",
    "third_party_normals_frames": "camera {n}: normals",
    "third_party_flow_frames": "camera {n}: optical flow",
}


class UnknownView(ValueError):
    pass


def available_views(event: Any) -> list[tuple[str, str]]:
    """``[(view, label)]`` for every frame this event carries, agent first, then each camera."""
    if event is None:
        return [("frame", LABELS["frame"])]
    views = [(attr, LABELS[attr]) for attr in AGENT_FRAME_FIELDS if getattr(event, attr, None) is not None]
    for attr in THIRD_PARTY_FRAME_FIELDS:
        for n, _ in enumerate(getattr(event, attr, None) or ()):
            views.append((f"{attr}.{n}", LABELS[attr].format(n=n)))
    return views or [("frame", LABELS["frame"])]


def check_view(view: str) -> str:
    attr, dot, index = view.partition(".")
    if (attr in AGENT_FRAME_FIELDS and not dot) or (attr in THIRD_PARTY_FRAME_FIELDS and index.isdigit()):
        return view
    raise UnknownView(f"unknown view {view!r}: one of {sorted(AGENT_FRAME_FIELDS)} or "
                      f"<{'|'.join(sorted(THIRD_PARTY_FRAME_FIELDS))}>.<camera number>")


def view_array(event: Any, view: str) -> np.ndarray | None:
    attr, dot, index = check_view(view).partition(".")
    value = getattr(event, attr, None)
    if dot:
        n = int(index)
        return value[n] if value is not None and n < len(value) else None
    return value


def encode_image(view: str, array: np.ndarray, *, lossless: bool = False) -> tuple[str, bytes]:
    """``(mime type, bytes)`` of one frame as a person should see it (``lossless``: always PNG)."""
    rgb, _caption = visualize(view, array)
    image = Image.fromarray(np.ascontiguousarray(rgb))
    out = io.BytesIO()
    if lossless or any(word in view for word in LOSSLESS):
        image.save(out, format="PNG", compress_level=1)
        return "image/png", out.getvalue()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return "image/jpeg", out.getvalue()
