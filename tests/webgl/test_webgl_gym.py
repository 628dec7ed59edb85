"""The webgl family as a Gymnasium env (gym.families -> WebGLEnv): spaces from the declared description, reward
and termination from what the build emits, a restart as a truncated step, gymnasium's own env checker,
``render_fps`` from the page's virtual clock, and PPO through ``make_vec_env`` (a browser per env)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from fixtures.webgl import ACTIONS, GAME

gymnasium = pytest.importorskip("gymnasium")

from unirender.gym.families import make_env  # noqa: E402


@pytest.fixture
def env(browser_binary, tmp_path):
    env = make_env({"protocol": "webgl", "executable": str(GAME), "width": 120, "height": 100,
                    "actions": ACTIONS, "log_dir": str(tmp_path)}, max_episode_steps=9)
    try:
        yield env
    finally:
        env.close()


def test_spaces_rewards_and_truncation(env):
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (100, 120, 3), np.uint8)
    assert env.action_space == gymnasium.spaces.Discrete(6) and env.action_names[2] == "right"
    obs, info = env.reset()
    assert obs.shape == (100, 120, 3) and info["metadata"]["position"] == [40, 30]
    rewards = []
    for _ in range(9):
        obs, reward, terminated, truncated, info = env.step(2)
        rewards.append(reward)
    assert rewards == [0.0] * 6 + [1.0] * 3 and not terminated and truncated  # max_episode_steps
    obs, _ = env.reset()
    assert env.observation_space.contains(obs)


def test_a_killed_browser_ends_the_episode_as_truncated(env):
    env.reset()
    os.kill(env.session.describe().pid, signal.SIGKILL)
    obs, reward, terminated, truncated, info = env.step(0)
    assert truncated and info["restarted"] and obs.shape == (100, 120, 3)


def test_gymnasiums_env_checker(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env, skip_render_check=True)


def test_ppo_trains_through_make_vec_env_with_a_browser_per_env(browser_binary, tmp_path):
    """A spec's environment (30 virtual fps, 3 frames a step: render_fps 10) through ``make_vec_env``: two
    WebGLEnvs in a SAME_STEP UnityVectorEnv, each its own Chromium; CnnPolicy on the canvas, 256 steps of
    16-step episodes; the reward (the square in the right half) reaches SB3's episode statistics."""
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO

    from unirender.gym import WebGLEnv
    from unirender.gym.sb3 import make_vec_env

    environment = {"protocol": "webgl", "executable": str(GAME), "width": 96, "height": 64, "fps": 30,
                   "frames_per_step": 3, "actions": {"left": ACTIONS["left"], "right": ACTIONS["right"]}}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the browsers need the other core
    venv = make_vec_env(2, environment=environment, max_episode_steps=16, seed=0)
    try:
        vector = venv.venv.venv  # VecMonitor(SB3VecEnv(UnityVectorEnv))
        assert all(type(env) is WebGLEnv for env in vector.envs)
        assert len({env.session.describe().pid for env in vector.envs}) == 2  # a browser each
        assert vector.metadata["render_fps"] == vector.envs[0].metadata["render_fps"] == 10
        assert venv.observation_space.shape == (64, 96, 3) and venv.action_space.n == 3  # noop, left, right
        model = PPO("CnnPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
        assert len(model.ep_info_buffer) == 256 // 16 and all(info["l"] == 16 for info in model.ep_info_buffer)
        assert any(info["r"] > 0 for info in model.ep_info_buffer)  # what the game emitted, summed per episode
        assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    finally:
        venv.close()
        torch.set_num_threads(threads)
