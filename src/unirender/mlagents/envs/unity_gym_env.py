"""``UnityToGymWrapper``: a single-agent Unity game as a Gymnasium env (mlagents-envs' class and arguments, on
Gymnasium 1.x's API, or with ``old_gym_api=True`` on mlagents-envs' own).

As mlagents-envs': one behavior with one agent; observations are the first visual sensor (or the concatenated
vector sensors), or with ``allow_multiple_obs=True`` every visual sensor then the vector; a terminal step ends the
episode (call ``reset()``). Differences with the Gymnasium API (the default): ``reset(seed=, options=)`` returns
``(obs, info)``, ``step`` returns ``(obs, reward, terminated, truncated, info)`` (``truncated`` when the game
interrupted the agent at ``max_step``), and ``allow_multiple_obs`` observations are tuples (what a Gymnasium
``Tuple`` space holds). ``old_gym_api=True`` gives mlagents-envs 1.1's API instead (gym <= 0.25's): ``reset()``
returns the observation, ``step`` ``(obs, reward, done, info)``, ``allow_multiple_obs`` observations are lists.
Either way the spaces are Gymnasium's (``gymnasium.spaces``; ``gym`` is not needed), ``spec.nondeterministic`` is
True (a seeded ``reset()`` seeds the action space, not the game,
whose seed is the ``UnityEnvironment``'s); ``uint8_visual`` images are the game's exact pixels (not ``255 * obs`` truncated); behaviors with
both continuous and discrete actions get a ``Tuple(Box, Discrete | MultiDiscrete)`` action space (mlagents-envs
refuses them).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import gymnasium
import numpy as np
from gymnasium import error, spaces
from gymnasium.envs.registration import EnvSpec

from unirender.mlagents.base_env import ActionTuple, BaseEnv, DecisionSteps, TerminalSteps

logger = logging.getLogger(__name__)


class UnityGymException(error.Error):
    """Any error related to the gym wrapper of ml-agents."""


class UnityToGymWrapper(gymnasium.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        unity_env: BaseEnv,
        uint8_visual: bool = False,
        flatten_branched: bool = False,
        allow_multiple_obs: bool = False,
        action_space_seed: int | None = None,
        old_gym_api: bool = False,
    ):
        """``unity_env`` is closed with the wrapper. ``uint8_visual``: images as uint8 0-255 instead of float
        0-1. ``flatten_branched``: several discrete branches as one ``Discrete`` over their combinations.
        ``allow_multiple_obs``: every observation (a tuple, a list with ``old_gym_api``), not only the first.
        ``action_space_seed`` seeds the action space. ``old_gym_api``: mlagents-envs' ``reset() -> obs`` and
        ``step() -> (obs, reward, done, info)`` instead of Gymnasium's."""
        self._env = unity_env
        self._old_gym_api = old_gym_api
        self.render_mode = "rgb_array"
        # The game's seed is the UnityEnvironment's, fixed when it launched: a seeded reset() of the wrapper
        # cannot replay an episode, and Gymnasium's checkers are told so.
        self.spec = EnvSpec("unirender/UnityToGym-v0", nondeterministic=True)
        if not self._env.behavior_specs:
            self._env.step()
        self.visual_obs = None
        self._flattener = None
        self.game_over = False
        self._allow_multiple_obs = allow_multiple_obs
        if len(self._env.behavior_specs) != 1:
            raise UnityGymException("There can only be one behavior in a UnityEnvironment if it is wrapped in a gym.")
        self.name = next(iter(self._env.behavior_specs))
        self.group_spec = self._env.behavior_specs[self.name]
        specs = self.group_spec.observation_specs
        self._visual = [i for i, s in enumerate(specs) if len(s.shape) == 3]
        self._vector = [i for i, s in enumerate(specs) if len(s.shape) == 1]
        vector_size = sum(specs[i].shape[0] for i in self._vector)
        if not self._visual and not vector_size:
            raise UnityGymException("There are no observations provided by the environment.")
        if uint8_visual and not self._visual:
            logger.warning("uint8_visual was set to true, but visual observations are not in use. "
                           "This setting will not have any effect.")  # fmt: skip
        self.uint8_visual = uint8_visual and bool(self._visual)
        if len(self._visual) + vector_size >= 2 and not allow_multiple_obs:
            logger.warning(
                "The environment contains multiple observations. You must define allow_multiple_obs=True to "
                "receive them all. Otherwise, only the first visual observation (or vector observation if there "
                "are no visual observations) will be provided in the observation."
            )
        self._env.reset()
        decision, _ = self._env.get_steps(self.name)
        self._check_agents(len(decision))
        self._action_space = self._make_action_space(flatten_branched)
        if action_space_seed is not None:
            self._action_space.seed(action_space_seed)
        boxes = [spaces.Box(0, 255, specs[i].shape, np.uint8) if uint8_visual
                 else spaces.Box(0.0, 1.0, specs[i].shape, np.float32) for i in self._visual]  # fmt: skip
        if vector_size:
            boxes.append(spaces.Box(-np.inf, np.inf, (vector_size,), np.float32))
        self._observation_space = spaces.Tuple(boxes) if allow_multiple_obs else boxes[0]

    def _make_action_space(self, flatten_branched: bool) -> spaces.Space:
        action = self.group_spec.action_spec
        discrete = None
        if action.discrete_size == 1:
            discrete = spaces.Discrete(action.discrete_branches[0])
        elif action.discrete_size and flatten_branched:
            self._flattener = ActionFlattener(action.discrete_branches)
            discrete = self._flattener.action_space
        elif action.discrete_size:
            discrete = spaces.MultiDiscrete(list(action.discrete_branches))
        if flatten_branched and action.continuous_size:
            logger.warning("The environment has a non-discrete action space. It will not be flattened.")
        continuous = spaces.Box(-1.0, 1.0, (action.continuous_size,), np.float32) if action.continuous_size else None
        if continuous is not None and discrete is not None:
            return spaces.Tuple((continuous, discrete))
        return continuous if continuous is not None else discrete

    # -- the Gymnasium API ------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """New episode; ``seed`` seeds ``np_random`` and the action space (the game's own seed is the
        environment's, given to ``UnityEnvironment(seed=)``)."""
        super().reset(seed=seed)
        if seed is not None:
            self._action_space.seed(seed)
        self._env.reset()
        decision, _ = self._env.get_steps(self.name)
        self._check_agents(len(decision))
        self.game_over = False
        if self._old_gym_api:
            return self._observation(decision)
        return self._observation(decision), {"step": decision}

    def step(self, action: Any):
        if self.game_over:
            raise UnityGymException(
                "You are calling 'step()' even though this environment has already returned done = True. "
                "You must always call 'reset()' once you receive 'done = True'."
            )
        self._env.set_actions(self.name, self._action_tuple(action))
        self._env.step()
        decision, terminal = self._env.get_steps(self.name)
        self._check_agents(max(len(decision), len(terminal)))
        self.game_over = bool(len(terminal))
        steps = terminal if self.game_over else decision
        observation, reward, info = self._observation(steps), float(steps.reward[0]), {"step": steps}
        if self._old_gym_api:
            return observation, reward, self.game_over, info
        truncated = self.game_over and bool(terminal.interrupted[0])
        return observation, reward, self.game_over and not truncated, truncated, info

    def _action_tuple(self, action) -> ActionTuple:
        spec = self.group_spec.action_spec
        if spec.continuous_size and spec.discrete_size:
            continuous, discrete = action
        elif spec.continuous_size:
            continuous, discrete = action, None
        else:
            continuous, discrete = None, action
        if discrete is not None and self._flattener is not None:
            discrete = self._flattener.lookup_action(int(discrete))
        result = ActionTuple()
        if continuous is not None:
            result.add_continuous(np.asarray(continuous, np.float32).reshape(1, spec.continuous_size))
        if discrete is not None:
            result.add_discrete(np.asarray(discrete).reshape(1, spec.discrete_size))
        return result

    def _observation(self, steps: DecisionSteps | TerminalSteps):
        visual = [self._image(steps, i) for i in self._visual]
        vector = np.concatenate([steps.obs[i][0] for i in self._vector]) if self._vector else None
        if visual:
            self.visual_obs = visual[0]
        if self._allow_multiple_obs:
            every = visual + ([vector] if vector is not None else [])
            return every if self._old_gym_api else tuple(every)
        return visual[0] if visual else vector

    def _image(self, steps, index: int) -> np.ndarray:
        if not self.uint8_visual:
            return steps.obs[index][0]
        spec = self.group_spec.observation_specs[index]
        frames = steps.frames.get(spec.name)
        if frames is None:  # steps not read from a game: mlagents-envs' conversion
            return (255.0 * steps.obs[index][0]).astype(np.uint8)
        frame = frames[0]  # HWC; the declared layout may be CHW
        return frame if frame.shape == tuple(spec.shape) else np.ascontiguousarray(frame.transpose(2, 0, 1))

    def render(self):
        """The latest visual observation (no new frame is rendered)."""
        return self.visual_obs

    def close(self) -> None:
        self._env.close()

    @staticmethod
    def _check_agents(n_agents: int) -> None:
        if n_agents > 1:
            raise UnityGymException(f"There can only be one Agent in the environment but {n_agents} were detected.")

    @property
    def action_space(self) -> spaces.Space:
        return self._action_space

    @property
    def observation_space(self) -> spaces.Space:
        return self._observation_space


class ActionFlattener:
    """Several discrete branches as one ``Discrete`` over all their combinations."""

    def __init__(self, branched_action_space):
        self._action_shape = branched_action_space
        self.action_lookup = self._create_lookup(self._action_shape)
        self.action_space = spaces.Discrete(len(self.action_lookup))

    @classmethod
    def _create_lookup(cls, branched_action_space):
        combinations = itertools.product(*[range(n) for n in branched_action_space])
        return {index: list(combination) for index, combination in enumerate(combinations)}

    def lookup_action(self, action):
        return self.action_lookup[action]
