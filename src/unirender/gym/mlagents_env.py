"""``MLAgentsEnv``: one agent of one behavior of an ML-Agents game (a session on any backend that holds one) as a
``gymnasium.Env``.

Spaces come from the game's ``BehaviorSpec``: a camera sensor is a ``uint8`` ``Box`` image ``(H, W, C)`` (the exact
PNG pixels), any other sensor a ``float32`` ``Box`` of its shape; one sensor gives that ``Box``, several a ``Dict``
by sensor name. Actions: all continuous -> ``Box(-1, 1)``, all discrete -> ``MultiDiscrete(branches)``, both ->
``Dict(continuous=Box, discrete=MultiDiscrete)``.

Multi-agent games: the env drives the first decision agent after each reset (``info["agent_id"]``); every other
agent of the behavior (and every other behavior) gets zero actions. For one policy over all agents use
``MLAgentsController`` directly, or one env per game.

``reset(seed=s)`` launches a fresh game seeded with ``s`` (the game's ``Random.InitState``): a Unity game's state
after a reset depends on every episode before it, so only a fresh game makes a seeded reset repeatable. A reset
without a seed starts new episodes in the running game.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from unirender.cluster.base import Resources, SessionBackend
from unirender.cluster.mlagents import behavior_specs
from unirender.cluster.registry import create_backend

_MAX_IDLE_STEPS = 10_000  # steps waited for the agent to ask for a decision again (games may skip decisions)


def _space_of(obs_spec, decision) -> spaces.Box:
    if obs_spec.is_visual:  # the frames' shape: HWC whatever the wire's layout
        return spaces.Box(0, 255, decision.frames[obs_spec.name].shape[1:], np.uint8)
    return spaces.Box(-np.inf, np.inf, obs_spec.shape, np.float32)


def action_space_of(action_spec) -> spaces.Space:
    continuous = spaces.Box(-1.0, 1.0, (action_spec.continuous_size,), np.float32)
    discrete = (
        spaces.MultiDiscrete(list(action_spec.discrete_branches)) if action_spec.discrete_size else None
    )
    if discrete is None:
        return continuous
    if action_spec.continuous_size == 0:
        return discrete
    return spaces.Dict({"continuous": continuous, "discrete": discrete})


class MLAgentsEnv(gymnasium.Env):
    """``MLAgentsEnv(environment={...} | controller_kwargs={...}, behavior=None, observations=None, ...)``.

    ``environment``: an ML-Agents environment as in a job spec (a mapping; ``protocol: mlagents`` is implied) or
    ``controller_kwargs`` for ``MLAgentsController``. ``behavior``: which one (default: the only one).
    ``observations``: sensor names to observe (default all). ``max_episode_steps`` truncates. ``backend``: a
    ``SessionBackend`` to share or a kind for a private one (``backend_options``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: dict | None = None,
        behavior: str | None = None,
        observations: Sequence[str] | None = None,
        max_episode_steps: int | None = None,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        resources: Resources | None = None,
        render_mode: str | None = None,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        if (environment is None) == (controller_kwargs is None):
            raise ValueError("give either environment or controller_kwargs")
        if environment is not None:
            from unirender.spec.mlagents import MLAgentsEnvironmentSpec, resolve_parameters

            env = MLAgentsEnvironmentSpec.model_validate({**environment, "protocol": "mlagents"})
            controller_kwargs = env.controller_kwargs()
            if env.environment_parameters:
                controller_kwargs["environment_parameters"] = resolve_parameters(
                    env.environment_parameters, 0
                )
        self._kwargs = {**dict(controller_kwargs or {}), "protocol": "mlagents"}
        self.render_mode = render_mode
        self.max_episode_steps = max_episode_steps
        self._backend_kind = backend if isinstance(backend, str) else None
        self._backend_options = backend_options or {}
        self._resources = resources
        self.backend: SessionBackend | None = None if self._backend_kind else backend
        self.session = None
        try:
            self._launch(self._kwargs.get("seed", 0))
            specs = self._specs = behavior_specs(self.session)
            if behavior is None:
                if len(specs) != 1:
                    raise ValueError(f"the game has behaviors {sorted(specs)}: pass behavior=")
                behavior = next(iter(specs))
            if behavior not in specs:
                raise ValueError(f"the game has no behavior {behavior!r}; it has {sorted(specs)}")
            self.behavior, self.behavior_spec = behavior, specs[behavior]
            names = self.behavior_spec.sensor_names
            unknown = [s for s in observations or [] if s not in names]
            if unknown:
                raise ValueError(f"unknown sensors {unknown}; behavior {behavior!r} has {names}")
            self.sensors = [(i, o) for i, o in enumerate(self.behavior_spec.observation_specs)
                            if observations is None or o.name in observations]  # fmt: skip
        except BaseException:
            self.close()
            raise
        first = self._wait_for_decision(self.session.last_event)
        boxes = {o.name: _space_of(o, first) for _, o in self.sensors}
        self.observation_space = next(iter(boxes.values())) if len(boxes) == 1 else spaces.Dict(boxes)
        self.action_space = action_space_of(self.behavior_spec.action_spec)
        self.agent_id: int | None = None
        self.last_event = self.session.last_event
        self._elapsed = 0

    # -- gymnasium.Env -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None or self.session is None:
            self._stop_session()
            self._launch(seed if seed is not None else self._kwargs.get("seed", 0))  # a fresh, seeded game
            event = self.session.last_event
        else:
            event = self.session.reset(None, **(options or {}).get("environment_parameters", {}))
        decision = self._wait_for_decision(event)
        self.agent_id = int(decision.agent_id[0])
        self._elapsed = 0
        steps = decision
        return self._observe(steps, 0), self._info(steps, 0)

    def step(self, action):
        if self.session is None:
            raise gymnasium.error.ClosedEnvironmentError("this MLAgentsEnv was closed: call reset() first")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        event = self.session.step(self._actions(self.last_event, action))
        self._elapsed += 1
        while True:
            decision, terminal = event.decision_steps[self.behavior], event.terminal_steps[self.behavior]
            if self.agent_id in terminal.agent_id_to_index:
                k = terminal.agent_id_to_index[self.agent_id]
                self.last_event = event
                interrupted = bool(terminal.interrupted[k])
                info = {**self._info(terminal, k), "interrupted": interrupted}
                return (
                    self._observe(terminal, k),
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
        truncated = self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps
        return (
            self._observe(decision, k),
            float(decision.reward[k]),
            False,
            bool(truncated),
            self._info(decision, k),
        )

    def render(self):
        if self.render_mode != "rgb_array" or self.last_event is None:
            return None
        decision = self.last_event.decision_steps[self.behavior]
        visual = [o.name for _, o in self.sensors if o.is_visual]
        if not visual or not len(decision):
            return None
        k = decision.agent_id_to_index.get(self.agent_id, 0)
        return np.asarray(decision.frames[visual[0]][k])

    def close(self):
        self._stop_session()
        if getattr(self, "_backend_kind", None) and self.backend is not None:
            backend, self.backend = self.backend, None
            backend.close()

    # -- internals ----------------------------------------------------------------------------------------
    def _launch(self, seed: int) -> None:
        if self.backend is None:
            self.backend = create_backend(self._backend_kind, **self._backend_options)
        self.session = self.backend.create_session(
            {**self._kwargs, "seed": int(seed)}, resources=self._resources
        )
        self.last_event = self.session.last_event

    def _stop_session(self) -> None:
        session, self.session = getattr(self, "session", None), None
        if session is not None:
            session.stop()

    def _wait_for_decision(self, event):
        for _ in range(_MAX_IDLE_STEPS):
            decision = event.decision_steps.get(self.behavior)
            if decision is not None and len(decision):
                self.last_event = event
                return decision
            event = self.session.step({})
        raise RuntimeError(f"behavior {self.behavior!r} asked for no decision in {_MAX_IDLE_STEPS} steps")

    def _actions(self, event, action) -> dict:
        """Zeros for every decision agent of every behavior, the env's action for its agent."""
        out = {}
        if not set(event.decision_steps) <= set(self._specs):
            self._specs = behavior_specs(self.session)  # a behavior that appeared later
        specs = self._specs
        for name, decision in event.decision_steps.items():
            tuple_ = specs[name].action_spec.empty(len(decision))
            if name == self.behavior and self.agent_id in decision.agent_id_to_index:
                k = decision.agent_id_to_index[self.agent_id]
                spec = self.behavior_spec.action_spec
                if isinstance(action, dict):
                    continuous, discrete = action.get("continuous"), action.get("discrete")
                elif spec.continuous_size:
                    continuous, discrete = action, None
                else:
                    continuous, discrete = None, action
                if continuous is not None:
                    tuple_.continuous[k] = np.asarray(continuous, np.float32)
                if discrete is not None:
                    tuple_.discrete[k] = np.asarray(discrete, np.int32)
            out[name] = {"continuous": tuple_.continuous, "discrete": tuple_.discrete}
        return out

    def _observe(self, steps, k: int):
        values = {}
        for i, obs_spec in self.sensors:
            if obs_spec.is_visual:
                values[obs_spec.name] = np.array(steps.frames[obs_spec.name][k])
            else:
                values[obs_spec.name] = np.asarray(steps.obs[i][k], np.float32).reshape(obs_spec.shape)
        return next(iter(values.values())) if len(values) == 1 else values

    def _info(self, steps, k: int) -> dict:
        info: dict[str, Any] = {"agent_id": self.agent_id, "step": self._elapsed}
        mask = getattr(steps, "action_mask", None)
        if mask:
            info["action_mask"] = [np.asarray(m[k]) for m in mask]
        return info
