"""The ML-Agents family's console adapter (a :class:`~unirender.service.ui.families.ConsoleFamily`, registered in
``service.ui.families.CONSOLE_FAMILIES``): a view is one camera sensor of one agent,
``<behavior>/<sensor>/<agent id>``; driving follows the behavior's declared action space (``Session.describe()``):
discrete branch 0 on the digit keys, every branch on a selector, continuous axes on sliders or held arrow keys
(axis 0: left/right, axis 1: up/down), Space steps. The chosen action goes to every agent that asks for a
decision, as one person drives all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unirender.service.errors import ApiError
from unirender.service.ui.families import UnknownView
from unirender.simulator import MLAGENTS, Description


class MLAgentsConsole:
    family = MLAGENTS
    template = "drive_mlagents.html"

    def views(self, event: Any) -> list[tuple[str, str]]:
        views = []
        if event is not None:
            for behavior in event.behavior_names:
                steps = event.decision_steps[behavior]
                short = behavior.split("?", 1)[0]
                for sensor in steps.frames:
                    for agent_id in steps.agent_id:
                        views.append((f"{behavior}/{sensor}/{int(agent_id)}", f"{short}, agent {int(agent_id)}: {sensor}"))
        return views or [("", "no camera sensor yet")]

    def check_view(self, view: str) -> str:
        parts = view.rsplit("/", 2)
        if len(parts) == 3 and all(parts) and parts[2].lstrip("-").isdigit():
            return view
        raise UnknownView(f"unknown view {view!r}: an ML-Agents view is <behavior>/<camera sensor>/<agent id>")

    def view_array(self, event: Any, view: str) -> np.ndarray | None:
        behavior, sensor, agent = self.check_view(view).rsplit("/", 2)
        steps = event.decision_steps.get(behavior)
        if steps is None:
            return None
        index = steps.agent_id_to_index.get(int(agent))
        frames = steps.frames.get(sensor) if index is not None else None
        return frames[index] if frames is not None else None  # an agent between episodes has no decision frame

    def caption(self, event: Any) -> dict:
        rewards = [float(np.sum(s.reward)) for s in event.decision_steps.values()]
        ended = sum(len(s) for s in event.terminal_steps.values())
        return {"action": "step", "success": None,
                "error": "", "reward": round(sum(rewards), 4), "episodes_ended": ended}  # fmt: skip

    def scene(self, event: Any) -> str | None:
        """An ML-Agents game has no scenes: its behaviors (names without ``?team=``) say what it is."""
        names = sorted({b.split("?", 1)[0] for b in event.behavior_names}) if event is not None else []
        return f"ML-Agents: {', '.join(names)}" if names else None

    def controls(self, description: Description | None, environment: dict) -> dict:
        behaviors = description.actions.behaviors if description is not None else {}
        return {"behaviors": {name: {"continuous": space.continuous, "discrete": list(space.discrete)}
                              for name, space in behaviors.items()}}  # fmt: skip

    def action(self, body: Any, event: Any, description: Description | None) -> tuple[Any, str]:
        """``{"behavior": name, "continuous": [c floats], "discrete": [b ints]}`` -> the API's step body
        (``{"actions": {behavior: {"continuous": n rows, "discrete": n rows}}}``) for the n agents that ask for a
        decision, the same row for each; checked against the declared space first (a 422 that names the field);
        other behaviors get zeros."""
        if not isinstance(body, dict) or not isinstance(body.get("behavior"), str):
            raise ApiError(400, "invalid_action", 'the body must be {"behavior": name, "continuous": [...], '
                           '"discrete": [...]}')
        behaviors = description.actions.behaviors if description is not None else {}
        name = body["behavior"]
        from unirender.service.mlagents_sessions import check_behavior_actions

        # The API's own check, on the one row every deciding agent gets (checked even with none deciding).
        row = {kind: [body[kind]] for kind in ("continuous", "discrete") if body.get(kind) is not None}
        checked = check_behavior_actions({name: row}, behaviors, {name: 1}, 1)[name]
        continuous, discrete = checked["continuous"][0].tolist(), checked["discrete"][0].tolist()
        steps = event.decision_steps.get(name) if event is not None else None
        n = len(steps) if steps is not None else 0
        actions = {"actions": {name: {"continuous": [continuous] * n, "discrete": [discrete] * n}}}
        label = " ".join([f"{v:+.2f}" for v in continuous] + [str(c) for c in discrete]) or "step"
        return actions, f"{name.split('?', 1)[0]} [{label}]"

    def transport(self, environment: dict) -> str:
        return "gRPC"

    def result(self, event: Any, label: str) -> dict:
        return {**self.caption(event), "action": label, "success": True}


CONSOLE = MLAgentsConsole()

__all__ = ["CONSOLE", "MLAgentsConsole"]
