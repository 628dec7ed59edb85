"""Gymnasium envs on the real reference player (EGL, 64x64): check_env, the task callables, the vector env."""

import os
import signal

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from unirender.cluster import LocalBackend
from unirender.errors import SpecError
from unirender.gym import ENV_ID, UnityEnv, UnityVectorEnv

PLAYER = {"executable": "builtin", "width": 64, "height": 64, "platform": "EGL", "server": "fifo"}


@pytest.fixture(scope="module")
def backend():
    with LocalBackend(max_sessions=6) as b:
        yield b


def _yaw(event) -> int:
    return round(event.metadata["agent"]["rotation"]["y"]) % 360


def test_check_env_passes_with_rgb_and_depth(backend):
    env = UnityEnv(PLAYER, modalities=["rgb", "depth"], backend=backend, max_episode_steps=5)
    space = env.observation_space
    assert space["rgb"].shape == (64, 64, 3) and space["rgb"].dtype == np.uint8
    assert space["depth"].shape == (64, 64) and space["depth"].dtype == np.float32
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    env.close()  # idempotent
    assert backend.sessions() == []


def test_task_callables_truncation_and_observations(backend):
    seen = []

    def reward(previous, action, event):
        seen.append((_yaw(previous), action["action"], _yaw(event)))
        return 1.0 if event.metadata["lastActionSuccess"] else -1.0

    env = UnityEnv(
        PLAYER,
        actions=["RotateRight", {"action": "RotateLeft", "degrees": 90}],
        reward_fn=reward,
        termination_fn=lambda event: _yaw(event) == 180,
        max_episode_steps=3,
        backend=backend,
        render_mode="rgb_array",
    )
    try:
        obs, info = env.reset(seed=1)
        assert set(obs) == {"rgb"} and info["last_action_success"]
        obs, r, terminated, truncated, info = env.step(0)
        assert (r, terminated, truncated) == (1.0, False, False) and info["action"] == "RotateRight"
        np.testing.assert_array_equal(obs["rgb"], env.last_event.frame)
        np.testing.assert_array_equal(env.render(), env.last_event.frame)
        _, _, terminated, truncated, _ = env.step(0)
        assert terminated and not truncated  # yaw 180
        env.reset()
        env.step(1)  # 270
        env.step(0)  # 0
        _, _, terminated, truncated, _ = env.step(1)  # 270, third step
        assert truncated and not terminated
        assert seen[:2] == [(0, "RotateRight", 90), (90, "RotateRight", 180)]
        with pytest.raises(ValueError, match="not in Discrete"):
            env.step(7)
        # A crashed player is restarted by the Controller: the episode ends as truncated, flagged in info.
        os.kill(env.session.info()["pid"], signal.SIGKILL)
        obs, r, terminated, truncated, info = env.step(0)
        assert truncated and not terminated and r == 0.0 and info["restarted"]
        assert obs["rgb"].shape == (64, 64, 3)
        assert env.reset()[0]["rgb"].shape == (64, 64, 3)
    finally:
        env.close()


def test_registered_with_gymnasium_and_built_from_an_environment_spec():
    environment = {"width": 48, "height": 32, "platform": "EGL"}
    # task callables by name, as a config file gives them: here "every event ends the episode"
    env = gymnasium.make(ENV_ID, environment=environment, modalities=["rgb"], termination_fn="builtins:bool")
    try:
        assert isinstance(env.unwrapped, UnityEnv)
        assert env.observation_space["rgb"].shape == (32, 48, 3)
        obs, _ = env.reset(seed=0)
        assert obs["rgb"].shape == (32, 48, 3)
        assert env.step(0)[2] is True
    finally:
        env.close()
    assert env.unwrapped.session is None


def test_bad_configuration_fails_before_launching(backend):
    with pytest.raises(ValueError, match="unknown modalities"):
        UnityEnv(PLAYER, modalities=["smell"], backend=backend)
    with pytest.raises(ValueError, match="action 0"):
        UnityEnv(PLAYER, actions=[{"degrees": 5}], backend=backend)
    with pytest.raises(SpecError, match="width"):
        UnityEnv(environment={"width": -3}, backend=backend)
    with pytest.raises(ValueError, match="reward_fn 'no_such_module:f' cannot be imported"):
        UnityEnv(PLAYER, reward_fn="no_such_module:f", backend=backend)
    with pytest.raises(ValueError, match="termination_fn must be a callable"):
        UnityEnv(PLAYER, termination_fn="math:pi", backend=backend)
    assert backend.sessions() == []


def test_vector_env_of_four_steps_concurrently_with_next_step_autoreset(backend):
    envs = UnityVectorEnv(
        4, PLAYER, backend=backend, actions=["RotateRight", "RotateLeft"], max_episode_steps=2
    )
    try:
        assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert envs.observation_space["rgb"].shape == (4, 64, 64, 3)
        obs, _ = envs.reset(seed=3)
        first = obs["rgb"].copy()
        assert len({s.info()["pid"] for s in backend.sessions()}) == 4
        obs, rewards, term, trunc, infos = envs.step(np.array([0, 1, 0, 1]))
        assert rewards.shape == (4,) and not (term | trunc).any()
        # Right and left views differ, and every env kept its own.
        assert not np.array_equal(obs["rgb"][0], obs["rgb"][1])
        np.testing.assert_array_equal(obs["rgb"][0], obs["rgb"][2])
        assert infos["last_action_success"].all()
        _, _, _, trunc, _ = envs.step(np.array([0, 0, 0, 0]))
        assert trunc.all()
        obs, rewards, term, trunc, _ = envs.step(np.array([1, 1, 1, 1]))  # the autoreset step
        assert not (term | trunc).any() and (rewards == 0).all()
        np.testing.assert_array_equal(obs["rgb"], first)
    finally:
        envs.close()
    assert backend.sessions() == []
