"""The ML-Agents family's part of the OpenEnv layer, shaped as OpenEnv's own Unity environment is: one behavior is
observed (``behavior_name``; the game's first unless the declaration names one), its first agent's vector sensors
flattened into ``vector_observations`` and its camera sensors as images; an action is ``continuous_actions`` and/or
``discrete_actions``, a flat list given to every decision agent of the behavior (or one list per agent); a part
left out is zeros, as are the behaviors not named. ``done`` when the behavior's agents end an episode (terminal
steps), ``reward`` the first agent's. Events are read through their own methods: no ML-Agents module is imported
here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unirender.openenv.families import Outcome
from unirender.openenv.models import UnirenderAction
from unirender.protocol.mlagents.actions import ActionError, check_behavior_action
from unirender.protocol.mlagents.steps import ActionSpec
from unirender.simulator import Description

_MAX_IDLE_STEPS = 10_000  # steps waited for an agent to ask for a decision again (games may skip decisions)


def _rows(values: list | None, n: int, what: str) -> list[list] | None:
    """A flat list for every agent, or one list per agent (None: zeros)."""
    if values is None:
        return None
    rows = values if values and isinstance(values[0], list) else [list(values)] * n
    if len(rows) != n:
        raise ValueError(
            f"{what}: {len(rows)} lists for {n} agents asking for a decision; give one list for all"
        )
    return rows


class MLAgentsAdapter:
    def __init__(self, description: Description, modalities: list[str], behavior: str | None = None):
        self.behaviors = dict(description.actions.behaviors)
        if not self.behaviors:
            raise ValueError("the game declared no behaviors")
        if behavior is not None and behavior not in self.behaviors:
            raise ValueError(f"the game has no behavior {behavior!r}; it has {sorted(self.behaviors)}")
        self.behavior_name = behavior or next(iter(self.behaviors))
        prefix = len(self.behavior_name) + 1
        own = [o for o in description.observations if o.behavior == self.behavior_name]
        # (index among the behavior's sensors, sensor name, visual)
        self.sensors = [(i, o.key[prefix:], o.kind == "image") for i, o in enumerate(own)]
        spec = self.behaviors[self.behavior_name]
        # OpenEnv's Unity environment's keys (its _get_action_spec_info), and every behavior's space
        self.action_spec = {
            "is_discrete": bool(spec.discrete),
            "is_continuous": spec.continuous > 0,
            "discrete_size": len(spec.discrete),
            "discrete_branches": list(spec.discrete),
            "continuous_size": spec.continuous,
            "behaviors": {
                name: {"continuous_size": b.continuous, "discrete_branches": list(b.discrete)}
                for name, b in self.behaviors.items()
            },
        }
        self.observation_spec = {
            "observations": [
                {"index": i, "name": o.key[prefix:], "kind": o.kind, "shape": list(o.shape), "dtype": o.dtype}
                for i, o in enumerate(own)
            ],
            "count": len(own),
        }

    @staticmethod
    def declare(environment: Any, document: Mapping[str, Any]) -> tuple[dict, list[str]]:
        """Controller kwargs from the environment model, with its ``environment_parameters`` (samplers drawn as
        episode 0's, as the gym env and the service's sessions draw them) applied at launch; the game's sensors
        are what it declares (no modalities to choose)."""
        from unirender.spec.mlagents import resolve_parameters

        kwargs = environment.controller_kwargs()
        if environment.environment_parameters:
            kwargs["environment_parameters"] = resolve_parameters(environment.environment_parameters, 0)
        return kwargs, []

    @staticmethod
    def launch_overrides(seed: int | None) -> dict:
        return {"seed": int(seed)} if seed is not None else {}

    def reseeds(self, seed: int | None) -> bool:
        # A Unity game's state after a reset depends on every episode before it: only a fresh game seeded with
        # the seed makes a seeded reset repeatable (as unirender.gym.MLAgentsEnv does).
        return seed is not None

    def first_event(self, session: Any, launched: bool, options: dict) -> Any:
        if launched:
            return session.last_event
        return session.reset(None, **dict(options.get("environment_parameters") or {}))

    def session_action(self, action: UnirenderAction, last_event: Any) -> dict:
        if action.action is not None:
            raise ValueError(
                "this is an ML-Agents game: give continuous_actions and/or discrete_actions, not an AI2-THOR 'action'"
            )
        behavior = action.behavior_name or self.behavior_name
        if behavior not in self.behaviors:
            raise ValueError(f"the game has no behavior {behavior!r}; it has {sorted(self.behaviors)}")
        spec = self.behaviors[behavior]
        decision = last_event.decision_steps.get(behavior)
        n = len(decision) if decision is not None else 0
        rows = {
            "continuous": _rows(action.continuous_actions, n, "continuous_actions"),
            "discrete": _rows(action.discrete_actions, n, "discrete_actions"),
        }
        try:  # the one check every way in shares: widths, finite values, choices inside their branches
            checked = check_behavior_action(
                rows, ActionSpec(spec.continuous, tuple(spec.discrete)), n, behavior
            )
        except ActionError as exc:  # named by the field it was given in
            kind = exc.path.removeprefix(f"actions.{behavior}.").split(".", 1)[0]
            raise ValueError(f"{kind}_actions: {exc.message}") from None
        return {behavior: {"continuous": checked.continuous, "discrete": checked.discrete}}

    def outcome(self, session: Any, event: Any, visual: bool) -> Outcome:
        for _ in range(_MAX_IDLE_STEPS):
            terminal = event.terminal_steps.get(self.behavior_name)
            if terminal is not None and len(terminal):
                steps, done = terminal, True
                break
            decision = event.decision_steps.get(self.behavior_name)
            if decision is not None and len(decision):
                steps, done = decision, False
                break
            event = session.step({})  # no agent of the behavior asks for a decision yet: the others get zeros
        else:
            raise RuntimeError(
                f"behavior {self.behavior_name!r} asked for no decision in {_MAX_IDLE_STEPS} steps"
            )
        images, vector = {}, []
        for i, name, is_image in self.sensors:
            if is_image:
                if visual:
                    images[name] = np.asarray(steps.frames[name][0])
            else:
                vector.extend(float(v) for v in np.asarray(steps.obs[i][0], np.float32).ravel())
        metadata: dict[str, Any] = {"agent_id": int(steps.agent_id[0]), "agents": len(steps)}
        if done:
            metadata["interrupted"] = bool(steps.interrupted[0])
        return Outcome(
            event=event,
            images=images,
            vector=vector,
            reward=float(steps.reward[0]),
            done=done,
            metadata=metadata,
        )
