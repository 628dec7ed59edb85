"""RayBackend on a real 2-node Ray cluster on this machine (loopback only), with real reference players.

One session-scoped cluster: a head node without displays and a worker node declaring ``display: 2`` and one
(fake) GPU. Node removal runs last, since it replaces the worker node.
"""

import os
import signal
import threading

import numpy as np
import pytest
from cluster_support import PLAYER, process_gone

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.cluster import CapacityError, Resources, SessionLostError, create_backend  # noqa: E402
from unirender.errors import ActionError, RestartError  # noqa: E402

pytestmark = pytest.mark.ray

STORE = 100 * 2**20


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "object_store_memory": STORE},
    )
    try:
        worker = c.add_node(num_cpus=1, num_gpus=1, resources={"display": 2}, object_store_memory=STORE)
        c.wait_for_nodes()
        if ray.is_initialized():  # another module's Ray instance: this one is ours
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False)
        c.display_node = worker
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def backend(cluster):
    b = create_backend("ray", wait_timeout=2, max_restarts=1, start_timeout=60, step_timeout=60)
    yield b
    b.close()


def display_node_id(cluster) -> str:
    return cluster.display_node.node_id


def test_display_session_runs_on_the_display_node_and_frames_arrive_zero_copy(cluster, backend):
    with backend.create_session(PLAYER, resources=Resources(display=True)) as session:
        info = session.info()
        assert info["backend"] == "ray" and info["node"] == display_node_id(cluster)
        assert isinstance(info["pid"], int) and isinstance(info["actor_pid"], int)
        event = session.step("RotateRight")
        frame = event.frame
        assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
        assert round(event.metadata["agent"]["rotation"]["y"]) % 360 == 90
        # Read-only views of the object store's buffer: no copy was made on this side.
        assert not frame.flags.writeable and not frame.flags.owndata
        assert session.reset().frame.shape == (64, 64, 3)
    assert process_gone(info["pid"])


def test_session_beyond_capacity_fails_clearly_or_waits(backend):
    # Two placed actors without players hold both display slots, exactly as two sessions would.
    holders = [backend._actor_class(Resources(display=True)).remote({}) for _ in range(2)]
    ray.get([h.placed.remote() for h in holders], timeout=60)
    backend_wait = create_backend("ray", wait_timeout=60, start_timeout=60)
    try:
        with pytest.raises(
            CapacityError, match=r"no Ray node could take session .* display: needs 1, 0 free of 2"
        ):
            backend.create_session(PLAYER, resources=Resources(display=True))
        assert backend.sessions() == []
        waited = []
        waiter = threading.Thread(
            target=lambda: waited.append(
                backend_wait.create_session(PLAYER, resources=Resources(display=True))
            )
        )
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and not waited  # waiting: both display slots are held
        ray.kill(holders[0])
        waiter.join(60)
        assert len(waited) == 1 and waited[0].step("Pass").frame.shape == (64, 64, 3)
    finally:
        for h in holders:
            ray.kill(h)
        backend_wait.close()


def test_gpu_request_asks_ray_for_a_gpu(cluster, backend):
    actor = backend._actor_class(Resources(gpu=0)).remote({})
    try:
        placed = ray.get(actor.placed.remote(), timeout=30)
    finally:
        ray.kill(actor)
    assert placed["gpu_ids"] == ["0"] and placed["node"] == display_node_id(cluster)


def test_sigkilled_actor_is_restarted_with_restart_error_and_no_orphan(backend):
    session = backend.create_session({**PLAYER, "max_restarts": 1})
    try:
        # The Controller's own errors cross Ray as themselves: a bad action, a crashed player it restarted.
        with pytest.raises(ActionError, match="Fly"):
            session.step("Fly")
        first = session.info()
        os.kill(first["pid"], signal.SIGKILL)
        with pytest.raises(RestartError, match="player crashed and was restarted"):
            session.step("Pass")
        assert session.restarts == 1 and session.info()["pid"] != first["pid"]
        assert session.info()["actor_pid"] == first["actor_pid"]

        session.step("RotateLeft")
        before = session.info()
        os.kill(before["actor_pid"], signal.SIGKILL)
        with pytest.raises(RestartError, match="episode is lost"):
            session.step("Pass")
        assert process_gone(before["pid"]), "the player of the killed actor must not outlive it"
        after = session.info()
        assert session.restarts == 2 and after["actor_pid"] != before["actor_pid"]
        assert round(session.reset().metadata["agent"]["rotation"]["y"]) % 360 == 0  # fresh episode
        # Ray's restarts are used up: the next death is reported as lost, restart() places a new actor.
        os.kill(after["actor_pid"], signal.SIGKILL)
        with pytest.raises(SessionLostError, match="restart"):
            session.step("Pass")
        assert session.restart().frame.shape == (64, 64, 3)
        assert session.step("Pass").frame.shape == (64, 64, 3)
    finally:
        session.stop()


