"""``unirender.gym.MLAgentsEnv`` on the reference player's ML-Agents game (EGL, 32x32): gymnasium's check_env,
spaces from the BehaviorSpec, steps, seeded resets, episode ends."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")

from gymnasium import spaces  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

from fixtures import no_leaks  # noqa: E402, F401  (a fixture)
from unirender.gym import MLAgentsEnv  # noqa: E402

ENV = {"platform": "EGL", "width": 32, "height": 32, "time_scale": 100,
       "env": {"UNIRENDER_MLAGENTS_AGENTS": "2", "UNIRENDER_MLAGENTS_MAX_STEP": "5"}}  # fmt: skip


@pytest.mark.usefixtures("no_leaks")
def test_env_passes_check_env_and_steps():
    env = MLAgentsEnv(environment=ENV)
    try:
        assert isinstance(env.observation_space, spaces.Dict)
        assert env.observation_space["CameraSensor"] == spaces.Box(0, 255, (32, 32, 3), np.uint8)
        assert env.observation_space["VectorSensor_size8"].shape == (8,)
        assert isinstance(env.action_space, spaces.Dict)
        assert env.action_space["discrete"] == spaces.MultiDiscrete([3])
        check_env(env, skip_render_check=True)

        obs, info = env.reset(seed=5)
        again, _ = env.reset(seed=5)
        assert np.array_equal(obs["CameraSensor"], again["CameraSensor"])  # a seeded reset is a fresh game
        assert info["agent_id"] == 0 and len(info["action_mask"]) == 1
        env.action_space.seed(0)
        ends = []
        for _ in range(12):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and isinstance(reward, float)
            ends.append(terminated or truncated)
            if ends[-1]:
                assert (
                    info["interrupted"] == truncated
                )  # max_step 5: interrupted, unless the target was reached
                obs, info = env.reset()
        assert any(ends)  # 5-step episodes ended within 12 steps
    finally:
        env.close()
    assert env.session is None


@pytest.mark.usefixtures("no_leaks")
def test_single_sensor_box_and_bad_names():
    env = MLAgentsEnv(environment=ENV, observations=["VectorSensor_size8"])
    try:
        assert env.observation_space == spaces.Box(-np.inf, np.inf, (8,), np.float32)
        obs, _ = env.reset()
        assert obs.shape == (8,) and obs.dtype == np.float32
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown sensors"):
        MLAgentsEnv(environment=ENV, observations=["Camera"])
