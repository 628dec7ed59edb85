"""A trainer outlives a lost Ray node (issue 35): a vector env or session whose node is removed gets its players
placed again on another node (the episodes end truncated, ``info["restart_cause"] == "node_lost"``) and stepping
goes on; when no node can take them within ``replace_timeout``, one clear error and nothing left running.

A real local Ray cluster on 127.0.0.1: a head without displays (it can never take a display session), and worker
nodes declaring ``display`` that each test adds and removes (``Cluster.remove_node``), with real reference players.
"""

import logging
import time

import pytest
from cluster_support import PLAYER, process_gone

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.cluster import Resources, SessionLostError, create_backend  # noqa: E402
from unirender.errors import RestartError  # noqa: E402

pytestmark = pytest.mark.ray

STORE = 100 * 2**20
MLAGENTS = {"protocol": "mlagents", "executable": "builtin", "width": 48, "height": 40, "platform": "EGL",
            "time_scale": 100}  # fmt: skip
DISPLAY = Resources(display=True)
# A node SIGKILLed (its raylet gone, as a machine that goes away) is declared dead by the GCS's health checks:
# with Ray's defaults (a check every 3 s, 5 failures) that is ~15 s of waiting per hard loss. Checks every
# 0.5 s find the dead raylet's refused connection as surely; a live but loaded node still has the default 10 s
# to answer each check, so a slow machine declares nothing dead that is not.
HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_initial_delay_ms": 500}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                       "object_store_memory": STORE,
                                                       "_system_config": HEALTH_CHECKS})  # fmt: skip
    try:
        if ray.is_initialized():  # another module's Ray instance: this one is ours
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def add_display_node(cluster, displays: int = 2):
    node = cluster.add_node(num_cpus=1, resources={"display": displays}, object_store_memory=STORE)
    cluster.wait_for_nodes()
    return node


def remove_all_display_nodes(cluster) -> None:
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)


@pytest.fixture
def node_losses(caplog):
    caplog.set_level(logging.WARNING, logger="unirender.cluster.ray_backend")
    return lambda: [r for r in caplog.records if "was lost" in r.getMessage()]


def no_actor_left(within: float = 30.0) -> bool:
    """True once the cluster lists no actor that is not dead (a kill reaches the GCS asynchronously)."""
    deadline = time.monotonic() + within
    while any(a["State"] != "DEAD" for a in ray._private.state.actors().values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("kwargs", [PLAYER, MLAGENTS], ids=["ai2thor", "mlagents"])
def test_a_vector_env_rides_through_a_lost_node(cluster, node_losses, kwargs):
    from unirender.gym import UnityVectorEnv

    doomed = add_display_node(cluster)
    backend = create_backend("ray", wait_timeout=30, start_timeout=120, step_timeout=120, replace_timeout=120)
    env = UnityVectorEnv(2, kwargs, backend=backend, resources=DISPLAY)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        before = [s.info() for s in backend.sessions()]
        assert {i["node"] for i in before} == {doomed.node_id}  # the only node with displays
        spare = add_display_node(cluster)
        cluster.remove_node(doomed)
        for info in before:  # the actors died with their node (their players die with them: PDEATHSIG)
            assert process_gone(info["pid"], within=60), "a player of the lost node outlived it"

        obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())
        assert truncated.tolist() == [True, True] and not terminated.any() and not rewards.any()
        assert infos["restart_cause"].tolist() == ["node_lost"] * 2
        assert env.observation_space.contains(obs)
        after = [s.info() for s in backend.sessions()]
        assert {i["node"] for i in after} == {spare.node_id}
        env.step(env.action_space.sample())  # the autoreset step, on the new players
        _, _, _, truncated, _ = env.step(env.action_space.sample())
        assert not truncated.any()
    finally:
        env.close()
        backend.close()
        remove_all_display_nodes(cluster)
    faults = backend.faults()
    assert faults == {"nodes_lost": 1, "replaced": 2, "truncated:node_lost": 2}, faults
    assert len(node_losses()) == 1  # one line for the node, not one per session or step
    assert no_actor_left()


