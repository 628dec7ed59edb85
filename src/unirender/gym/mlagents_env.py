"""``MLAgentsEnv``: one agent of one behavior of an ML-Agents game (a session on any backend that holds one) as a
``gymnasium.Env``: the ML-Agents family's part of the gym layer (``unirender.gym.families``); launch, close, reuse
after close and restarts are :class:`~unirender.gym.session_env.SessionEnv`'s.

Spaces come from the game's declared description (``session.describe()``): a camera sensor is a ``uint8`` ``Box``
image ``(H, W, C)`` (the exact PNG pixels), any other sensor a ``float32`` ``Box`` of its shape; one sensor gives
that ``Box``, several a ``Dict`` by sensor name. Actions: all continuous -> ``Box(-1, 1)``, all discrete ->
``MultiDiscrete(branches)``, both -> ``Dict(continuous=Box, discrete=MultiDiscrete)``, or only one of the two parts
with ``action_parts`` (the other is held at zero: what an RL library without ``Dict`` actions, such as SB3, takes).

Multi-agent games: the env drives the first decision agent after each reset (``info["agent_id"]``); every other
agent of the behavior (and every other behavior) gets zero actions. A ``UnityVectorEnv`` over ML-Agents games
runs one game per slot (docs/gym.md, "ML-Agents games"); for one policy over all agents of one game use
``MLAgentsController`` directly.

``reset(seed=s)`` launches a fresh game seeded with ``s`` (the game's ``Random.InitState``): a Unity game's state
after a reset depends on every episode before it, so only a fresh game makes a seeded reset repeatable. A reset
without a seed starts new episodes in the running game. A player that crashes and is restarted ends the episode
as truncated (``info["restarted"]``), showing the first decision of new episodes in the new player.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from unirender.cluster.base import Resources, SessionBackend
from unirender.gym.session_env import SessionEnv
from unirender.gym.video import game_fps
from unirender.simulator import BehaviorActions, Description, ObservationDescription

_MAX_IDLE_STEPS = 10_000  # steps waited for the agent to ask for a decision again (games may skip decisions)
ACTION_PARTS = ("continuous", "discrete")


def sensor_space(sensor: ObservationDescription) -> spaces.Box:
    """A sensor's ``Box``: camera images ``uint8`` HWC as ``frames`` hands them out, other sensors ``float32``."""
    if sensor.kind == "image":
        return spaces.Box(0, 255, sensor.shape, np.uint8)
    return spaces.Box(-np.inf, np.inf, sensor.shape, np.float32)


def behavior_action_space(actions: BehaviorActions, parts: str | None = None) -> spaces.Space:
    """The action space of a behavior (``parts``: only ``"continuous"`` or only ``"discrete"``, else both)."""
    continuous = spaces.Box(-1.0, 1.0, (actions.continuous,), np.float32)
    discrete = spaces.MultiDiscrete(list(actions.discrete)) if actions.discrete else None
    if parts == "continuous" or discrete is None:
        return continuous
    if parts == "discrete" or actions.continuous == 0:
        return discrete
    return spaces.Dict({"continuous": continuous, "discrete": discrete})


