"""``MLAgentsVectorEnv``: the agents of one behavior of one ML-Agents game as the slots of a Gymnasium
``VectorEnv`` (as ML-Agents' own trainers and multi-agent wrappers see a scene); ``UnityVectorEnv`` is the other
layout, one game per slot.

The game steps all its agents together and restarts an agent's episode in the step that ends it (the agent is in
the terminal and the decision steps at once): that is Gymnasium's ``SAME_STEP`` autoreset, which is the only
mode here. ``NEXT_STEP`` would have a slot wait a step for its reset while the game moves its agent on, and a
reset of some slots would reset the whole game, so both are refused, saying so. Episode lengths are the game's
(its agents' ``MaxStep``): no ``max_episode_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from unirender.cluster.base import Resources, SessionBackend
from unirender.errors import RestartError
from unirender.gym.mlagents_env import MLAgentsEnv
from unirender.gym.vector import autoreset_mode_of


class MLAgentsVectorEnv(VectorEnv):
    """``MLAgentsVectorEnv(controller_kwargs | environment=..., behavior=None, observations=None,
    action_parts=None, autoreset_mode="SAME_STEP", backend="local", ...)``: one game; ``num_envs`` is the number
    of agents of ``behavior`` deciding after the first reset, slot ``i`` the ``i``-th of them (``infos["agent_id"]``).
    Spaces per slot as :class:`MLAgentsEnv` has them. ``reset(seed=s)`` launches a fresh game seeded with ``s``
    (a list of seeds: its first, the game's; the others cannot apply to one game). A crashed and restarted player
    ends every slot's episode as truncated (``infos["restarted"]``). Every agent must decide every step (a
    ``DecisionRequester`` period of 1); an agent that skips a decision, or a new agent id, is an error saying so.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: Any = None,
        behavior: str | None = None,
        observations: Sequence[str] | None = None,
        action_parts: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        resources: Resources | None = None,
        render_mode: str | None = None,
    ):
        if autoreset_mode_of(autoreset_mode) != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"agents as slots autoreset in the same step only (not {autoreset_mode!r}): the game restarts an "
                "agent's episode in the step that ends it and moves all agents together, so a slot cannot wait a "
                "step for its reset; use autoreset_mode='SAME_STEP', or UnityVectorEnv (one game per slot)"
            )
        # The single-agent env does the launching, the spaces and the seeded relaunch; this drives its session.
        self.env = MLAgentsEnv(controller_kwargs, environment=environment, behavior=behavior,
                               observations=observations, action_parts=action_parts, backend=backend,
                               backend_options=backend_options, resources=resources,
                               render_mode=render_mode)  # fmt: skip
        self.behavior = self.env.behavior
        try:
            self.env.reset()
            self.agent_ids = [int(a) for a in self._decision().agent_id]
        except BaseException:
            self.env.close()
            raise
        self.num_envs = len(self.agent_ids)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": self.env.metadata["render_fps"]}
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs: Any = None

    # -- VectorEnv -------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is not None and not np.all(mask):
            raise ValueError("the agents of one game reset together: a reset_mask must select every slot")
        if isinstance(seed, list | tuple):
            seed = seed[0] if seed else None
        self.env.reset(seed=seed, options=options)
        self._adopt_agents()
        decision = self._decision()
        self._obs = self._observe(decision, self._order(decision))
        return self._obs, self._infos()

    def step(self, actions):
        session = self.env.session
        if session is None:
            raise gymnasium.error.ClosedEnvironmentError("this MLAgentsVectorEnv is closed; make a new one")
        decision = self._decision()
        try:
            event = session.step({self.behavior: self._game_actions(decision, actions)})
        except RestartError as exc:
            return self._restarted(exc)
        self.env.last_event = event
        decision, terminal = event.decision_steps[self.behavior], event.terminal_steps[self.behavior]
        order = self._order(decision)
        rewards = decision.reward[order].astype(np.float64)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        obs = self._observe(decision, order)
        infos = self._infos()
        for slot, agent in enumerate(self.agent_ids):
            k = terminal.agent_id_to_index.get(agent)
            if k is None:
                continue
            interrupted = bool(terminal.interrupted[k])
            rewards[slot] = terminal.reward[k]
            terminated[slot], truncated[slot] = not interrupted, interrupted
            infos = self._add_info(infos, {"final_obs": self.env.observe(terminal, k),
                                           "final_info": {"agent_id": agent, "interrupted": interrupted}},
                                   slot)  # fmt: skip
        self._obs = obs
        return obs, rewards, terminated, truncated, infos

    def render(self):
        decision = self._decision()
        visual = [name for _, name, is_visual, _ in self.env.sensors if is_visual]
        if self.render_mode != "rgb_array" or not visual:
            return tuple(None for _ in range(self.num_envs))
        frames = decision.frames[visual[0]]
        return tuple(np.asarray(frames[k]) for k in self._order(decision))

    def close_extras(self, **kwargs: Any):
        self.env.close()

    # -- internals ----------------------------------------------------------------------------------------
    def _decision(self):
        return self.env.last_event.decision_steps[self.behavior]

    def _adopt_agents(self) -> None:
        """After a reset (a fresh game may number its agents anew): the same count, slots in decision order."""
        ids = [int(a) for a in self._decision().agent_id]
        if len(ids) != self.num_envs:
            raise RuntimeError(
                f"the game has {len(ids)} agents deciding after the reset, the vector {self.num_envs}"
            )
        self.agent_ids = ids

    def _order(self, decision) -> np.ndarray:
        """The decision index of each slot's agent."""
        index = decision.agent_id_to_index
        missing = [a for a in self.agent_ids if a not in index]
        if missing:
            raise RuntimeError(
                f"agents {missing} of behavior {self.behavior!r} asked for no decision in this step (decision "
                f"agents: {sorted(index)}): agents as slots need every agent to decide every step (a "
                "DecisionRequester period of 1); use UnityVectorEnv, one game per slot, for such a game"
            )
        return np.fromiter((index[a] for a in self.agent_ids), np.intp, len(self.agent_ids))

    def _game_actions(self, decision, actions) -> dict:
        """The batch (slot order) as the game's actions (decision order)."""
        n, spec = len(decision), self.env.behavior_actions
        continuous = np.zeros((n, spec.continuous), np.float32)
        discrete = np.zeros((n, len(spec.discrete)), np.int32)
        order = self._order(decision)
        form = self.env.action_form
        try:
            if form == "dict":
                continuous[order], discrete[order] = actions["continuous"], actions["discrete"]
            elif form == "continuous":
                continuous[order] = actions
            else:
                discrete[order] = actions
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"actions are not a batch of {self.action_space}: {exc}") from None
        if not self.action_space.contains(
            {"continuous": continuous[order], "discrete": discrete[order]} if form == "dict"
            else continuous[order] if form == "continuous" else discrete[order]
        ):  # fmt: skip
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        return {"continuous": continuous, "discrete": discrete}

    def _observe(self, steps, order: np.ndarray):
        values = {}
        for i, name, visual, shape in self.env.sensors:
            if visual:
                values[name] = np.asarray(steps.frames[name])[order]
            else:
                values[name] = np.asarray(steps.obs[i], np.float32)[order].reshape(len(order), *shape)
        return next(iter(values.values())) if len(values) == 1 else values

    def _infos(self) -> dict:
        return {"agent_id": np.array(self.agent_ids), "_agent_id": np.ones(self.num_envs, bool)}

    def _restarted(self, exc: RestartError):
        """Every slot's episode ends as truncated; the new game's first decisions are the new observations."""
        final = self._obs
        self.env.last_event = self.env.session.reset()
        self.env.wait_for_decision(self.env.last_event)
        self._adopt_agents()
        decision = self._decision()
        obs = self._observe(decision, self._order(decision))
        infos = {
            **self._infos(),
            "restarted": np.ones(self.num_envs, bool),
            "_restarted": np.ones(self.num_envs, bool),
            # as UnityVectorEnv's: "player" (a crash), or what a backend rode through (node_lost, service_restart...)
            "restart_cause": np.array([getattr(exc, "cause", "player")] * self.num_envs, dtype=object),
            "_restart_cause": np.ones(self.num_envs, bool),
        }
        for slot in range(self.num_envs):
            single = final[slot] if not isinstance(final, dict) else {k: v[slot] for k, v in final.items()}
            infos = self._add_info(
                infos, {"final_obs": single, "final_info": {"error_message": str(exc)}}, slot
            )
        self._obs = obs
        zeros = np.zeros(self.num_envs)
        return obs, zeros, np.zeros(self.num_envs, bool), np.ones(self.num_envs, bool), infos
