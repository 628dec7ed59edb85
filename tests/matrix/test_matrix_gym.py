"""The gym layer on every family and backend: the family's Gymnasium env (picked from ``protocol``) passes
Gymnasium's checker, a crashed player ends the episode as truncated, ``UnityVectorEnv`` autoresets in both
modes (a WebGL slot is a browser of its own), and PPO trains through ``unirender.gym.sb3.make_vec_env``; an
ML-Agents game's agents as the slots."""

import os
import signal

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from stable_baselines3 import PPO

from unirender.gym import MLAgentsEnv, MLAgentsVectorEnv, UnityEnv, UnityVectorEnv, WebGLEnv, make_env
from unirender.gym.sb3 import make_vec_env

ENV_CLASS = {"ai2thor": UnityEnv, "mlagents": MLAgentsEnv, "webgl": WebGLEnv}
# What each family's envs observe and take here: small, and an action space SB3 takes.
ENV_KWARGS = {
    "ai2thor": {"observations": "rgb", "actions": ["RotateRight", "RotateLeft"]},
    "mlagents": {"observations": ["VectorSensor_size8"], "action_parts": "continuous"},
    "webgl": {},  # the canvas; Discrete over the declared actions
}
POLICY = {"ai2thor": "CnnPolicy", "mlagents": "MlpPolicy", "webgl": "CnnPolicy"}


def _fixed_actions(family: str, num_envs: int) -> np.ndarray:
    """Actions that never end an episode by themselves: AI2-THOR turns right (no termination_fn); the ML-Agents
    agent stands still (it spawns away from the target); the WebGL test game takes ``noop`` (it never emits
    ``done``)."""
    if family in ("ai2thor", "webgl"):
        return np.zeros(num_envs, np.int64)
    return np.zeros((num_envs, 2), np.float32)


def test_the_family_env_passes_check_env(case):
    """All of each family's observations and actions (ML-Agents: camera and vector sensors, the hybrid Dict
    action space; AI2-THOR: rgb and depth)."""
    kwargs = {"ai2thor": {"observations": ["rgb", "depth"]}, "mlagents": {}, "webgl": {}}[case.family]
    env = make_env(case.controller_kwargs, backend=case.backend(), max_episode_steps=3, **kwargs)
    try:
        assert type(env) is ENV_CLASS[case.family]
        check_env(env, skip_render_check=True)
        obs, _ = env.reset()
        assert env.observation_space.contains(obs)
        assert env.observation_space.contains(env.step(env.action_space.sample())[0])
    finally:
        env.close()


def test_a_crashed_player_ends_the_episode_as_truncated(placement_case):
    case = placement_case
    env = make_env(case.controller_kwargs, backend=case.backend(), **ENV_KWARGS[case.family])
    action = _fixed_actions(case.family, 1)[0]
    try:
        env.reset()
        env.step(action)
        pid = env.session.describe().pid
        os.kill(pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = env.step(action)
        assert truncated and not terminated and reward == 0.0 and info["restarted"]
        assert env.observation_space.contains(obs)
        assert env.session.describe().pid not in (None, pid)
        env.reset()
        obs, *_ = env.step(action)
        assert env.observation_space.contains(obs)
    finally:
        env.close()


def test_the_vector_env_autoresets_in_both_modes(placement_case):
    """Two envs, 2-step episodes (max_episode_steps): NEXT_STEP resets in the step after the end (reward 0),
    SAME_STEP in the ending step (the last observation in final_obs). On the service placement the envs' steps
    go out together (``step_many``), the resets on their own."""
    case = placement_case
    backend = case.backend()
    actions = _fixed_actions(case.family, 2)
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        envs = UnityVectorEnv(2, case.controller_kwargs, backend=backend, autoreset_mode=mode,
                              max_episode_steps=2, **ENV_KWARGS[case.family])  # fmt: skip
        try:
            assert all(type(env) is ENV_CLASS[case.family] for env in envs.envs)
            if case.family == "webgl":  # each slot its own browser, as each session of the family is
                assert len({env.session.describe().pid for env in envs.envs}) == 2
            obs, _ = envs.reset()  # no seed: an ML-Agents seed means a fresh game (a relaunch) per slot
            assert envs.observation_space.contains(obs)
            _, _, terminated, truncated, _ = envs.step(actions)
            assert not (terminated | truncated).any()
            obs, _, terminated, truncated, infos = envs.step(actions)
            assert truncated.all() and not terminated.any(), mode
            if mode == AutoresetMode.SAME_STEP:
                assert infos["_final_obs"].all()
                for final, first in zip(infos["final_obs"], obs, strict=True):
                    assert not np.array_equal(final, first)  # the ended episode's last view, then the new one's
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            assert not (terminated | truncated).any() and "_final_obs" not in infos
            if mode == AutoresetMode.NEXT_STEP:
                assert rewards.tolist() == [0.0, 0.0]  # the reset step
            assert envs.observation_space.contains(obs)
        finally:
            envs.close()
    assert backend.sessions() == []


def test_ppo_trains_through_make_vec_env(case):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the players need the other core
    venv = make_vec_env(2, case.controller_kwargs, backend=case.backend(), max_episode_steps=8,
                        **ENV_KWARGS[case.family])  # fmt: skip
    try:
        model = PPO(POLICY[case.family], venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=64)
        assert model.num_timesteps == 64 and len(model.ep_info_buffer) >= 6  # 8-step episodes ended
        assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    finally:
        venv.close()
        torch.set_num_threads(threads)


def test_the_agents_of_one_game_as_the_slots(mlagents_case):
    """Two agents, 2-step episodes (the game's max_step): the ending step resets both (same step)."""
    kwargs = {**mlagents_case.controller_kwargs,
              "env": {"UNIRENDER_MLAGENTS_AGENTS": "2", "UNIRENDER_MLAGENTS_MAX_STEP": "2"}}  # fmt: skip
    envs = MLAgentsVectorEnv(kwargs, backend=mlagents_case.backend(), **ENV_KWARGS["mlagents"])
    try:
        assert envs.num_envs == 2
        obs, infos = envs.reset()
        assert infos["agent_id"].tolist() == [0, 1] and obs[:, -1].tolist() == [0.0, 0.0]
        actions = _fixed_actions("mlagents", 2)
        obs, *_ = envs.step(actions)
        assert obs[:, -1].tolist() == [0.5, 0.5]
        obs, _, terminated, truncated, infos = envs.step(actions)
        assert truncated.all() and not terminated.any() and obs[:, -1].tolist() == [0.0, 0.0]
        assert [final[-1] for final in infos["final_obs"]] == [1.0, 1.0]
    finally:
        envs.close()


@pytest.mark.parametrize("family", ["mlagents"])
def test_an_env_of_another_family_is_refused_with_the_reason(family):
    """UnityEnv is the AI2-THOR env: it names the env an ML-Agents environment needs (no player launched)."""
    with pytest.raises(ValueError, match="MLAgentsEnv"):
        UnityEnv({"protocol": family, "executable": "builtin"})
