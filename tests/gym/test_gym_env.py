"""UnityEnv on the real reference player (EGL, 64x64): spaces per modality, check_env with the render check,
depth encodings, reuse after close, the task callables."""

import os
import signal
import warnings

import gymnasium
import numpy as np
import pytest
from gym_helpers import ALL_MODALITIES, PLAYER, yaw
from gymnasium.utils.env_checker import check_env

from unirender.errors import SpecError
from unirender.gym import ENV_ID, UnityEnv

# Gymnasium's checker cannot try other render modes on an env made without gymnasium.make (no spec).
NO_SPEC_WARNING = "Not able to test alternative render modes"


def _check_env_without_warnings(env):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    unexpected = [str(w.message) for w in caught if NO_SPEC_WARNING not in str(w.message)]
    assert unexpected == []


@pytest.mark.parametrize("observations", ["rgb", ["rgb", "depth"], ALL_MODALITIES])
def test_check_env_with_the_render_check(backend, observations):
    env = UnityEnv(
        PLAYER, observations=observations, backend=backend, max_episode_steps=5, render_mode="rgb_array"
    )
    try:
        space = env.observation_space
        if observations == "rgb":  # one name: a plain image Box, what CnnPolicy takes
            assert space == gymnasium.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        else:
            assert list(space.spaces) == sorted(observations)  # Dict keys sorted by Gymnasium
            assert space["depth"] == gymnasium.spaces.Box(
                0.0, 20.0, (64, 64, 1), np.float32
            )  # far plane 20 m
            for name in observations:
                if name != "depth":
                    box = space[name]
                    assert (box.dtype, box.shape[:2], box.low.min(), box.high.max()) == (
                        np.uint8,
                        (64, 64),
                        0,
                        255,
                    )
        # The render check closes the env; check_env then resets and steps it again: a new player.
        _check_env_without_warnings(env)
        assert env.session is not None and env.observation_space.contains(env.reset()[0])
    finally:
        env.close()
    env.close()  # idempotent
    assert backend.sessions() == []


def test_depth_encodings_bounded_and_clipped(backend):
    """float32 metres, uint16 millimetres and uint8 over [0, max_depth], each from the player's depth frame."""
    envs = {
        dtype: UnityEnv(PLAYER, observations="depth", depth_dtype=dtype, max_depth=2.0, backend=backend)
        for dtype in ("float32", "uint16", "uint8")
    }
    try:
        assert envs["float32"].observation_space == gymnasium.spaces.Box(0.0, 2.0, (64, 64, 1), np.float32)
        assert envs["uint16"].observation_space == gymnasium.spaces.Box(0, 2000, (64, 64, 1), np.uint16)
        assert envs["uint8"].observation_space == gymnasium.spaces.Box(0, 255, (64, 64, 1), np.uint8)
        for dtype, env in envs.items():
            obs, _ = env.reset()
            depth = np.asarray(env.last_event.depth_frame)
            assert depth.min() < 2.0 < depth.max()  # the 2 m bound really clips this view
            clipped = np.clip(depth, 0.0, 2.0)[:, :, None]
            expected = {
                "float32": clipped,
                "uint16": np.rint(clipped * 1000).astype(np.uint16),
                "uint8": np.rint(clipped * (255 / 2.0)).astype(np.uint8),
            }[dtype]
            assert obs.dtype == np.dtype(dtype) and env.observation_space.contains(obs)
            np.testing.assert_array_equal(obs, expected)
    finally:
        for env in envs.values():
            env.close()
    with pytest.raises(ValueError, match="uint16 millimetre depth reaches 65.535 m"):
        UnityEnv(PLAYER, observations="depth", depth_dtype="uint16", max_depth=100.0, backend=backend)
    with pytest.raises(ValueError, match="depth_dtype must be one of"):
        UnityEnv(PLAYER, observations="depth", depth_dtype="float64", backend=backend)


