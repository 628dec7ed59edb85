"""The AI2-THOR family's console adapter (a :class:`~unirender.service.ui.families.ConsoleFamily`, registered in
``service.ui.families.CONSOLE_FAMILIES``): views are ``Event`` frame attributes (``frame``, ``depth_frame``, ...)
or a third-party camera's (``third_party_camera_frames.0``); driving is named actions on keys (``DEFAULT_KEYS``,
remappable in the page).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unirender.protocol.event import AGENT_FRAME_FIELDS, THIRD_PARTY_FRAME_FIELDS
from unirender.service.errors import ApiError
from unirender.service.ui.families import DEFAULT_KEYS, UnknownView
from unirender.simulator import AI2THOR, Description

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


class AI2ThorConsole:
    family = AI2THOR
    template = "drive_ai2thor.html"

    def views(self, event: Any) -> list[tuple[str, str]]:
        """``[(view, label)]`` for every frame this event carries, agent first, then each camera."""
        if event is None:
            return [("frame", LABELS["frame"])]
        views = [(attr, LABELS[attr]) for attr in AGENT_FRAME_FIELDS if getattr(event, attr, None) is not None]
        for attr in THIRD_PARTY_FRAME_FIELDS:
            for n, _ in enumerate(getattr(event, attr, None) or ()):
                views.append((f"{attr}.{n}", LABELS[attr].format(n=n)))
        return views or [("frame", LABELS["frame"])]

    def check_view(self, view: str) -> str:
        attr, dot, index = view.partition(".")
        if (attr in AGENT_FRAME_FIELDS and not dot) or (attr in THIRD_PARTY_FRAME_FIELDS and index.isdigit()):
            return view
        raise UnknownView(f"unknown view {view!r}: one of {sorted(AGENT_FRAME_FIELDS)} or "
                          f"<{'|'.join(sorted(THIRD_PARTY_FRAME_FIELDS))}>.<camera number>")  # fmt: skip

    def view_array(self, event: Any, view: str) -> np.ndarray | None:
        attr, dot, index = self.check_view(view).partition(".")
        value = getattr(event, attr, None)
        if dot:
            n = int(index)
            return value[n] if value is not None and n < len(value) else None
        return value

    def caption(self, event: Any) -> dict:
        meta = event.metadata or {}
        return {"action": meta.get("lastAction"), "success": meta.get("lastActionSuccess"),
                "error": meta.get("errorMessage") or ""}  # fmt: skip

    def scene(self, event: Any) -> str | None:
        return (getattr(event, "metadata", None) or {}).get("sceneName") if event is not None else None

    def controls(self, description: Description | None, environment: dict) -> dict:
        return {"keys": DEFAULT_KEYS}

    def action(self, body: Any, event: Any, description: Description | None) -> tuple[Any, str]:
        """``(what the session's step takes, a label for the page)`` from the page's POST body."""
        if not isinstance(body, dict) or not isinstance(body.get("action"), str) or not body["action"]:
            raise ApiError(400, "invalid_action", "the body must be an action object with an 'action' name, "
                           'e.g. {"action": "RotateRight", "degrees": 90}')
        return body, body["action"]

    def transport(self, environment: dict) -> str:
        return environment.get("transport", "fifo")

    def result(self, event: Any, label: str) -> dict:
        meta = event.metadata
        return {"action": label, "success": meta.get("lastActionSuccess"), "error": meta.get("errorMessage") or ""}


CONSOLE = AI2ThorConsole()

__all__ = ["CONSOLE", "LABELS", "AI2ThorConsole"]
