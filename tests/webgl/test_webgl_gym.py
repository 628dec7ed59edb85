"""The webgl family as a Gymnasium env (gym.families -> WebGLEnv): spaces from the declared description, reward
and termination from what the build emits, a restart as a truncated step, and gymnasium's own env checker."""

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
