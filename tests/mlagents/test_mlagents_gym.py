"""``unirender.gym.MLAgentsEnv`` on the reference player's ML-Agents game (EGL, 32x32): gymnasium's check_env,
spaces from the game's description, steps, seeded resets, episode ends, a crashed player as a truncated step,
``action_parts``, the family registry (``make_env``, ``gymnasium.make``), ``UnityVectorEnv`` over games in both
autoreset modes (one game per slot), ``MLAgentsVectorEnv`` (one game's agents as the slots)."""

from __future__ import annotations

import os
import signal

import gymnasium
import numpy as np
import pytest

pytest.importorskip("grpc")

from gymnasium import spaces  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from fixtures import no_leaks  # noqa: E402, F401  (a fixture)
from unirender.gym import (  # noqa: E402
    ENV_ID,
    MLAgentsEnv,
    MLAgentsVectorEnv,
    UnityEnv,
    UnityVectorEnv,
    make_env,
)

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


# One agent, 3-step episodes; the vector sensor's last value is step / max_step (1.0 in the interrupted step).
GAME = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 32, "height": 32,
        "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "1", "UNIRENDER_MLAGENTS_MAX_STEP": "3"}}  # fmt: skip
STILL = np.zeros(2, np.float32)  # move 0, turn 0: the agent stays where it spawned, far from the target


