"""The WebGL family's part of the OpenEnv layer (a Unity WebGL build in headless Chromium, docs/webgl.md): an
action is one of the environment's declared actions, by name (``UnirenderAction.action="left"``; left out: ``noop``),
as the service's WebGL sessions take them; the image is the canvas (``rgb``); ``reward`` and ``done`` are what the
game emitted through ``window.unirender.emit`` during the step (the rewards summed, any ``done``), and ``info``
holds the emitted ``messages`` and their mappings merged (``emitted``), the keys of a WebGL dataset frame's
metadata. Raw input (a key or a ``SendMessage`` the environment did not declare) is not taken: the declaration is
the policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unirender.openenv.families import Outcome
from unirender.openenv.models import UnirenderAction
from unirender.protocol.webgl_event import FRAME_KEY
from unirender.simulator import Description
from unirender.spec.errors import did_you_mean
from unirender.spec.webgl import NOOP

CANVAS = FRAME_KEY  # the image's name, as a WebGL dataset frame and the service's WebGL event name it


class WebGLAdapter:
    behavior_name = ""

    @staticmethod
    def declare(environment: Any, document: Mapping[str, Any]) -> tuple[dict, list[str]]:
        """Controller kwargs from the environment model; the canvas is the one image."""
        return environment.controller_kwargs(), [CANVAS]

    def __init__(self, description: Description, modalities: list[str]):
        self.names = tuple(description.actions.names)  # noop first, then the declared ones
        (camera,) = description.cameras()
        self.action_spec = {"kind": "named", "actions": list(self.names)}
        self.observation_spec = {
            "modalities": [CANVAS],
            "observations": [
                {"key": CANVAS, "kind": "image", "shape": list(camera.shape), "dtype": camera.dtype}
            ],
        }

    @staticmethod
    def launch_overrides(seed: int | None) -> dict:
        return {}

    def reseeds(self, seed: int | None) -> bool:
        return False  # a page's virtual clock starts at 0 on every boot: nothing to seed

    def first_event(self, session: Any, launched: bool, options: dict) -> Any:
        if options.get("scene") is not None or options.get("environment_parameters"):
            raise ValueError(
                "a WebGL build takes no scene or environment_parameters (its reset is the declared reset_message, "
                "or a reload of the page)"
            )
        return session.last_event if launched else session.reset()

    def session_action(self, action: UnirenderAction, last_event: Any) -> str:
        if action.discrete_actions is not None or action.continuous_actions is not None:
            raise ValueError(
                "this is a WebGL build: give a declared action's name in 'action' (e.g. 'noop'), not ML-Agents' "
                "discrete_actions/continuous_actions"
            )
        name = NOOP if action.action is None else action.action
        if not isinstance(name, str):
            raise ValueError(
                f"this is a WebGL build: 'action' is a declared action's name, not {name!r}; declared: "
                f"{', '.join(self.names)}"
            )
        if name not in self.names:
            guess = did_you_mean(name, list(self.names))
            hint = f"did you mean {guess!r}? " if guess else ""
            raise ValueError(f"{name!r} is not a declared action; {hint}declared: {', '.join(self.names)}")
        return name

    def outcome(self, session: Any, event: Any, visual: bool) -> Outcome:
        return Outcome(
            event=event,
            images={CANVAS: event.frame} if visual else {},
            reward=float(event.reward),
            done=bool(event.done),
            metadata={"messages": list(event.messages), "emitted": dict(event.metadata)},
        )
