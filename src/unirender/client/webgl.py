"""The WebGL family's client adapter: :class:`RemoteWebGLSession`, registered in ``client.REMOTE_SESSIONS``, whose
events are the family's one event type, ``WebGLEvent`` (``protocol.webgl_event``: ``frame``, ``messages``,
``reward``, ``done``, ``metadata``, ``step``, ``action``), built from the service's event documents
(``service.webgl_sessions.webgl_document``: a dataset frame's record). The thin client loads nothing of the
family's own modules (no browser, no DevTools client): the event is numpy and plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from unirender.client import RemoteSessionBase
from unirender.protocol.webgl_event import FRAME_KEY, WebGLEvent
from unirender.simulator import WEBGL

if TYPE_CHECKING:
    from unirender.client import Client

# The event is the family's one event type (``protocol.webgl_event``); the old name stays as an alias.
RemoteWebGLEvent = WebGLEvent


def event_from_document(doc: Mapping[str, Any]) -> WebGLEvent:
    """An event document (``{"metadata": {"step", "action", "messages", "reward", "done", "emitted"}, "frames":
    {"rgb": image}}``) -> a :class:`WebGLEvent`."""
    metadata = doc.get("metadata") or {}
    frame = (doc.get("frames") or {}).get(FRAME_KEY)
    return WebGLEvent(
        frame=None if frame is None else np.asarray(frame),
        messages=list(metadata.get("messages") or []),
        reward=float(metadata.get("reward") or 0.0),
        done=bool(metadata.get("done", False)),
        metadata=dict(metadata.get("emitted") or {}),
        step=int(metadata.get("step") or 0),
        action=metadata.get("action"),
    )


class RemoteWebGLSession(RemoteSessionBase[WebGLEvent]):
    """A Unity WebGL build on the service: ``step(name)`` takes a declared action's name (None or ``"noop"``: a
    step without input) and ``reset()`` starts a new episode (the environment's ``reset_message``, or a reload);
    both return a :class:`WebGLEvent`."""

    family = WEBGL

    def __init__(self, client: Client, info: dict, modalities: list[str] | None = None):
        super().__init__(client, info, modalities)

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> WebGLEvent:
        return event_from_document(doc)

    def step(self, action: str | None = None) -> WebGLEvent:
        return self._event("step", self.action_body(action))

    def action_body(self, action: Any) -> dict:
        if action is None:
            return {"action": "noop"}
        if not isinstance(action, str):
            raise ValueError(f"a remote WebGL session takes a declared action's name, not {action!r} (declare "
                             "keys, clicks and SendMessage calls in environment.actions)")
        return {"action": action}

    def reset(self, scene: None = None, **params: Any) -> WebGLEvent:
        """A new episode; ``scene`` is there for the port's ``reset(scene, ...)`` (a WebGL build takes none)."""
        if scene is not None or params:
            raise ValueError("a WebGL build takes no scene or reset parameters (declare a reset_message)")
        return self._event("reset", {})

    def __enter__(self) -> RemoteWebGLSession:
        return self


__all__ = ["RemoteWebGLEvent", "RemoteWebGLSession", "WebGLEvent", "event_from_document"]
