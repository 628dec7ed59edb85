"""The WebGL family's client adapter: :class:`RemoteWebGLSession`, registered in ``client.REMOTE_SESSIONS``, whose
events are :class:`RemoteWebGLEvent`: a ``unirender.webgl.WebGLEvent``'s fields (``frame``, ``messages``,
``reward``, ``done``, ``metadata``, ``step``, ``action``), built from the service's event documents
(``service.webgl_sessions.webgl_document``: a dataset frame's record). The thin client loads nothing of the
family's own modules (no browser, no DevTools client): the event is numpy and plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from unirender.client import RemoteSessionBase
from unirender.simulator import WEBGL

if TYPE_CHECKING:
    from unirender.client import Client

FRAME_KEY = "rgb"  # the canvas in an event document (jobs.webgl_episodes.FRAME_KEY)


@dataclass
class RemoteWebGLEvent:
    """One step's result on the service, as a local ``WebGLEvent``: ``frame`` (H, W, 3) uint8 (None when the
    session was asked for no frames, ``modalities=[]``); ``messages``: what the page emitted through
    ``window.unirender.emit`` during the step; ``reward`` (their summed ``reward``), ``done``, ``metadata`` (their
    mappings merged); ``step`` (the service's step count), ``action`` (the declared name; None after a boot or a
    reset). ``errors`` stay on the service (empty)."""

    frame: np.ndarray | None
    messages: list = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    metadata: dict = field(default_factory=dict)
    step: int = 0
    action: Any = None
    errors: list = field(default_factory=list)

    def frames(self) -> dict[str, np.ndarray]:
        return {} if self.frame is None else {FRAME_KEY: self.frame}


def event_from_document(doc: Mapping[str, Any]) -> RemoteWebGLEvent:
    """An event document (``{"metadata": {"step", "action", "messages", "reward", "done", "emitted"}, "frames":
    {"rgb": image}}``) -> :class:`RemoteWebGLEvent`."""
    metadata = doc.get("metadata") or {}
    frame = (doc.get("frames") or {}).get(FRAME_KEY)
    return RemoteWebGLEvent(
        frame=None if frame is None else np.asarray(frame),
        messages=list(metadata.get("messages") or []),
        reward=float(metadata.get("reward") or 0.0),
        done=bool(metadata.get("done", False)),
        metadata=dict(metadata.get("emitted") or {}),
        step=int(metadata.get("step") or 0),
        action=metadata.get("action"),
    )


class RemoteWebGLSession(RemoteSessionBase[RemoteWebGLEvent]):
    """A Unity WebGL build on the service: ``step(name)`` takes a declared action's name (None or ``"noop"``: a
    step without input) and ``reset()`` starts a new episode (the environment's ``reset_message``, or a reload);
    both return a :class:`RemoteWebGLEvent`."""

    family = WEBGL

    def __init__(self, client: Client, info: dict, modalities: list[str] | None = None):
        super().__init__(client, info, modalities)

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> RemoteWebGLEvent:
        return event_from_document(doc)

    def step(self, action: str | None = None) -> RemoteWebGLEvent:
        return self._event("step", self.action_body(action))

    def action_body(self, action: Any) -> dict:
        if action is None:
            return {"action": "noop"}
        if not isinstance(action, str):
            raise ValueError(f"a remote WebGL session takes a declared action's name, not {action!r} (declare "
                             "keys, clicks and SendMessage calls in environment.actions)")
        return {"action": action}

    def reset(self, scene: None = None, **params: Any) -> RemoteWebGLEvent:
        """A new episode; ``scene`` is there for the port's ``reset(scene, ...)`` (a WebGL build takes none)."""
        if scene is not None or params:
            raise ValueError("a WebGL build takes no scene or reset parameters (declare a reset_message)")
        return self._event("reset", {})

    def __enter__(self) -> RemoteWebGLSession:
        return self


__all__ = ["RemoteWebGLEvent", "RemoteWebGLSession", "event_from_document"]
