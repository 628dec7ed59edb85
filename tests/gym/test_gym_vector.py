"""UnityVectorEnv on the real reference player: both autoreset modes step by step against a hand-written
expectation, per-env seeds, reset_mask, concurrency."""

import numpy as np
import pytest
from gym_helpers import PLAYER, half_turn, view_of, yaw_reward
from gymnasium.vector import AutoresetMode

from unirender.gym import UnityVectorEnv

R, L = 0, 1  # RotateRight, RotateLeft (90 degrees each)

# Two envs, episodes end at yaw 180 (terminated) or after 3 steps (truncated); reward = new yaw / 90.
# env 0 turns right: 90, 180 (terminated at its 2nd step); env 1 turns left, right, left: 270, 0, 270 (truncated).
ACTIONS = [(R, L), (R, R), (R, L), (R, L)]

# Per step, per env: (view in the returned observation, reward, terminated, truncated, final view or None).
NEXT_STEP = [
    [(90, 1, False, False, None), (270, 3, False, False, None)],
    [(180, 2, True, False, None), (0, 0, False, False, None)],
    [(0, 0, False, False, None), (270, 3, False, True, None)],  # env 0 resets (action ignored), reward 0
    [(90, 1, False, False, None), (0, 0, False, False, None)],  # env 1 resets
]
SAME_STEP = [
    [(90, 1, False, False, None), (270, 3, False, False, None)],
    [(0, 2, True, False, 180), (0, 0, False, False, None)],  # reset at once, the end in final_obs
    [(90, 1, False, False, None), (0, 3, False, True, 270)],
    [(0, 2, True, False, 180), (270, 3, False, False, None)],
]


def _vector_env(backend, **kwargs):
    return UnityVectorEnv(
        2,
        PLAYER,
        backend=backend,
        observations="rgb",
        actions=["RotateRight", "RotateLeft"],
        reward_fn=yaw_reward,
        termination_fn=half_turn,
        max_episode_steps=3,
        **kwargs,
    )


@pytest.mark.parametrize("mode, expected", [(AutoresetMode.NEXT_STEP, NEXT_STEP), ("SAME_STEP", SAME_STEP)])
def test_autoreset_modes_step_by_step(backend, views, mode, expected):
    envs = _vector_env(backend, autoreset_mode=mode)
    try:
        assert envs.metadata["autoreset_mode"] == AutoresetMode[str(getattr(mode, "name", mode))]
        assert envs.observation_space.shape == (2, 64, 64, 3)  # one modality: a plain batched Box
        obs, _ = envs.reset(seed=0)
        assert [view_of(o, views) for o in obs] == [0, 0]
        for step, (actions, want) in enumerate(zip(ACTIONS, expected, strict=True)):
            obs, rewards, terminated, truncated, infos = envs.step(np.array(actions))
            got = []
            for i in range(2):
                final = None
                if infos.get("_final_obs", np.zeros(2, bool))[i]:
                    final = view_of(infos["final_obs"][i], views)
                    assert infos["_final_info"][i] and "last_action_success" in infos["final_info"]
                got.append((view_of(obs[i], views), rewards[i], terminated[i], truncated[i], final))
            assert got == want, f"step {step + 1}"
    finally:
        envs.close()
    assert backend.sessions() == []


def test_disabled_autoreset_needs_reset_mask(backend, views):
    envs = _vector_env(backend, autoreset_mode="Disabled")
    try:
        envs.reset(seed=0)
        envs.step(np.array([R, L]))
        _, _, terminated, _, _ = envs.step(np.array([R, R]))
        assert terminated.tolist() == [True, False]
        with pytest.raises(ValueError, match=r"envs \[0\] ended their episode"):
            envs.step(np.array([R, R]))
        obs, infos = envs.reset(options={"reset_mask": np.array([True, False])})
        assert [view_of(o, views) for o in obs] == [0, 0]  # env 0 reset; env 1 still looks at 0 (L then R)
        assert infos["_action"].tolist() == [True, False]  # infos of the reset env only
        obs, rewards, _, truncated, _ = envs.step(np.array([R, L]))
        assert [view_of(o, views) for o in obs] == [90, 270] and truncated.tolist() == [False, True]
    finally:
        envs.close()
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        _vector_env(backend, autoreset_mode="sometimes")


