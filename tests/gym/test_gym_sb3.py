"""The Stable-Baselines3 path on the real reference player: SB3's check_env, the VecEnv adapter's infos and
episode statistics step by step, PPO with CnnPolicy and MultiInputPolicy, SB3's own vector envs; PPO on the
reference ML-Agents game through make_vec_env."""

import warnings

import numpy as np
import pytest
from gym_helpers import ALL_MODALITIES, PLAYER, half_turn, view_of, yaw_reward

sb3 = pytest.importorskip("stable_baselines3")  # the [sb3] extra; ./dev test installs it

from stable_baselines3.common.env_checker import check_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor  # noqa: E402

from unirender.gym import UnityEnv, UnityVectorEnv  # noqa: E402
from unirender.gym.sb3 import SB3VecEnv, make_vec_env  # noqa: E402

R, L = 0, 1


@pytest.mark.parametrize("observations", ["rgb", ["rgb", "depth"], ALL_MODALITIES])
def test_sb3_check_env_with_the_render_check(backend, observations):
    # uint8 depth: an image to SB3 (float32 metres draw its "not an image, flatten it" warning)
    env = UnityEnv(
        PLAYER,
        observations=observations,
        depth_dtype="uint8",
        backend=backend,
        max_episode_steps=5,
        render_mode="rgb_array",
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=False)  # closes the env, then resets and steps it again
        assert [str(w.message) for w in caught] == []
        assert env.session is not None
    finally:
        env.close()
    assert backend.sessions() == []


def test_adapter_infos_and_episode_statistics_step_by_step(backend, views):
    """Two envs: env 0 turns right and terminates at yaw 180 (2nd step); env 1 turns left, right, left and is
    truncated by the 3-step limit. Reward = new yaw / 90."""
    venv = VecMonitor(
        SB3VecEnv(
            UnityVectorEnv(
                2,
                PLAYER,
                backend=backend,
                observations="rgb",
                actions=["RotateRight", "RotateLeft"],
                reward_fn=yaw_reward,
                termination_fn=half_turn,
                max_episode_steps=3,
                autoreset_mode="SAME_STEP",
            )
        )
    )
    try:
        venv.seed(4)
        obs = venv.reset()
        assert [view_of(o, views) for o in obs] == [0, 0]
        assert [env.np_random_seed for env in venv.venv.venv.envs] == [4, 5]
        assert venv.venv.reset_infos[0]["last_action_success"]  # the adapter keeps them (VecMonitor does not)

        obs, rewards, dones, infos = venv.step(np.array([R, L]))
        assert [view_of(o, views) for o in obs] == [90, 270] and rewards.tolist() == [1, 3]
        assert not dones.any() and "terminal_observation" not in infos[0]

        obs, rewards, dones, infos = venv.step(np.array([R, R]))
        assert dones.tolist() == [True, False] and rewards.tolist() == [2, 0]
        assert view_of(obs[0], views) == 0  # reset in the same step, as SB3 expects
        assert view_of(infos[0]["terminal_observation"], views) == 180
        assert infos[0]["TimeLimit.truncated"] is False and infos[0]["action"] == "RotateRight"
        assert infos[0]["episode"]["r"] == 3 and infos[0]["episode"]["l"] == 2
        assert venv.venv.reset_infos[0]["action"] == ""  # the new episode's reset info

        obs, rewards, dones, infos = venv.step(np.array([R, L]))
        assert dones.tolist() == [False, True] and rewards.tolist() == [1, 3]
        assert view_of(infos[1]["terminal_observation"], views) == 270 and view_of(obs[1], views) == 0
        assert infos[1]["TimeLimit.truncated"] is True
        assert infos[1]["episode"]["r"] == 6 and infos[1]["episode"]["l"] == 3  # 3 + 0 + 3
        assert len(venv.get_images()) == 2 and venv.get_attr("max_episode_steps") == [3, 3]
        assert venv.env_is_wrapped(VecMonitor) == [False, False]
    finally:
        venv.close()
    assert backend.sessions() == []
    next_step = UnityVectorEnv(1, PLAYER, backend=backend)
    try:
        with pytest.raises(ValueError, match="autoreset_mode=SAME_STEP"):
            SB3VecEnv(next_step)  # SB3 would see the next-step reset as a step of the finished episode
    finally:
        next_step.close()