class MLAgentsEnv(SessionEnv):
    """``MLAgentsEnv(environment={...} | controller_kwargs={...}, behavior=None, observations=None, ...)``.

    ``environment``: an ML-Agents environment as in a job spec (a mapping; ``protocol: mlagents`` is implied) or
    ``controller_kwargs`` for ``MLAgentsController``. ``behavior``: which one (default: the only one).
    ``observations``: sensor names to observe (default all). ``action_parts``: ``"continuous"`` or
    ``"discrete"`` to act on only that part of a behavior that has both (the other part is zero). ``max_episode_steps``
    truncates. ``backend``: a ``SessionBackend`` to share or a kind for a private one (``backend_options``).
    """

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: Any = None,
        behavior: str | None = None,
        observations: Sequence[str] | None = None,
        action_parts: str | None = None,
        max_episode_steps: int | None = None,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        resources: Resources | None = None,
        render_mode: str | None = None,
    ):
        if (environment is None) == (controller_kwargs is None):
            raise ValueError("give either environment or controller_kwargs")
        if action_parts is not None and action_parts not in ACTION_PARTS:
            raise ValueError(f"action_parts must be one of {ACTION_PARTS} or None, not {action_parts!r}")
        if environment is not None:
            controller_kwargs = _environment_controller_kwargs(environment)
        self._open(
            {**dict(controller_kwargs or {}), "protocol": "mlagents"},
            backend=backend,
            backend_options=backend_options,
            resources=resources,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
        )
        self.metadata = {**self.metadata, "render_fps": game_fps(self._controller_kwargs)}  # the game's clock
        try:
            self._launch()
            self._declare(self.session.describe(), behavior, observations, action_parts)
        except BaseException:
            self.close()
            raise
        self.agent_id: int | None = None
        self.last_event = self.session.last_event

    def _declare(self, description: Description, behavior, observations, action_parts) -> None:
        """Behavior, sensors and spaces from the game's description."""
        behaviors = description.actions.behaviors
        if behavior is None:
            if len(behaviors) != 1:
                raise ValueError(f"the game has behaviors {sorted(behaviors)}: pass behavior=")
            behavior = next(iter(behaviors))
        if behavior not in behaviors:
            raise ValueError(f"the game has no behavior {behavior!r}; it has {sorted(behaviors)}")
        actions = self.behavior_actions = behaviors[behavior]
        prefix = len(behavior) + 1  # keys are "<behavior>/<sensor>", in the behavior's sensor order
        own = [o for o in description.observations if o.behavior == behavior]
        names = [o.key[prefix:] for o in own]
        unknown = [s for s in observations or [] if s not in names]
        if unknown:
            raise ValueError(f"unknown sensors {unknown}; behavior {behavior!r} has {names}")
        if action_parts == "continuous" and not actions.continuous:
            raise ValueError(
                f"behavior {behavior!r} has no continuous actions (discrete branches {actions.discrete})"
            )
        if action_parts == "discrete" and not actions.discrete:
            raise ValueError(
                f"behavior {behavior!r} has no discrete actions ({actions.continuous} continuous)"
            )
        self.behavior = behavior
        chosen = [(i, name, o) for i, (name, o) in enumerate(zip(names, own, strict=True))
                  if observations is None or name in observations]  # fmt: skip
        # (index among the behavior's sensors, name, visual, shape): what observe reads
        self.sensors = [(i, name, o.kind == "image", o.shape) for i, name, o in chosen]
        boxes = {name: sensor_space(o) for _, name, o in chosen}
        self.observation_space = next(iter(boxes.values())) if len(boxes) == 1 else spaces.Dict(boxes)
        self.action_space = behavior_action_space(actions, action_parts)
        # which part(s) of the behavior's actions a point of action_space holds
        self.action_form = (
            "dict" if isinstance(self.action_space, spaces.Dict)
            else "continuous" if isinstance(self.action_space, spaces.Box) else "discrete"
        )  # fmt: skip

    def render(self):
        if self.render_mode != "rgb_array" or self.last_event is None:
            return None
        decision = self.last_event.decision_steps[self.behavior]
        visual = [name for _, name, is_visual, _ in self.sensors if is_visual]
        if not visual or not len(decision):
            return None
        k = decision.agent_id_to_index.get(self.agent_id, 0)
        return np.asarray(decision.frames[visual[0]][k])

    # -- the family's part (SessionEnv's hooks) ---------------------------------------------------------------
    def _launch_overrides(self, seed: int | None) -> dict:
        return {"seed": int(seed)} if seed is not None else {}

    def _start_episode(self, seed: int | None, options: dict, launched: bool):
        if seed is not None:  # a fresh game seeded with it
            if not launched:
                self._stop_session()
                self._launch(seed=int(seed))
            event = self.session.last_event
        elif launched:  # a closed env's new game: its first event starts the episodes
            event = self.session.last_event
        else:
            event = self.session.reset(None, **options.get("environment_parameters", {}))
        return self._first_decision(event)

    def _session_action(self, action):
        return self._to_action(action)

    def _advance(self, action, event):
        while True:
            decision, terminal = event.decision_steps[self.behavior], event.terminal_steps[self.behavior]
            if self.agent_id in terminal.agent_id_to_index:
                k = terminal.agent_id_to_index[self.agent_id]
                self.last_event = event
                interrupted = bool(terminal.interrupted[k])
                info = {**self._info(terminal, k), "interrupted": interrupted}
                return (
                    self.observe(terminal, k),
                    float(terminal.reward[k]),
                    not interrupted,
                    interrupted,
                    info,
                )
            if self.agent_id in decision.agent_id_to_index:
                break
            event = self.session.step({})  # the agent skipped this decision: the others get zeros
        self.last_event = event
        k = decision.agent_id_to_index[self.agent_id]
        return self.observe(decision, k), float(decision.reward[k]), False, False, self._info(decision, k)

    def _restarted(self, action):
        return self._first_decision(self.session.reset())  # new episodes in the new player

    # -- internals ----------------------------------------------------------------------------------------
    def _first_decision(self, event):
        decision = self.wait_for_decision(event)
        self.agent_id = int(decision.agent_id[0])
        self._elapsed = 0
        return self.observe(decision, 0), self._info(decision, 0)

    def wait_for_decision(self, event):
        """The behavior's decision steps of ``event`` or of the next event that has some (idle steps between:
        zero actions); it becomes ``last_event``."""
        for _ in range(_MAX_IDLE_STEPS):
            decision = event.decision_steps.get(self.behavior)
            if decision is not None and len(decision):
                self.last_event = event
                return decision
            event = self.session.step({})
        raise RuntimeError(f"behavior {self.behavior!r} asked for no decision in {_MAX_IDLE_STEPS} steps")

    def _to_action(self, action) -> dict:
        """The env's action for its agent, zeros for the behavior's other decision agents (behaviors left out get
        zeros from the controller)."""
        decision = self.last_event.decision_steps[self.behavior]
        n, spec = len(decision), self.behavior_actions
        continuous = np.zeros((n, spec.continuous), np.float32)
        discrete = np.zeros((n, len(spec.discrete)), np.int32)
        k = decision.agent_id_to_index.get(self.agent_id)
        if k is not None:
            if self.action_form == "dict":
                continuous[k], discrete[k] = action["continuous"], action["discrete"]
            elif self.action_form == "continuous":
                continuous[k] = action
            else:
                discrete[k] = action
        return {self.behavior: {"continuous": continuous, "discrete": discrete}}

    def observe(self, steps, k: int):
        """Agent ``k`` of decision or terminal ``steps``, as a point of ``observation_space``."""
        values = {}
        for i, name, visual, shape in self.sensors:
            if visual:
                values[name] = np.array(steps.frames[name][k])
            else:
                values[name] = np.asarray(steps.obs[i][k], np.float32).reshape(shape)
        return next(iter(values.values())) if len(values) == 1 else values

    def _info(self, steps, k: int) -> dict:
        info: dict[str, Any] = {"agent_id": self.agent_id, "step": self._elapsed}
        mask = getattr(steps, "action_mask", None)
        if mask:
            info["action_mask"] = [np.asarray(m[k]) for m in mask]
        return info


def _environment_controller_kwargs(environment: Any) -> dict:
    """``MLAgentsController`` kwargs from an ML-Agents environment (a mapping as in a job spec, or the model)."""
    from unirender.spec.mlagents import MLAgentsEnvironmentSpec, resolve_parameters

    env = (
        environment if isinstance(environment, MLAgentsEnvironmentSpec)
        else MLAgentsEnvironmentSpec.model_validate({**environment, "protocol": "mlagents"})
    )  # fmt: skip
    kwargs = env.controller_kwargs()
    if env.environment_parameters:
        kwargs["environment_parameters"] = resolve_parameters(env.environment_parameters, 0)
    return kwargs
