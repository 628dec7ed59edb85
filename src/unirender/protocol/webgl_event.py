"""The WebGL family's event, one type wherever a step's result is read: the controller builds it from what the page
gave (:meth:`WebGLEvent.from_page`), the thin client from the service's event document
(``client.webgl.event_from_document``). numpy and plain data only, so the client loads nothing of the family's own
modules (no browser, no DevTools client)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FRAME_KEY = "rgb"  # the canvas in a dataset frame, an event document and an OpenEnv observation (the one definition)


@dataclass
class WebGLEvent:
    """One step's result: ``frame`` (H, W, 3) uint8 as the canvas showed it after the step's frames (None on a
    remote session asked for no frames, ``modalities=[]``); ``messages``: every value the page emitted through
    ``window.unirender.emit`` since the previous step; ``reward`` (the sum of their ``reward`` fields), ``done`` (any
    ``done``), ``metadata`` (their mapping values merged, the latest winning); ``step``: the step count; ``action``:
    the action taken (None after a boot or a reset); ``errors``: JavaScript errors the page reported meanwhile
    (they stay on the service: empty on a remote session)."""

    frame: np.ndarray | None
    messages: list = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    metadata: dict = field(default_factory=dict)
    step: int = 0
    action: Any = None
    errors: list = field(default_factory=list)

    @classmethod
    def from_page(cls, frame: np.ndarray, messages: list, errors: list, step: int, action: Any) -> WebGLEvent:
        reward, done, metadata = 0.0, False, {}
        for message in messages:
            if isinstance(message, Mapping):
                value = message.get("reward")
                if isinstance(value, int | float) and not isinstance(value, bool):
                    reward += float(value)
                done = done or bool(message.get("done", False))
                metadata.update(message)
        return cls(frame, list(messages), reward, done, metadata, step, action, list(errors))

    def frames(self) -> dict[str, np.ndarray]:
        """``{"rgb": frame}`` (empty without a frame)."""
        return {} if self.frame is None else {FRAME_KEY: self.frame}
