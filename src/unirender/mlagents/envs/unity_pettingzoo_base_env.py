"""What the PettingZoo wrappers share (mlagents-envs' ``UnityPettingzooBaseEnv``): agents named
``"<behavior>?agent_id=<id>"`` over every behavior of the game, their spaces, and one simultaneous step.

An agent's observation is its sensors' arrays (one array, or a tuple for several sensors); with discrete actions
it is ``{"observation": ..., "action_mask": ...}``, the mask in the form the agent's action space's
``sample(mask=...)`` takes (1 = allowed). An agent whose episode ends is terminated (or truncated, when the game
interrupted it at ``max_step``) and stays out of ``agents`` until ``reset()``: PettingZoo agents are not revived,
so the new episode the game may start for it at once gets zero actions until then. An agent that appears during
an episode (a spawned agent, a behavior enabled later) joins ``agents`` and ``possible_agents`` with the step it
appears in, which reports it with the others.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import error, spaces

from unirender.mlagents.base_env import BaseEnv
from unirender.mlagents.envs.env_helpers import agent_id_to_behavior, behavior_to_agent_id, sample_mask


class UnityPettingzooBaseEnv:
    def __init__(self, env: BaseEnv, seed: int | None = None, metadata: dict | None = None):
        super().__init__()
        self._env = env
        self.metadata = metadata or {"render_modes": [], "name": "unity", "is_parallelizable": True}
        self.render_mode = None
        self._seed = seed
        manager = getattr(env, "_side_channel_manager", None)
        channels = manager._side_channels_dict.values() if manager is not None else ()
        self._side_channel_dict = {type(channel).__name__: channel for channel in channels}
        self._possible_agents: set[str] = set()
        self._live_agents: list[str] = []
        self._finished: set[str] = set()  # ended this episode: not revived before reset()
        self._index: dict[str, int] = {}  # agent -> its row in its behavior's last DecisionSteps
        self._observations: dict[str, Any] = {}
        self._infos: dict[str, dict] = {}
        self._action_spaces: dict[str, spaces.Space] = {}
        self._observation_spaces: dict[str, spaces.Space] = {}
        if not self._env.behavior_specs:
            self._env.step()  # the first step resets: the game describes its behaviors
            self._read_decisions(reset=True)
        # Behaviors already known: no steps read yet (an env wrapped before its first reset has none to read);
        # the agents come with reset(), as in mlagents-envs.
        self._update_spaces()

    # -- spaces -------------------------------------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent_id_to_behavior(agent)]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent_id_to_behavior(agent)]

    @property
    def observation_spaces(self) -> dict[str, spaces.Space]:
        return {agent: self.observation_space(agent) for agent in self.possible_agents}

    @property
    def action_spaces(self) -> dict[str, spaces.Space]:
        return {agent: self.action_space(agent) for agent in self.possible_agents}

    def _update_spaces(self) -> None:
        for name, spec in self._env.behavior_specs.items():
            if name in self._observation_spaces:
                continue
            boxes = tuple(spaces.Box(-np.inf, np.inf, s.shape, np.float32) for s in spec.observation_specs)
            self._observation_spaces[name] = boxes[0] if len(boxes) == 1 else spaces.Tuple(boxes)
            action = spec.action_spec
            if action.continuous_size == 0 and action.discrete_size == 0:
                raise error.Error(f"behavior {name!r} has no actions")
            parts = []
            if action.continuous_size:
                parts.append(spaces.Box(-1.0, 1.0, (action.continuous_size,), np.float32))
            if action.discrete_size == 1:
                parts.append(spaces.Discrete(action.discrete_branches[0]))
            elif action.discrete_size:
                parts.append(spaces.MultiDiscrete(list(action.discrete_branches)))
            space = parts[0] if len(parts) == 1 else spaces.Tuple(parts)
            if self._seed is not None:
                space.seed(self._seed)
            self._action_spaces[name] = space

    # -- agents -------------------------------------------------------------------------------------------
    @property
    def agents(self) -> list[str]:
        return sorted(self._live_agents)

    @property
    def possible_agents(self) -> list[str]:
        return sorted(self._possible_agents)

    @property
    def num_agents(self) -> int:
        return len(self._live_agents)

    @property
    def max_num_agents(self) -> int:
        return len(self._possible_agents)

    @property
    def side_channel(self) -> dict[str, Any]:
        """The environment's side channels by class name, e.g. ``env.side_channel["StatsSideChannel"]``."""
        return self._side_channel_dict

    def _observation(self, name: str, steps, row: int, with_mask: bool):
        arrays = [batch[row] for batch in steps.obs]
        observation = arrays[0] if len(arrays) == 1 else tuple(arrays)
        action = self._env.behavior_specs[name].action_spec
        if not (with_mask and action.discrete_size):
            return observation
        mask = sample_mask([m[row] for m in steps.action_mask], action.discrete_branches, action.continuous_size > 0)
        return {"observation": observation, "action_mask": mask}

    def _read_decisions(self, reset: bool = False) -> None:
        """Observations and decision rows of the agents asking for a decision; new agents join (unless they
        already finished this episode)."""
        self._update_spaces()
        self._index = {}
        for name in self._env.behavior_specs:
            decision, _ = self._env.get_steps(name)
            for row, agent_id in enumerate(decision.agent_id):
                agent = behavior_to_agent_id(name, int(agent_id))
                if agent in self._finished:
                    continue
                self._index[agent] = row
                self._observations[agent] = self._observation(name, decision, row, with_mask=True)
                self._infos[agent] = {"behavior_name": name, "group_id": int(decision.group_id[row]),
                                      "group_reward": float(decision.group_reward[row])}  # fmt: skip
                if agent not in self._live_agents:
                    self._live_agents.append(agent)
                self._possible_agents.add(agent)
        if reset:
            self._live_agents = sorted(self._index)

    def _reset(self, seed: int | None = None) -> None:
        if seed is not None:
            self._seed = seed
            for space in self._action_spaces.values():
                space.seed(seed)
        self._live_agents, self._finished = [], set()
        self._observations, self._infos = {}, {}
        self._env.reset()
        self._read_decisions(reset=True)

    def _step(self, actions: dict[str, Any]):
        """One simultaneous step: ``actions`` for live agents (missing ones get zeros) -> per agent that was live,
        (observations, rewards, terminations, truncations, infos)."""
        if not self._live_agents and actions:
            raise error.Error("You must reset the environment before you can perform a step.")
        batches = {}
        for name, spec in self._env.behavior_specs.items():
            decision, _ = self._env.get_steps(name)
            batches[name] = spec.action_spec.empty_action(len(decision))
        for agent, action in actions.items():
            if agent not in self._index:
                continue  # finished, or no decision asked this step
            continuous, discrete = self._action_arrays(agent, action)
            batch, row = batches[agent_id_to_behavior(agent)], self._index[agent]
            batch.continuous[row] = continuous
            batch.discrete[row] = discrete
        for name, batch in batches.items():
            self._env.set_actions(name, batch)
        acting = list(self._live_agents)
        self._env.step()
        rewards = dict.fromkeys(acting, 0.0)
        terminations = dict.fromkeys(acting, False)
        truncations = dict.fromkeys(acting, False)
        for name in self._env.behavior_specs:
            decision, terminal = self._env.get_steps(name)
            for row, agent_id in enumerate(decision.agent_id):
                agent = behavior_to_agent_id(name, int(agent_id))
                if agent in rewards:
                    rewards[agent] = float(decision.reward[row])
            for row, agent_id in enumerate(terminal.agent_id):
                agent = behavior_to_agent_id(name, int(agent_id))
                if agent not in rewards:
                    continue
                rewards[agent] = float(terminal.reward[row])
                interrupted = bool(terminal.interrupted[row])
                terminations[agent], truncations[agent] = not interrupted, interrupted
                self._observations[agent] = self._observation(name, terminal, row, with_mask=False)
                self._infos[agent] = {"behavior_name": name, "group_id": int(terminal.group_id[row]),
                                      "group_reward": float(terminal.group_reward[row]), "interrupted": interrupted}  # fmt: skip
                self._finished.add(agent)
        self._live_agents = [a for a in self._live_agents if a not in self._finished]
        self._read_decisions()
        for name in self._env.behavior_specs:  # agents that appeared in this step are reported with the others
            decision, _ = self._env.get_steps(name)
            for row, agent_id in enumerate(decision.agent_id):
                agent = behavior_to_agent_id(name, int(agent_id))
                if agent in self._index and agent not in rewards:
                    acting.append(agent)
                    rewards[agent], terminations[agent], truncations[agent] = float(decision.reward[row]), False, False
        observations = {agent: self._observations[agent] for agent in acting}
        infos = {agent: self._infos.get(agent, {}) for agent in acting}
        for agent in self._finished & set(acting):  # gone from `agents`: forget their last observation
            self._observations.pop(agent, None)
        return observations, rewards, terminations, truncations, infos

    def _action_arrays(self, agent: str, action) -> tuple[np.ndarray, np.ndarray]:
        space = self.action_space(agent)
        if isinstance(space, spaces.Tuple):
            action = (np.asarray(action[0], np.float32), np.asarray(action[1], space.spaces[1].dtype))
        else:
            action = np.asarray(action, space.dtype)
        if not space.contains(action):
            raise error.Error(f"Invalid action, got {action} but was expecting action from {space}")
        spec = self._env.behavior_specs[agent_id_to_behavior(agent)].action_spec
        if isinstance(space, spaces.Tuple):
            return action[0], np.reshape(action[1], (spec.discrete_size,))
        if isinstance(space, spaces.Box):
            return action, np.zeros(0, np.int32)
        return np.zeros(0, np.float32), np.reshape(action, (spec.discrete_size,))

    # -- the rest of the PettingZoo API -------------------------------------------------------------------
    def state(self):
        raise NotImplementedError("Unity games have no global state observation")

    def render(self):
        """Not supported (cameras are observations)."""
        return None

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
