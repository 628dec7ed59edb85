"""The Gymnasium and PettingZoo wrappers over ``unirender.mlagents.UnityEnvironment``, checked by the libraries'
own API checkers, over the reference game."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

from unirender.mlagents import TerminalSteps, UnityEnvironment
from unirender.mlagents.envs.unity_aec_env import UnityAECEnv
from unirender.mlagents.envs.unity_gym_env import UnityGymException, UnityToGymWrapper
from unirender.mlagents.envs.unity_parallel_env import UnityParallelEnv
from unirender.mlagents.side_channel.engine_configuration_channel import EngineConfigurationChannel
from unirender.mlagents.side_channel.stats_side_channel import StatsSideChannel

MAX_STEP = 8
CAMERA = {(24, 32, 3), (3, 24, 32)}  # as declared: HWC (com.unity.ml-agents 2.x) or CHW (3.x and later)


def unity_env(monkeypatch, agents: int, **kwargs) -> UnityEnvironment:
    monkeypatch.setenv("UNIRENDER_MLAGENTS_AGENTS", str(agents))
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", str(MAX_STEP))
    engine = EngineConfigurationChannel()
    engine.set_configuration_parameters(width=32, height=24, time_scale=100.0)
    return UnityEnvironment(file_name="builtin", side_channels=[engine, StatsSideChannel()], timeout_wait=60, **kwargs)


@pytest.mark.parametrize(("uint8_visual", "package"), [(False, "2.2.1-exp.1"), (True, "2.2.1-exp.1"), (True, "3.0.0")])
def test_gym_wrapper_passes_check_env(monkeypatch, uint8_visual, package):
    monkeypatch.setenv("UNIRENDER_MLAGENTS_PACKAGE_VERSION", package)  # the camera layout the game writes
    env = UnityToGymWrapper(unity_env(monkeypatch, 1), uint8_visual=uint8_visual, allow_multiple_obs=True,
                            action_space_seed=0)  # fmt: skip
    try:
        check_env(env, skip_render_check=True, skip_close_check=True)  # close: below (no registry entry to make another)
        assert isinstance(env.action_space, gymnasium.spaces.Tuple)  # hybrid: (Box(2), Discrete(3))
        image_space, vector_space = env.observation_space.spaces
        assert image_space.shape == ((24, 32, 3) if package.startswith("2.") else (3, 24, 32))
        assert vector_space.shape == (8,)
        assert image_space.dtype == (np.uint8 if uint8_visual else np.float32)
        obs, info = env.reset(seed=1)
        assert isinstance(obs, tuple)  # what Gymnasium's Tuple space holds (mlagents-envs' API: a list, above)
        rewards, steps = [], 0
        terminated = truncated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            rewards.append(reward)
            steps += 1
            assert steps <= MAX_STEP
        assert truncated == bool(info["step"].interrupted[0]) and terminated != truncated
        if uint8_visual:  # the game's exact pixels, not 255 * obs truncated
            frame = info["step"].frames["CameraSensor"][0]  # HWC
            np.testing.assert_array_equal(obs[0], frame if package.startswith("2.") else frame.transpose(2, 0, 1))
        assert env.render() is obs[0]
        with pytest.raises(UnityGymException, match="already returned done = True"):
            env.step(env.action_space.sample())
    finally:
        env.close()


def test_gym_wrapper_with_mlagents_envs_api(monkeypatch):
    """``old_gym_api=True``: mlagents-envs 1.1's (gym <= 0.25's) ``reset() -> obs`` and ``step() -> (obs, reward,
    done, info)``, with ``allow_multiple_obs`` observations as lists, as mlagents-envs gives them."""
    env = UnityToGymWrapper(unity_env(monkeypatch, 1), allow_multiple_obs=True, action_space_seed=0, old_gym_api=True)
    try:
        obs = env.reset()
        assert isinstance(obs, list) and [o.shape for o in obs][1] == (8,) and obs[0].shape in CAMERA
        assert env.observation_space.contains(obs)
        done, steps = False, 0
        while not done:
            obs, reward, done, info = env.step(env.action_space.sample())
            assert isinstance(obs, list) and isinstance(reward, float) and isinstance(done, bool)
            steps += 1
            assert steps <= MAX_STEP
        assert isinstance(info["step"], TerminalSteps)  # done for any terminal step, interrupted (max_step) or not
        assert isinstance(env.reset(), list)
    finally:
        env.close()


def test_gym_wrapper_single_observation_and_agent_checks(monkeypatch):
    env = UnityToGymWrapper(unity_env(monkeypatch, 1))
    try:
        assert env.observation_space.shape in CAMERA  # the first visual observation only
        obs, _ = env.reset()
        assert obs.shape == env.observation_space.shape and obs.dtype == np.float32
    finally:
        env.close()
    with pytest.raises(UnityGymException, match="only be one Agent in the environment but 2 were detected"):
        UnityToGymWrapper(unity_env(monkeypatch, 2))


def test_parallel_env_passes_parallel_api_test(monkeypatch):
    env = UnityParallelEnv(unity_env(monkeypatch, 2), seed=0)
    try:
        parallel_api_test(env, num_cycles=3 * MAX_STEP)
        observations, infos = env.reset()
        assert env.agents == ["ReachTarget?team=0?agent_id=0", "ReachTarget?team=0?agent_id=1"]
        first = observations[env.agents[0]]
        image, vector = first["observation"]
        assert image.shape in CAMERA and vector.shape == (8,)
        assert first["action_mask"][0] is None and first["action_mask"][1].dtype == np.int8
        assert infos[env.agents[0]]["behavior_name"] == "ReachTarget?team=0"
        done = set()
        for _ in range(MAX_STEP):
            actions = {agent: env.action_space(agent).sample() for agent in env.agents}
            _, rewards, terminations, truncations, _ = env.step(actions)
            done |= {a for a in rewards if terminations[a] or truncations[a]}
        assert done == set(env.possible_agents) and env.agents == []
        assert "StatsSideChannel" in env.side_channel
    finally:
        env.close()


def test_aec_env_turns(monkeypatch):
    """PettingZoo's AEC loop (``agent_iter``/``last``/``step``). Not its ``api_test``: that wants observations
    inside ``observation_space``, and like mlagents-envs' wrappers ours add the ``action_mask`` beside them."""
    env = UnityAECEnv(unity_env(monkeypatch, 2), seed=0)
    try:
        env.reset(seed=0)
        turns, game_steps = [], 0
        for agent in env.agent_iter(max_iter=4 * MAX_STEP):
            observation, reward, termination, truncation, info = env.last()
            turns.append(agent)
            if termination or truncation:
                action = None
            else:
                assert env.observation_space(agent).contains(observation["observation"])
                action = env.action_space(agent).sample(mask=observation["action_mask"])
            env.step(action)
            game_steps += agent == env.possible_agents[-1] and action is not None
        assert turns[:4] == env.possible_agents * 2  # in turn
        assert env.agents == [] and game_steps == MAX_STEP  # every agent interrupted at max_step
    finally:
        env.close()