@pytest.mark.usefixtures("no_leaks")
def test_a_crashed_player_ends_the_episode_as_truncated():
    """SIGKILL the player: the controller restarts it, the step that met the crash is truncated with
    info["restarted"] and the first decision of the new player's episodes; stepping goes on from there."""
    env = MLAgentsEnv(GAME, observations=["VectorSensor_size8"], action_parts="continuous")
    try:
        env.reset(seed=3)
        obs, *_ = env.step(STILL)
        assert obs[-1] == pytest.approx(1 / 3)
        pid = env.session.describe().pid
        os.kill(pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(STILL)
        assert truncated and not terminated and reward == 0.0
        assert info["restarted"] and "crashed and was restarted" in info["error_message"]
        assert env.observation_space.contains(obs) and obs[-1] == 0.0  # a new episode's first decision
        assert env.session.describe().pid not in (None, pid)
        obs, _, terminated, truncated, info = env.step(STILL)
        assert obs[-1] == pytest.approx(1 / 3) and not (terminated or truncated) and "restarted" not in info
        obs, _ = env.reset()
        assert obs[-1] == 0.0
    finally:
        env.close()


@pytest.mark.usefixtures("no_leaks")
def test_action_parts_and_the_family_registry():
    env = make_env(GAME, observations=["VectorSensor_size8"], action_parts="discrete")  # protocol -> MLAgentsEnv
    try:
        assert isinstance(env, MLAgentsEnv)
        assert env.action_space == spaces.MultiDiscrete([3])
        env.reset()
        obs, _, _, _, info = env.step(np.array([2]))  # stand still
        assert obs.shape == (8,) and info["agent_id"] == 0
    finally:
        env.close()
    made = gymnasium.make(ENV_ID, controller_kwargs=GAME, action_parts="continuous")
    try:
        assert isinstance(made.unwrapped, MLAgentsEnv)
        assert made.action_space == spaces.Box(-1.0, 1.0, (2,), np.float32)
        assert set(made.observation_space.spaces) == {"CameraSensor", "VectorSensor_size8"}
    finally:
        made.close()
    with pytest.raises(ValueError, match="action_parts must be one of"):
        MLAgentsEnv(GAME, action_parts="both")
    with pytest.raises(ValueError, match="use unirender.gym.MLAgentsEnv"):
        UnityEnv(GAME)
    with pytest.raises(ValueError, match="use unirender.gym.MLAgentsEnv"):
        UnityEnv(environment={"protocol": "mlagents", "platform": "EGL"})


# Per step: the vector sensor's step counter in each env's observation, and truncated. Episodes are 3 steps.
NEXT_STEP = [(1 / 3, False), (2 / 3, False), (1.0, True), (0.0, False), (1 / 3, False)]
SAME_STEP = [(1 / 3, False), (2 / 3, False), (0.0, True), (1 / 3, False), (2 / 3, False)]


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("mode, expected", [(AutoresetMode.NEXT_STEP, NEXT_STEP), ("SAME_STEP", SAME_STEP)])
def test_a_vector_env_of_games_in_both_autoreset_modes(mode, expected):
    """Two games, one per slot; a 3-step episode is interrupted by the game (max_step): truncated."""
    envs = UnityVectorEnv(2, GAME, observations=["VectorSensor_size8"], action_parts="continuous",
                          autoreset_mode=mode)  # fmt: skip
    try:
        assert all(isinstance(env, MLAgentsEnv) for env in envs.envs)
        assert envs.action_space.shape == (2, 2) and envs.observation_space.shape == (2, 8)
        obs, infos = envs.reset(seed=0)
        assert obs[:, -1].tolist() == [0.0, 0.0] and infos["agent_id"].tolist() == [0, 0]
        assert not np.array_equal(obs[0], obs[1])  # seeds 0 and 1: two different games
        for step, (counter, truncated_now) in enumerate(expected, 1):
            obs, rewards, terminated, truncated, infos = envs.step(np.stack([STILL, STILL]))
            assert obs[:, -1] == pytest.approx([counter, counter]), f"step {step}"
            assert truncated.tolist() == [truncated_now] * 2 and not terminated.any(), f"step {step}"
            if envs.autoreset_mode == AutoresetMode.SAME_STEP and truncated_now:
                assert infos["_final_obs"].all()
                assert [final[-1] for final in infos["final_obs"]] == [1.0, 1.0]
                assert infos["final_info"]["interrupted"].all()
        with pytest.raises(ValueError, match="expected 2 actions"):
            envs.step(np.zeros((3, 2), np.float32))
    finally:
        envs.close()


@pytest.mark.usefixtures("no_leaks")
def test_the_agents_of_one_game_as_the_slots():
    """Three agents of one game in three slots, same-step autoreset (the game's own): the interrupted step
    returns the new episodes' first observations, the ended ones in final_obs; a crash truncates every slot."""
    game = {**GAME, "env": {"UNIRENDER_MLAGENTS_AGENTS": "3", "UNIRENDER_MLAGENTS_MAX_STEP": "3"}}
    envs = MLAgentsVectorEnv(game, action_parts="continuous")
    try:
        assert envs.num_envs == 3 and envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert envs.observation_space["CameraSensor"].shape == (3, 32, 32, 3)
        assert envs.observation_space["VectorSensor_size8"].shape == (3, 8)
        assert envs.action_space.shape == (3, 2)
        obs, infos = envs.reset(seed=0)  # no agent spawns within reach of the target (seed 4's third does)
        assert infos["agent_id"].tolist() == [0, 1, 2] and envs.observation_space.contains(obs)
        positions = obs["VectorSensor_size8"][:, :2].copy()
        assert len({tuple(p) for p in positions}) == 3  # three agents, three places
        still = np.zeros((3, 2), np.float32)
        for step, counter in enumerate([1 / 3, 2 / 3], 1):
            obs, rewards, terminated, truncated, infos = envs.step(still)
            assert obs["VectorSensor_size8"][:, -1] == pytest.approx([counter] * 3), f"step {step}"
            assert not (terminated | truncated).any() and "_final_obs" not in infos
            assert rewards == pytest.approx([-0.001] * 3)  # the game's step penalty, per agent
        # an agent's own action reaches its own agent: slot 1 turns, the others stand still
        yaws = obs["VectorSensor_size8"][:, 2].copy()
        turn = still.copy()
        turn[1] = (0.0, 1.0)
        obs, rewards, terminated, truncated, infos = envs.step(turn)
        assert truncated.all() and not terminated.any()  # max_step 3: interrupted
        assert obs["VectorSensor_size8"][:, -1].tolist() == [0.0, 0.0, 0.0]  # reset in the same step
        assert infos["_final_obs"].all() and infos["final_info"]["interrupted"].all()
        finals = [final["VectorSensor_size8"] for final in infos["final_obs"]]
        assert [f[-1] for f in finals] == [1.0, 1.0, 1.0]
        np.testing.assert_array_equal([f[:2] for f in finals], positions)  # nobody moved
        turned = [abs(float(f[2] - y)) for f, y in zip(finals, yaws, strict=True)]
        assert turned[0] == turned[2] == 0.0 and turned[1] == pytest.approx(15.0)  # TURN_DEG
        # a crash: every slot's episode ends as truncated, the new game's agents fill the slots
        pid = envs.env.session.describe().pid
        os.kill(pid, signal.SIGKILL)
        obs, rewards, terminated, truncated, infos = envs.step(still)
        assert truncated.all() and not terminated.any() and rewards.tolist() == [0.0] * 3
        assert infos["restarted"].all() and infos["_final_obs"].all()
        assert envs.observation_space.contains(obs) and obs["VectorSensor_size8"][:, -1].tolist() == [0.0] * 3
        obs, *_ = envs.step(still)
        assert obs["VectorSensor_size8"][:, -1] == pytest.approx([1 / 3] * 3)
        with pytest.raises(ValueError, match="not in Box"):
            envs.step(still + 2.0)
        with pytest.raises(ValueError, match="not a batch of"):
            envs.step(np.zeros((2, 2), np.float32))
        with pytest.raises(ValueError, match="reset together"):
            envs.reset(options={"reset_mask": np.array([True, False, True])})
    finally:
        envs.close()
    assert envs.env.session is None
    with pytest.raises(gymnasium.error.ClosedEnvironmentError):
        envs.step(still)
    with pytest.raises(ValueError, match="same step only"):
        MLAgentsVectorEnv(game, autoreset_mode="NEXT_STEP")


@pytest.mark.usefixtures("no_leaks")
def test_make_env_takes_an_mlagents_spec_file(tmp_path):
    """``make_env(environment="ml.yaml")`` picks MLAgentsEnv, which loads the file through the spec port (it used
    to raise ``TypeError: 'str' object is not a mapping``)."""
    import yaml

    path = tmp_path / "ml.yaml"
    path.write_text(yaml.safe_dump({"environment": {"protocol": "mlagents", **ENV}, "episodes": [{"steps": 1}]}))
    env = make_env(environment=str(path), observations=["VectorSensor_size8"])
    try:
        assert isinstance(env, MLAgentsEnv) and env.observation_space.shape == (8,)
    finally:
        env.close()
