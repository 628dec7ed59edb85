"""AI2-THOR WebGL builds through the webgl family, mapped onto unirender's AI2-THOR :class:`~unirender.Event`.

AI2-THOR's WebGL build type talks to its page through the ``JavaScriptInterface`` component on the agent
(``FPSController``) and its jslib: ``Init()`` when the component starts (a scene loaded) calls
``window.onGameLoaded()``; ``SendMetadata(json)`` calls ``window.onUnityMetadata(json)`` with the
``MultiAgentMetadata`` document (``agents``, ``activeAgentId``, ``sequenceId``, ...) once an action is done;
actions go in with ``SendMessage("FPSController", "Step", json)`` and scenes change with
``SendMessage("PhysicsSceneManager", "SwitchScene", name)``. ``HOST_SCRIPT`` forwards both callbacks through
``window.unirender.emit``; a step sends the action and runs frames until the metadata arrives (bounded).

What differs from a Linux64 build (docs/webgl.md): the frame is the canvas (the agent's camera as the page
shows it); no depth, normals, flow, segmentation or third-party camera frames (the WebGL build has no
multipart image channel; builds with ``SendImage`` post raw bytes the bridge does not map yet); no ``Initialize``
handshake fields the Python server adds (``fifo``/``wsgi`` server types); time advances only with the frames a
step runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from unirender.errors import ActionError, PlayerTimeoutError
from unirender.protocol.event import Event
from unirender.webgl.actions import Input
from unirender.webgl.controller import WebGLController

AGENT, SCENE_MANAGER = "FPSController", "PhysicsSceneManager"
LOADED, METADATA = "ai2thor_loaded", "ai2thor_metadata"
HOST_SCRIPT = f"""window.onGameLoaded = function () {{ unirender.emit({{{LOADED}: true}}); unirender.ready(); }};
window.onUnityMetadata = function (text) {{
  let doc; try {{ doc = JSON.parse(text); }} catch (e) {{ doc = {{raw: String(text)}}; }}
  unirender.emit({{{METADATA}: doc}});
}};"""


def event_of(document: Mapping, frame: np.ndarray) -> Event:
    """An AI2-THOR Event from a WebGL build's metadata document (its active agent) and the canvas frame."""
    agents = document.get("agents") if isinstance(document, Mapping) else None
    if agents:
        active = document.get("activeAgentId", 0) or 0
        metadata = dict(agents[active if 0 <= active < len(agents) else 0])
    else:
        metadata = dict(document)
    height, width = frame.shape[:2]
    metadata["screenWidth"], metadata["screenHeight"] = width, height
    return Event(metadata, {"image": memoryview(np.ascontiguousarray(frame).reshape(-1))})


class AI2THORWebGLController:
    """An AI2-THOR WebGL build in headless Chromium, answering AI2-THOR Events. ``reset(scene, **initialize)``
    switches the scene (when given) and sends ``Initialize``; ``step(action)`` takes AI2-THOR's forms
    (``"MoveAhead"``, ``dict(action="RotateLeft", degrees=30)``, or keywords). ``max_action_frames`` bounds
    the frames an action may take before its metadata arrives."""

    family = "ai2thor"

    def __init__(self, build: str | os.PathLike, width: int = 300, height: int = 300, *,
                 max_action_frames: int = 600, **webgl_options: Any) -> None:
        self.max_action_frames = int(max_action_frames)
        self.webgl = WebGLController(build, width, height, host_script=HOST_SCRIPT, wait_for="ready",
                                     **webgl_options)
        self.last_event: Event | None = None

    def reset(self, scene: str | None = None, **initialize: Any) -> Event:
        controller = self.webgl
        with controller._lock:
            if scene is not None:
                controller._guarded(lambda: controller._step(
                    Input(send_message=(SCENE_MANAGER, "SwitchScene", str(scene))), None,
                    frames=self.max_action_frames, until=LOADED))
        return self.step(dict(action="Initialize", **initialize))

    def step(self, action: Any = None, **kwargs: Any) -> Event:
        if isinstance(action, str):
            action = dict(action=action, **kwargs)
        elif action is None:
            action = dict(kwargs)
        elif isinstance(action, Mapping):
            action = {**action, **kwargs}
        else:
            raise ActionError(f"an AI2-THOR action is a name or a dict, got {type(action).__name__}")
        if "action" not in action:
            raise ActionError("an AI2-THOR action needs an 'action' name")
        controller = self.webgl
        message = Input(send_message=(AGENT, "Step", json.dumps(action)))
        with controller._lock:
            result = controller._guarded(lambda: controller._step(message, action, frames=self.max_action_frames,
                                                                  until=METADATA))
        documents = [m[METADATA] for m in result.messages if isinstance(m, Mapping) and METADATA in m]
        if not documents:
            raise PlayerTimeoutError(f"the AI2-THOR WebGL build sent no metadata for {action.get('action')!r} "
                                     f"within {self.max_action_frames} frames", log_path=controller.log_path)
        self.last_event = event_of(documents[-1], result.frame)
        return self.last_event

    def describe(self):
        from dataclasses import replace

        from unirender.simulator import ActionDescription

        # names=(): a Unity build implements what it implements (as for a Linux64 AI2-THOR build).
        return replace(self.webgl.describe(), family=self.family, actions=ActionDescription("named"))

    def stop(self) -> None:
        self.webgl.stop()

    def __enter__(self) -> AI2THORWebGLController:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