def test_reset_mask_resets_only_those_envs(backend, views):
    envs = _vector_env(backend)
    try:
        envs.reset(seed=0)
        obs, *_ = envs.step(np.array([R, L]))
        assert [view_of(o, views) for o in obs] == [90, 270]
        obs, infos = envs.reset(options={"reset_mask": [False, True]})  # a list of bools is taken too
        assert [view_of(o, views) for o in obs] == [90, 0]
        assert infos["_action"].tolist() == [False, True]
        # env 0's episode went on (its 2nd step: 180, terminated), env 1's restarted (its 1st step).
        obs, rewards, terminated, truncated, _ = envs.step(np.array([R, R]))
        assert [view_of(o, views) for o in obs] == [180, 90] and terminated.tolist() == [True, False]
        for bad, message in [
            (np.array([1, 0]), "bool array of shape"),
            (np.array([True]), "bool array of shape"),
            (np.array([False, False]), "resets no env"),
        ]:
            with pytest.raises(ValueError, match=message):
                envs.reset(options={"reset_mask": bad})
    finally:
        envs.close()


def test_per_env_seeds_are_deterministic(backend):
    scenes = ["FloorPlan1_physics", "FloorPlan201_physics", "FloorPlan301_physics"]
    envs = UnityVectorEnv(3, PLAYER, backend=backend, observations="rgb", scenes=scenes)

    def reset_scenes(seed):
        envs.reset(seed=seed)
        return [env.last_event.metadata["sceneName"] for env in envs.envs], [
            env.np_random_seed for env in envs.envs
        ]

    try:
        picked, seeds = reset_scenes([11, 22, None])
        assert seeds[:2] == [11, 22] and seeds[2] not in (11, 22)
        assert reset_scenes([11, 22, None])[0][:2] == picked[:2]  # the same seed, the same scene
        alone = [
            envs.envs[0].reset(seed=s) and envs.envs[0].last_event.metadata["sceneName"] for s in (11, 22)
        ]
        assert alone == picked[:2]  # a seed means the same for a vector env's env as for a single env
        # an int s gives env i the seed s + i
        by_int, seeds = reset_scenes(5)
        assert seeds == [5, 6, 7] and by_int == reset_scenes([5, 6, 7])[0]
        many = {tuple(reset_scenes(s)[0]) for s in range(8)}
        assert len(many) > 1  # the seed really chooses
        with pytest.raises(ValueError, match="2 seeds given for 3 envs"):
            envs.reset(seed=[1, 2])
    finally:
        envs.close()


def test_four_envs_step_concurrently_in_their_own_players(backend):
    envs = UnityVectorEnv(4, PLAYER, backend=backend, observations=["rgb", "depth"], max_episode_steps=2)
    try:
        assert envs.observation_space["rgb"].shape == (4, 64, 64, 3)
        assert envs.observation_space["depth"].shape == (4, 64, 64, 1)
        obs, _ = envs.reset(seed=3)
        assert len({s.info()["pid"] for s in backend.sessions()}) == 4
        obs, rewards, term, trunc, infos = envs.step(np.array([1, 2, 1, 2]))
        assert rewards.shape == (4,) and not (term | trunc).any() and infos["last_action_success"].all()
        assert not np.array_equal(obs["rgb"][0], obs["rgb"][1])
        np.testing.assert_array_equal(obs["rgb"][0], obs["rgb"][2])
        assert envs.observation_space.contains(obs)
    finally:
        envs.close()