@pytest.mark.slow
def test_ppo_trains_with_cnn_and_multi_input_policies():
    """A few hundred PPO steps over 2 envs through make_vec_env: CnnPolicy on the rgb Box, MultiInputPolicy on
    rgb + uint8 depth (both through CNNs), episode statistics collected."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.torch_layers import NatureCNN

    # One torch thread: the players need the other core; with torch's default (a thread per core) the CNN's
    # convolutions spin against them and this test took 18 s instead of 2.5 s on 2 shared cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    try:
        player = {**PLAYER, "width": 40, "height": 40}  # NatureCNN's smallest input is 36x36
        for policy, observations in [("CnnPolicy", "rgb"), ("MultiInputPolicy", ["rgb", "depth"])]:
            venv = make_vec_env(
                2,
                player,
                observations=observations,  # depth: uint8 by default in make_vec_env
                max_episode_steps=16,
                actions=["RotateRight", "RotateLeft"],
                reward_fn=yaw_reward,
                seed=0,
            )
            try:
                model = PPO(
                    policy, venv, n_steps=64, batch_size=128, n_epochs=1, seed=0, device="cpu", verbose=0
                )
                if policy == "MultiInputPolicy":
                    extractors = model.policy.features_extractor.extractors
                    assert isinstance(extractors["depth"], NatureCNN) and isinstance(
                        extractors["rgb"], NatureCNN
                    )
                before = [p.detach().clone() for p in model.policy.parameters()]
                model.learn(total_timesteps=256)
                assert model.num_timesteps == 256
                assert len(model.ep_info_buffer) >= 2 * (256 // 2 // 16) - 2  # ~16 episodes of 16 steps
                assert all(info["l"] == 16 for info in model.ep_info_buffer)
                changed = [
                    not np.array_equal(a.numpy(), b.detach().numpy())
                    for a, b in zip(before, model.policy.parameters(), strict=True)
                ]
                assert any(changed)
            finally:
                venv.close()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("vec_env_cls", [DummyVecEnv, SubprocVecEnv])
def test_make_vec_env_with_sb3_vector_envs(vec_env_cls):
    venv = make_vec_env(2, PLAYER, vec_env_cls=vec_env_cls, observations="rgb", max_episode_steps=2, seed=1)
    try:
        assert isinstance(venv, vec_env_cls)
        obs = venv.reset()
        assert obs.shape == (2, 64, 64, 3)
        venv.step(np.array([R, R]))
        obs, _, dones, infos = venv.step(np.array([R, R]))
        assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
        assert all(info["episode"]["l"] == 2 for info in infos)  # SB3's Monitor per env
    finally:
        venv.close()


# The reference ML-Agents game: one agent per game, 16-step episodes (interrupted unless the target is reached).
MLAGENTS_GAME = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 32, "height": 32,
                 "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "1", "UNIRENDER_MLAGENTS_MAX_STEP": "16"}}  # fmt: skip


def test_ppo_trains_on_the_mlagents_game_through_make_vec_env():
    """make_vec_env picks MLAgentsEnv from the protocol: 2 games in a SAME_STEP UnityVectorEnv, MlpPolicy on the
    vector sensor, the continuous actions (SB3 has no Dict action space: the hybrid one is refused)."""
    import torch
    from stable_baselines3 import PPO

    from unirender.gym import MLAgentsEnv

    with pytest.raises(ValueError, match="action_parts='continuous' or 'discrete'"):
        make_vec_env(1, MLAGENTS_GAME)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the players need the other core (see the CNN test)
    venv = make_vec_env(2, MLAGENTS_GAME, observations=["VectorSensor_size8"], action_parts="continuous", seed=0)
    try:
        assert all(isinstance(env, MLAgentsEnv) for env in venv.venv.venv.envs)
        assert venv.observation_space.shape == (8,) and venv.action_space.shape == (2,)
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu", verbose=0)
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
        assert len(model.ep_info_buffer) >= 2 * (256 // 2 // 16) - 2  # episodes of at most 16 steps ended
        assert all(1 <= info["l"] <= 16 for info in model.ep_info_buffer)
        changed = [not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True)]
        assert any(changed)
    finally:
        venv.close()
        torch.set_num_threads(threads)


def test_ppo_trains_on_the_agents_of_one_mlagents_game():
    """slots='agents': the four agents of one game are SB3's four envs (MLAgentsVectorEnv, same-step resets)."""
    import torch
    from stable_baselines3 import PPO

    from unirender.gym import MLAgentsVectorEnv

    game = {**MLAGENTS_GAME, "env": {"UNIRENDER_MLAGENTS_AGENTS": "4", "UNIRENDER_MLAGENTS_MAX_STEP": "16"}}
    kwargs = {"observations": ["VectorSensor_size8"], "action_parts": "continuous"}
    with pytest.raises(ValueError, match="num_envs=2, but the game has 4 agents"):
        make_vec_env(2, game, slots="agents", **kwargs)
    with pytest.raises(ValueError, match="agents cannot be a vector's slots"):
        make_vec_env(2, PLAYER, slots="agents")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    venv = make_vec_env(4, game, slots="agents", seed=0, **kwargs)
    try:
        assert isinstance(venv.venv.venv, MLAgentsVectorEnv) and venv.num_envs == 4
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu", verbose=0)
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
        assert len(model.ep_info_buffer) >= 4 * (256 // 4 // 16) - 4  # each agent's episodes of at most 16 steps
        assert all(1 <= info["l"] <= 16 for info in model.ep_info_buffer)
    finally:
        venv.close()
        torch.set_num_threads(threads)


def test_make_vec_env_with_dummy_vec_env_builds_the_family_env():
    from unirender.gym import MLAgentsEnv

    venv = make_vec_env(2, MLAGENTS_GAME, vec_env_cls=DummyVecEnv, observations=["VectorSensor_size8"],
                        action_parts="discrete", max_episode_steps=2, seed=1)  # fmt: skip
    try:
        assert all(isinstance(env.unwrapped, MLAgentsEnv) for env in venv.envs)
        assert venv.reset().shape == (2, 8)
        venv.step(np.array([[2], [2]]))
        _, _, dones, infos = venv.step(np.array([[2], [2]]))
        assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
    finally:
        venv.close()
