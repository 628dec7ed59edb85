"""The reference player's ML-Agents game rules (pure: no renderer, no sockets)."""

from __future__ import annotations

import numpy as np
import pytest

from unirender.player.mlagents import game as G


def test_reaching_the_target_ends_the_episode_with_reward_and_moves_the_target():
    g = G.ReachTargetGame(agents=2, max_step=100, seed=1)
    a = g.agents[0]
    a.x, a.z, a.yaw = np.float32(g.target[0]), np.float32(g.target[1] - 0.9), np.float32(0.0)  # facing it
    results = g.step({0: ([1.0, 0.0], [0])})  # walk 0.25 m towards it: within 0.8 m
    assert results[0].done and not results[0].interrupted
    assert a.reward == pytest.approx(1.0 + G.STEP_PENALTY) and not results[1].done
    target = g.target
    g.end_episodes(results)
    assert g.target != target and a.steps == 0  # a new target, a new episode for the agent


def test_max_step_interrupts_and_reset_starts_everyone_over():
    g = G.ReachTargetGame(agents=1, max_step=3, seed=2)
    g.target = (np.float32(4.5), np.float32(4.5))
    g.agents[0].x = g.agents[0].z = np.float32(-4.0)
    outcomes = [g.step({})[0] for _ in range(3)]
    assert [o.done for o in outcomes] == [False, False, True] and outcomes[-1].interrupted
    g.reset()
    assert g.agents[0].steps == 0 and g.vector_observation(g.agents[0])[7] == 0.0


def test_sprint_is_masked_near_the_edge_and_not_taken():
    g = G.ReachTargetGame(agents=1, seed=3)
    a = g.agents[0]
    g.target = (np.float32(-4.5), np.float32(-4.5))
    a.x, a.z, a.yaw = np.float32(4.2), np.float32(0.0), np.float32(-90.0)  # near the +x edge, facing -x
    assert g.action_mask(a) == [False, True, False]
    g.step({0: ([1.0, 0.0], [1])})  # sprint asked, masked: walks instead
    assert float(a.x) == pytest.approx(4.2 - G.MOVE_M, abs=1e-5)
    g.step({0: ([1.0, 1.0], [2])})  # stand still, but turn
    assert float(a.x) == pytest.approx(4.2 - G.MOVE_M, abs=1e-5) and float(a.yaw) == pytest.approx(-75.0)


def test_vector_observation_is_the_float32_state():
    g = G.ReachTargetGame(agents=1, seed=4)
    a = g.agents[0]
    v = g.vector_observation(a)
    assert [v[0], v[1], v[2]] == [a.x, a.z, a.yaw] and len(v) == 8
    assert v[5] == np.float32(g.target[0] - a.x)


@pytest.mark.parametrize("forced,trainer,chw,behaves_as", [
    (None, "0.28.0", False, "a package 2.2.1-exp.1 game, for mlagents-envs 0.28.0"),
    (None, "0.30.0", False, "a package 2.2.1-exp.1 game, for mlagents-envs 0.30.0"),
    (None, "1.1.0", True, "a package 4.0.0 game, for mlagents-envs 1.1.0"),
    (None, "", True, "a package 4.0.0 game, for mlagents-envs (no version)"),  # a custom trainer: current game
    ("2.2.1-exp.1", "1.1.0", False, "package 2.2.1-exp.1, forced"),  # forced: whatever the trainer says
    ("3.0.0", "0.28.0", True, "package 3.0.0, forced"),
])  # fmt: skip
def test_the_player_follows_the_trainers_generation_unless_a_package_is_forced(forced, trainer, chw, behaves_as):
    from unirender.player.mlagents.client import MLAgentsPlayer
    from unirender.player.mlagents.launch import parse_mlagents_launch

    env = {"UNIRENDER_MLAGENTS_PACKAGE_VERSION": forced} if forced else {}
    player = MLAgentsPlayer(parse_mlagents_launch(["--mlagents-port", "5005", "-nographics"], env))
    player._settle_layout(trainer)
    assert (player.chw, player.behaves_as) == (chw, behaves_as)


def test_a_trainer_without_hybrid_actions_is_refused_as_unity_refuses_it():
    from unirender.player.mlagents.client import MLAgentsPlayer, TrainerUnsupported
    from unirender.player.mlagents.launch import parse_mlagents_launch
    from unirender.protocol.mlagents import communicator_objects_pb2 as pb

    player = MLAgentsPlayer(parse_mlagents_launch(["--mlagents-port", "5005", "-nographics"], {}))
    player.pb = pb
    player._describe(pb.UnityMessageProto())  # a current trainer: described
    player.brain_sent, player.trainer_hybrid_actions = False, False
    with pytest.raises(TrainerUnsupported, match="hybrid actions"):
        player._describe(pb.UnityMessageProto())