def test_the_agents_of_one_game_ride_through_a_lost_node(cluster):
    """``MLAgentsVectorEnv`` (one game's agents as the slots): every slot ends truncated, the cause in each info."""
    from unirender.gym import MLAgentsVectorEnv

    doomed = add_display_node(cluster)
    backend = create_backend("ray", wait_timeout=30, start_timeout=120, step_timeout=120, replace_timeout=120)
    game = {**MLAGENTS, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"}}
    envs = MLAgentsVectorEnv(game, action_parts="continuous", backend=backend, resources=DISPLAY)
    try:
        envs.reset(seed=0)
        spare = add_display_node(cluster)
        pid = backend.sessions()[0].info()["pid"]
        cluster.remove_node(doomed)
        assert process_gone(pid, within=60)
        obs, _, terminated, truncated, infos = envs.step(envs.action_space.sample())
        assert truncated.tolist() == [True, True] and not terminated.any()
        assert infos["restart_cause"].tolist() == ["node_lost"] * 2
        assert envs.observation_space.contains(obs)
        assert backend.sessions()[0].info()["node"] == spare.node_id
        envs.step(envs.action_space.sample())
    finally:
        envs.close()
        backend.close()
        remove_all_display_nodes(cluster)
    assert backend.faults()["truncated:node_lost"] == 1


def test_a_session_rides_through_more_lost_nodes_than_ray_restarts(cluster, node_losses):
    """Without gym: each loss is an ``ActorLostError`` (a ``RestartError``, ``cause == "node_lost"``), and Ray's own
    restart count (0 here) does not bound it: the session places its new actor itself. The second node dies
    hard (its raylet SIGKILLed, as a machine that goes away): the actor is unreachable until the cluster's health
    checks declare the node dead, then the session moves."""
    first = add_display_node(cluster, displays=1)
    backend = create_backend("ray", max_restarts=0, wait_timeout=30, start_timeout=120, step_timeout=120,
                             replace_timeout=120)  # fmt: skip
    session = backend.create_session(PLAYER, resources=DISPLAY)
    try:
        session.step("RotateRight")
        node = first
        for loss in (1, 2):
            before = session.info()
            assert before["node"] == node.node_id
            node, lost = add_display_node(cluster, displays=1), node
            cluster.remove_node(lost, allow_graceful=loss == 1)
            # A hard-killed node's actor answers until it notices its raylet is gone: step once it is gone.
            assert process_gone(before["pid"], within=60)
            with pytest.raises(RestartError, match="was lost") as caught:
                session.step("RotateRight")
            assert caught.value.cause == "node_lost"
            assert session.restarts == loss and session.info()["node"] == node.node_id
            assert round(session.last_event.metadata["agent"]["rotation"]["y"]) % 360 == 0  # a new player's view
            assert session.step("RotateRight").frame.shape == (64, 64, 3)
        # A reset caught by the loss is simply done by the new player: a reset's new episode is what was asked.
        pid, lost, node = session.info()["pid"], node, add_display_node(cluster, displays=1)
        cluster.remove_node(lost)
        assert process_gone(pid, within=60)
        assert round(session.reset().metadata["agent"]["rotation"]["y"]) % 360 == 0
        assert session.info()["node"] == node.node_id and session.restarts == 3
    finally:
        session.stop()
        backend.close()
        remove_all_display_nodes(cluster)
    assert backend.faults() == {"nodes_lost": 3, "replaced": 3, "truncated:node_lost": 3}
    assert len(node_losses()) == 3


def test_no_node_able_to_take_them_is_one_clear_error(cluster):
    node = add_display_node(cluster)
    backend = create_backend("ray", wait_timeout=30, start_timeout=120, step_timeout=120, replace_timeout=2)
    session = backend.create_session(PLAYER, resources=DISPLAY)
    try:
        pid = session.info()["pid"]
        cluster.remove_node(node)  # the head declares no display: nobody can take the session
        assert process_gone(pid, within=60)
        began = time.monotonic()
        with pytest.raises(SessionLostError) as caught:
            session.step("Pass")
        waited = time.monotonic() - began
        message = str(caught.value)
        assert f"Ray node {node.node_id} was lost" in message and "replace_timeout=2" in message
        assert "display: needs 1, 0 free of 0" in message, message
        assert waited < 60, f"gave up after {waited:.0f} s"  # the deadline, not start_timeout's 120 s
        assert backend.faults() == {"nodes_lost": 1, "gave_up": 1}
        assert session.info()["state"] == "lost"
        assert no_actor_left()  # nothing left running behind the error
        with pytest.raises(SessionLostError, match="restart"):
            session.step("Pass")  # the same session stays lost until restart(), as any lost session
        add_display_node(cluster)
        assert session.restart().frame.shape == (64, 64, 3)
    finally:
        session.stop()
        backend.close()
        remove_all_display_nodes(cluster)


def test_replace_timeout_zero_keeps_ray_restarts_only(cluster):
    node = add_display_node(cluster)
    backend = create_backend("ray", max_restarts=0, start_timeout=60, step_timeout=60, replace_timeout=0)
    session = backend.create_session(PLAYER, resources=DISPLAY)
    try:
        pid = session.info()["pid"]
        cluster.remove_node(node)
        assert process_gone(pid, within=60)
        with pytest.raises(SessionLostError, match="Ray did not restart it"):
            session.step("Pass")
    finally:
        session.stop()
        backend.close()
        remove_all_display_nodes(cluster)
    with pytest.raises(ValueError, match="replace_timeout must be >= 0"):
        create_backend("ray", replace_timeout=-1)
