"""The AI2-THOR family's part of the OpenEnv layer: an action is the action dict (``UnirenderAction.action``),
an observation the declared modalities' frames and the step's metadata. AI2-THOR has no reward or episode end of
its own: ``reward`` is None and ``done`` False (a task layer above decides both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from unirender.openenv.families import Outcome
from unirender.openenv.models import UnirenderAction
from unirender.protocol.event import MODALITY_ATTRIBUTE
from unirender.simulator import Description

# Metadata keys every observation carries (the whole document is large: objects, and is in state's player log)
STEP_METADATA_KEYS = ("lastActionSuccess", "errorMessage", "lastAction", "sceneName", "agent")


class _StepMetadata(msgspec.Struct):
    """The keys of STEP_METADATA_KEYS in an agent's msgpack map; msgspec skips the rest without building it."""

    lastActionSuccess: Any = msgspec.UNSET
    errorMessage: Any = msgspec.UNSET
    lastAction: Any = msgspec.UNSET
    sceneName: Any = msgspec.UNSET
    agent: Any = msgspec.UNSET


assert tuple(_StepMetadata.__struct_fields__) == STEP_METADATA_KEYS
_STEP_METADATA = msgspec.msgpack.Decoder(_StepMetadata)


def step_metadata(event: Any) -> dict:
    """The STEP_METADATA_KEYS of an event's metadata. Read from the player's msgpack as received where the event
    has it: decoding the whole document (``event.metadata``: every object of the scene) cost 0.5 ms a step at
    300x300, a tenth of the step, for five keys (benchmarks/README.md, "OpenEnv"). Else (metadata already read,
    a JSON player, bytes msgspec refuses) from the decoded dict, as before."""
    raw = event.metadata_msgpack() if hasattr(event, "metadata_msgpack") else None
    if raw is not None:
        try:
            scanned = _STEP_METADATA.decode(raw)
        except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
            pass
        else:
            values = {key: getattr(scanned, key) for key in STEP_METADATA_KEYS}
            return {key: value for key, value in values.items() if value is not msgspec.UNSET}
    metadata = event.metadata
    return {key: metadata[key] for key in STEP_METADATA_KEYS if key in metadata}


class AI2ThorAdapter:
    behavior_name = ""

    @staticmethod
    def declare(environment: Any, document: Mapping[str, Any]) -> tuple[dict, list[str]]:
        """Controller kwargs and modalities from the environment model and its document: a job spec's
        ``render`` section says which modalities (and their Initialize flags); without one, rgb."""
        from unirender.spec.models import RenderSpec

        render = document.get("render")
        if render is None:
            return environment.controller_kwargs(), ["rgb"]
        spec = RenderSpec.model_validate(render)
        return environment.controller_kwargs(spec), list(spec.modalities)

    def __init__(self, description: Description, modalities: list[str]):
        self.names = tuple(description.actions.names)  # empty: a Unity build, whose actions are unknown
        self.modalities = list(modalities)
        self.action_spec = {"kind": "named", "actions": list(self.names)}
        self.observation_spec = {
            "modalities": self.modalities,
            "observations": [
                {"key": o.key, "kind": o.kind, "shape": list(o.shape), "dtype": o.dtype}
                for o in description.observations
            ],
        }

    @staticmethod
    def launch_overrides(seed: int | None) -> dict:
        return {}

    def reseeds(self, seed: int | None) -> bool:
        return False  # the scene is what the reset names; a seed changes nothing in it

    def first_event(self, session: Any, launched: bool, options: dict) -> Any:
        scene = options.get("scene")
        if launched and scene is None:
            return session.last_event
        return session.reset(scene)

    def session_action(self, action: UnirenderAction, last_event: Any) -> dict:
        if action.discrete_actions is not None or action.continuous_actions is not None:
            raise ValueError(
                "this is an AI2-THOR environment: give the action dict in 'action' (e.g. {'action': 'MoveAhead'}), "
                "not ML-Agents' discrete_actions/continuous_actions"
            )
        if not isinstance(action.action, dict) or not isinstance(action.action.get("action"), str):
            raise ValueError(f"'action' must be an action dict with an 'action' name, not {action.action!r}")
        name = action.action["action"]
        if self.names and name not in self.names:
            raise ValueError(f"unknown action {name!r}; this player has {', '.join(self.names)}")
        return dict(action.action)

    def outcome(self, session: Any, event: Any, visual: bool) -> Outcome:
        images = {}
        for modality in self.modalities if visual else ():
            frame = getattr(event, MODALITY_ATTRIBUTE[modality], None)
            if frame is not None:
                images[modality] = frame
        return Outcome(event=event, images=images, metadata=step_metadata(event))