def test_vector_env_over_ray(backend):
    from unirender.gym import UnityVectorEnv

    envs = UnityVectorEnv(4, PLAYER, backend=backend, max_episode_steps=2)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs["rgb"].shape == (4, 64, 64, 3)
        _, rewards, term, trunc, _ = envs.step(np.zeros(4, dtype=np.int64))
        assert rewards.shape == (4,) and not trunc.any()
        _, _, _, trunc, _ = envs.step(np.zeros(4, dtype=np.int64))
        assert trunc.all()
        assert len({s.info()["actor_pid"] for s in backend.sessions()}) == 4
    finally:
        envs.close()
    assert backend.sessions() == []


def test_service_serves_sessions_renders_and_jobs_from_ray(tmp_path):
    """``backend: ray`` in the service: FIFO and WSGI sessions (a Ray actor's player cannot reach the service's
    hub: its Controller serves it on the actor's node), msgpack frames, one-shot render, a job."""
    from werkzeug.test import Client as HttpClient

    from unirender.service import create_app, http_format
    from unirender.service.config import ServiceConfig

    app = create_app(ServiceConfig(data_root=tmp_path, port=0),  # port 0: no hub, as before `serve` binds
                     backend=create_backend("ray", start_timeout=60, step_timeout=60))
    http = HttpClient(app)
    try:
        for transport in ("fifo", "wsgi"):
            env = {"width": 48, "height": 32, "platform": "EGL", "transport": transport}
            resp = http.post("/v1/sessions", json={"environment": env})
            assert resp.status_code == 201, resp.get_data(as_text=True)
            info = resp.get_json()
            assert info["backend"] == "ray" and info["server_type"].lower() == transport
            resp = http.post(f"/v1/sessions/{info['id']}/step", json={"action": "RotateRight"},
                             headers={"Accept": http_format.MSGPACK})
            assert resp.status_code == 200, resp.get_data(as_text=True)
            doc = http_format.decode_document(resp.content_type, resp.get_data())
            assert doc["frames"]["frame"].shape == (32, 48, 3) and doc["metadata"]["lastActionSuccess"]
            assert http.delete(f"/v1/sessions/{info['id']}").status_code == 204
            assert process_gone(info["pid"])
        resp = http.post("/v1/render", json={"environment": {"width": 32, "height": 24, "platform": "EGL"},
                                             "episode": {"scene": "FloorPlan1", "actions": ["RotateRight"]}})
        assert resp.status_code == 200 and len(http_format.decode_document(resp.content_type, resp.get_data())["events"]) == 2
        resp = http.post("/v1/jobs", json={"environment": {"width": 32, "height": 24, "platform": "EGL"},
                                           "episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]}],
                                           "output": {"directory": "ray-job"}})
        assert resp.status_code == 202, resp.get_data(as_text=True)
        job = app.jobs.get("anonymous", resp.get_json()["id"])
        job.thread.join(60)
        assert job.describe()["state"] == "succeeded", job.describe()
        assert (tmp_path / "anonymous" / "ray-job" / "manifest.json").is_file()
    finally:
        app.shutdown(timeout=30)
    assert app.backend.sessions() == []


def test_node_removal_moves_the_session_to_another_node(cluster, backend):
    spare = cluster.add_node(num_cpus=1, resources={"display": 2}, object_store_memory=STORE)
    cluster.wait_for_nodes()
    session = backend.create_session(PLAYER, resources=Resources(display=True))
    try:
        before = session.info()
        doomed = next(n for n in (cluster.display_node, spare) if n.node_id == before["node"])
        cluster.remove_node(doomed)
        with pytest.raises(RestartError, match="restarted on node"):
            session.step("Pass")
        after = session.info()
        assert after["node"] != before["node"] and after["node"] in {
            cluster.display_node.node_id,
            spare.node_id,
        }
        assert session.step("MoveAhead").frame.shape == (64, 64, 3)
        assert process_gone(before["pid"])
    finally:
        session.stop()


def test_a_backend_without_an_address_joins_the_cluster_already_running_here(cluster):
    """Ray's ray.init() joins a cluster it finds on this machine (its ray_current_cluster file) even with no address:
    the backend then drops its own system config (a joined cluster keeps its own) instead of failing."""
    import subprocess
    import sys

    code = ("from unirender.cluster import create_backend\n"
            "with create_backend('ray') as b:\n"
            "    print('CPUs', b.info()['cluster_resources'].get('CPU'))\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CPUs 2.0" in done.stdout  # the module's two nodes: it joined, it did not start its own