def test_a_closed_env_relaunches_on_reset_and_refuses_step(backend):
    env = UnityEnv(PLAYER, observations="rgb", backend=backend, render_mode="rgb_array")
    try:
        first, _ = env.reset(seed=0)
        pid = env.session.info()["pid"]
        env.close()
        assert env.session is None and backend.sessions() == []
        np.testing.assert_array_equal(env.render(), first)  # the last frame is still there to look at
        with pytest.raises(gymnasium.error.ClosedEnvironmentError, match="call reset"):
            env.step(0)
        obs, _ = env.reset()
        assert env.session.info()["pid"] != pid and len(backend.sessions()) == 1
        np.testing.assert_array_equal(obs, first)
        env.step(0)
    finally:
        env.close()


def test_a_closed_env_with_a_private_backend_makes_a_new_one():
    env = UnityEnv(PLAYER, observations="rgb")  # backend="local": the env owns it
    try:
        env.close()
        assert env.backend is None
        env.reset()
        assert env.backend is not None and len(env.backend.sessions()) == 1
    finally:
        backend = env.backend
        env.close()
    assert backend.sessions() == []


def test_task_callables_truncation_and_observations(backend):
    seen = []

    def reward(previous, action, event):
        seen.append((yaw(previous), action["action"], yaw(event)))
        return 1.0 if event.metadata["lastActionSuccess"] else -1.0

    env = UnityEnv(
        PLAYER,
        actions=["RotateRight", {"action": "RotateLeft", "degrees": 90}],
        reward_fn=reward,
        termination_fn=lambda event: yaw(event) == 180,
        max_episode_steps=3,
        backend=backend,
        render_mode="rgb_array",
    )
    try:
        obs, info = env.reset(seed=1)
        assert set(obs) == {"rgb"} and info["last_action_success"]  # default: a Dict of ["rgb"]
        obs, r, terminated, truncated, info = env.step(0)
        assert (r, terminated, truncated) == (1.0, False, False) and info["action"] == "RotateRight"
        np.testing.assert_array_equal(obs["rgb"], env.last_event.frame)
        # the learner's own array, not the event's read-only flipped view (torch.as_tensor refuses those)
        assert obs["rgb"].flags.writeable and obs["rgb"].flags.c_contiguous
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
    env = gymnasium.make(ENV_ID, environment=environment, observations="rgb", termination_fn="builtins:bool")
    try:
        assert isinstance(env.unwrapped, UnityEnv)
        assert env.observation_space.shape == (32, 48, 3)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (32, 48, 3)
        assert env.step(0)[2] is True
    finally:
        env.close()
    assert env.unwrapped.session is None


def test_bad_configuration_fails_before_launching(backend):
    with pytest.raises(ValueError, match="unknown modalities"):
        UnityEnv(PLAYER, observations=["smell"], backend=backend)
    with pytest.raises(ValueError, match="unknown modalities"):
        UnityEnv(PLAYER, observations="smell", backend=backend)
    with pytest.raises(ValueError, match="listed twice"):
        UnityEnv(PLAYER, observations=["rgb", "rgb"], backend=backend)
    with pytest.raises(ValueError, match="observations or modalities"):
        UnityEnv(PLAYER, observations="rgb", modalities=["rgb"], backend=backend)
    with pytest.raises(ValueError, match="max_depth must be a positive"):
        UnityEnv(PLAYER, observations="depth", max_depth=float("inf"), backend=backend)
    with pytest.raises(ValueError, match="action 0"):
        UnityEnv(PLAYER, actions=[{"degrees": 5}], backend=backend)
    with pytest.raises(SpecError, match="width"):
        UnityEnv(environment={"width": -3}, backend=backend)
    with pytest.raises(ValueError, match="reward_fn 'no_such_module:f' cannot be imported"):
        UnityEnv(PLAYER, reward_fn="no_such_module:f", backend=backend)
    with pytest.raises(ValueError, match="termination_fn must be a callable"):
        UnityEnv(PLAYER, termination_fn="math:pi", backend=backend)
    assert backend.sessions() == []


def test_actions_the_player_does_not_have_are_refused(backend):
    """The reference player declares its actions (session.describe()): a typo fails at creation, not as a
    failed step after step; the player it started is stopped."""
    with pytest.raises(ValueError, match=r"actions \['Fly', 'MoveAheadd'\] are not actions of this player"):
        UnityEnv(PLAYER, actions=["MoveAhead", "MoveAheadd", {"action": "Fly"}], backend=backend)
    assert backend.sessions() == []
