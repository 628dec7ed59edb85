"""AI2-THOR WebGL builds through the webgl family, mapped onto unirender's AI2-THOR :class:`~unirender.Event`.

AI2-THOR's WebGL build type talks to its page through the ``JavaScriptInterface`` component on the agent
(``FPSController``) and its jslib (``unity/Assets/Plugins/WebGL.jslib``): ``Init()`` when the component starts (a
scene loaded) calls ``window.onGameLoaded()``; ``SendMetadata(json)`` calls ``window.onUnityMetadata(json)`` with
the ``MultiAgentMetadata`` document (``agents``, ``activeAgentId``, ``sequenceId``, ...) once an action is done;
actions go in with ``SendMessage("FPSController", "Step", json)`` and scenes change with
``SendMessage("PhysicsSceneManager", "SwitchScene", name)``. Jslibs that have them also call
``window.onUnityImage(key, bytes)`` (``SendImage``: an image of the action, before its metadata, in the bytes a
Linux64 player sends under the same key) and ``window.onUnityEvent(...)`` (``SendEvent(json)``: an action the build
ran by itself; ``EmitEvent(event, message)``). ``HOST_SCRIPT`` forwards all of them through
``window.unirender.emit``; a step sends the action and runs frames until the metadata arrives (bounded).

What differs from a Linux64 build (docs/webgl.md): the frame is the canvas unless the build sends its own
``image``; other images only as the build's ``SendImage`` sends them; no ``Initialize`` handshake fields the
Python server adds (``fifo``/``wsgi`` server types); time advances only with the frames a step runs.

:func:`launch` takes the AI2-THOR ``Controller``'s keyword arguments (a spec's ``controller_kwargs``): the AI2-THOR
family's launcher (``cluster.ai2thor.launch``) calls it for a WebGL build, so sessions, jobs, the service and the
gym reach this bridge as they reach a ``Controller``.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from unirender.errors import ActionError, PlayerTimeoutError
from unirender.protocol.event import THIRD_PARTY_FRAME_FIELDS, Event
from unirender.webgl.actions import Input
from unirender.webgl.controller import WebGLController, build_folder, reset_once

AGENT, SCENE_MANAGER = "FPSController", "PhysicsSceneManager"
LOADED, METADATA, IMAGE, UNITY_EVENT = "ai2thor_loaded", "ai2thor_metadata", "ai2thor_image", "ai2thor_event"
EVENTS_KEY = "unityEvents"  # the metadata key of what onUnityEvent reported during the step (when anything)
HOST_SCRIPT = f"""window.onGameLoaded = function () {{ unirender.emit({{{LOADED}: true}}); unirender.ready(); }};
window.onUnityMetadata = function (text) {{
  let doc; try {{ doc = JSON.parse(text); }} catch (e) {{ doc = {{raw: String(text)}}; }}
  unirender.emit({{{METADATA}: doc}});
}};
window.onUnityImage = function (key, bytes) {{
  // bytes is a view on the wasm heap, valid only now: copied out (base64) before Unity runs on
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  unirender.emit({{{IMAGE}: [String(key), btoa(text)]}});
}};
window.onUnityEvent = function (first, second) {{
  let value;
  if (second !== undefined) value = {{event: String(first), message: String(second)}};
  else {{ try {{ value = JSON.parse(first); }} catch (e) {{ value = {{raw: String(first)}}; }} }}
  unirender.emit({{{UNITY_EVENT}: value}});
}};"""
_THIRD_PARTY_KEYS = frozenset(THIRD_PARTY_FRAME_FIELDS.values())


def event_of(document: Mapping, frame: np.ndarray, images: Mapping[str, list[bytes]] | None = None,
             unity_events: list | None = None, depth_format: str = "Meters") -> Event:
    """An AI2-THOR Event from a WebGL build's metadata document (its active agent), the canvas frame, the images
    the build sent with ``SendImage`` (key -> buffers, in the order sent) and what it reported with
    ``onUnityEvent``."""
    agents = document.get("agents") if isinstance(document, Mapping) else None
    if agents:
        active = document.get("activeAgentId", 0) or 0
        metadata = dict(agents[active if 0 <= active < len(agents) else 0])
    else:
        metadata = dict(document)
    height, width = frame.shape[:2]
    metadata["screenWidth"], metadata["screenHeight"] = width, height
    if unity_events:
        metadata[EVENTS_KEY] = list(unity_events)
    # The player's byte layout: rows from the bottom, as Unity reads a render texture (protocol.images)
    payload: dict[str, memoryview] = {"image": memoryview(np.ascontiguousarray(frame[::-1]).reshape(-1))}
    third_party: dict[str, list[memoryview]] = {}
    for key, buffers in (images or {}).items():
        if key in _THIRD_PARTY_KEYS:
            third_party[key] = [memoryview(b) for b in buffers]
        else:
            payload[key] = memoryview(buffers[-1])
    return Event(metadata, payload, third_party, depth_format=depth_format)


class AI2THORWebGLController:
    """An AI2-THOR WebGL build in headless Chromium, answering AI2-THOR Events. ``reset(scene, **initialize)``
    switches the scene (the current one when not given, so that a reset starts over as a Controller's does) and
    sends ``Initialize`` with the parameters given so far; ``step(action)`` takes AI2-THOR's forms
    (``"MoveAhead"``, ``dict(action="RotateLeft", degrees=30)``, or keywords). ``max_action_frames`` bounds the
    frames an action may take before its metadata arrives."""

    family = "ai2thor"
    build_digest: str | None = None

    def __init__(self, build: str | os.PathLike, width: int = 300, height: int = 300, *, scene: str | None = None,
                 max_action_frames: int = 600, initialize: Mapping[str, Any] | None = None,
                 depth_format: str = "Meters", **webgl_options: Any) -> None:  # fmt: skip
        self.max_action_frames = int(max_action_frames)
        self.scene = scene
        self.initialization_parameters = dict(initialize or {})
        self.depth_format = depth_format
        self.webgl = WebGLController(build, width, height, host_script=HOST_SCRIPT, wait_for="ready",
                                     **webgl_options)
        self.last_event: Event | None = None

    # Where it runs, as describe_placement reads a controller of any family (a session's info(): pid, platform)
    @property
    def log_path(self) -> str:
        return self.webgl.log_path

    @property
    def process(self):
        return self.webgl.process

    @property
    def resolution(self):
        return self.webgl.resolution

    def reset(self, scene: str | None = None, **initialize: Any) -> Event:
        self.initialization_parameters.update(initialize)
        if scene is None:
            scene = self.scene or (self.last_event.metadata.get("sceneName") if self.last_event else None)
        controller = self.webgl
        with controller._lock:
            if scene is not None:
                controller._guarded(lambda: controller._step(
                    Input(send_message=(SCENE_MANAGER, "SwitchScene", str(scene))), None,
                    frames=self.max_action_frames, until=LOADED))
                self.scene = scene
        return self.step(dict(action="Initialize", **self.initialization_parameters))

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
        documents, images, unity_events = [], {}, []
        for m in result.messages:
            if not isinstance(m, Mapping):
                continue
            if METADATA in m:
                documents.append(m[METADATA])
            elif IMAGE in m:
                key, data = m[IMAGE]
                images.setdefault(str(key), []).append(base64.b64decode(data))
            elif UNITY_EVENT in m:
                unity_events.append(m[UNITY_EVENT])
        if not documents:
            raise PlayerTimeoutError(f"the AI2-THOR WebGL build sent no metadata for {action.get('action')!r} "
                                     f"within {self.max_action_frames} frames", log_path=controller.log_path)
        self.last_event = event_of(documents[-1], result.frame, images, unity_events, self.depth_format)
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


# Controller keyword arguments that mean nothing for a build in a browser, with the value that says so (the spec's
# defaults: every AI2-THOR spec sends them); another value is refused rather than silently dropped.
_INERT = {"server": ("fifo", "wsgi"), "quality": None, "headless": (False,),
          "x_display": (None,), "start_unity": (True,), "wsgi_fast_path": None, "player_hub": (None,)}  # fmt: skip
_TIMEOUTS = {"server_start_timeout": "boot_timeout", "server_timeout": "step_timeout"}


def launch(executable: str | os.PathLike | None = None, width: int = 300, height: int = 300, *,
           build: str | None = None, local_executable_path: str | os.PathLike | None = None, platform: Any = None,
           scene: str | None = None, gpu_device: int | str | None = None, max_restarts: int = 3,
           depth_format: str = "Meters",
           log_dir: str | os.PathLike | None = None, **kwargs: Any) -> AI2THORWebGLController:  # fmt: skip
    """An AI2-THOR WebGL build started from ``Controller``'s keyword arguments and reset once (into ``scene`` when
    given), so that it has a first event as a Controller has: the folder holding ``Build/`` (``executable``,
    ``local_executable_path``) or a store reference (``build``), the canvas size, ``gpu_device``,
    ``max_restarts``, ``server_start_timeout`` (the boot's bound) and ``server_timeout`` (a step's), and the rest
    as Initialize parameters (``renderDepthImage`` and the other image flags too: a build whose jslib has
    ``SendImage`` sends those images, one without sends none, which a job reports as missing). Settings of a player process (``server``, ``quality``, ``depth_format``) are
    ignored; ``depth_format`` is that of the depth a ``SendImage`` build sends; a headless player, an X display
    or a WSGI hub is refused."""
    platform_name = getattr(platform, "name", platform)
    if platform_name not in (None, "auto", "WebGL"):
        raise ValueError(f"an AI2-THOR WebGL build runs only on the WebGL platform, not {platform_name!r}")
    for name, allowed in _INERT.items():
        value = kwargs.pop(name, None)
        if allowed is not None and value not in (None, *allowed):
            raise ValueError(f"{name}={value!r} does not apply to an AI2-THOR WebGL build, which runs in headless "
                             "Chromium (docs/webgl.md, 'AI2-THOR WebGL builds')")
    for name in ("host", "port", "commit_id"):
        if kwargs.pop(name, None) not in (None, "127.0.0.1"):
            raise ValueError(f"{name} does not apply to an AI2-THOR WebGL build (a folder holding Build/, or a "
                             "store reference)")
    options = {webgl: kwargs.pop(name) for name, webgl in _TIMEOUTS.items() if kwargs.get(name) is not None}
    for name in _TIMEOUTS:
        kwargs.pop(name, None)
    names = [n for n in (executable, build, local_executable_path) if n is not None and os.fspath(n) != "builtin"]
    if len(names) != 1:
        raise ValueError("an AI2-THOR WebGL build needs one build: a folder holding Build/ (executable) or a store "
                         "reference (build)")
    controller = AI2THORWebGLController(build_folder(names[0]), width, height, scene=scene, initialize=kwargs,
                                        depth_format=depth_format,
                                        gpu_device=gpu_device, max_restarts=max_restarts, log_dir=log_dir,
                                        **options)  # fmt: skip
    return reset_once(controller)
