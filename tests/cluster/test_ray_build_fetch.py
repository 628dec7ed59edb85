"""A Ray node fetches a build it lacks (issue 46, stage 1): a real local Ray cluster on 127.0.0.1 whose nodes each
have their own build store (the raylet's ``UNIRENDER_BUILDS``, inherited by its workers), the build only in the
driver's store. Sessions naming it by tag are pinned to its digest on the driver; each node fetches it once from
the driver's store through Ray (sessions starting at once on a node share one fetch), and frames come back from
the fake Unity build's reference player."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from fixtures.unity_builds import make_build

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.builds import BuildFetchError, BuildStore, manifest  # noqa: E402
from unirender.cluster import Resources, create_backend  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STORE = 100 * 2**20
DISPLAY = Resources(display=True)
KWARGS = {"width": 64, "height": 48, "platform": "CloudRendering"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-fetch")
    driver = BuildStore(root / "driver")
    build = driver.add(make_build(root / "src", family="ai2thor", player="reference", asset_size=3 << 20),
                       name="kitchen:v1")  # fmt: skip
    return {"driver": driver.root, "a": root / "node-a", "b": root / "node-b", "build": build}


@pytest.fixture(scope="module")
def cluster(stores):
    """A head without displays (it takes no session; the driver's store server runs there) and, added by the test,
    two display nodes each with its own store."""
    before = os.environ.get("UNIRENDER_BUILDS")
    os.environ["UNIRENDER_BUILDS"] = str(stores["driver"])  # the driver's store (this process's)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                       "object_store_memory": STORE,
                                                       "env_vars": {"UNIRENDER_BUILDS": str(stores["driver"])}})  # fmt: skip
    try:
        if ray.is_initialized():  # another module's Ray instance: this one is ours
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if before is None:
            os.environ.pop("UNIRENDER_BUILDS", None)
        else:
            os.environ["UNIRENDER_BUILDS"] = before


def add_node(cluster, store):
    node = cluster.add_node(num_cpus=1, resources={"display": 2}, object_store_memory=STORE,
                            env_vars={"UNIRENDER_BUILDS": str(store)})  # fmt: skip
    cluster.wait_for_nodes()
    return node


def blob_bytes(build) -> int:
    entries = manifest.parse((build.path / "manifest.json").read_bytes())
    return sum(size for _sha, size in {(e.sha256, e.size) for e in entries if e.type == "file"})


def test_each_node_fetches_the_build_once_and_renders(cluster, stores):
    build = stores["build"]
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    sessions = []
    try:
        node_a = add_node(cluster, stores["a"])
        with ThreadPoolExecutor(2) as pool:  # two sessions at once on node A (the only one with displays)
            sessions += pool.map(lambda _: backend.create_session({"build": "kitchen:v1", **KWARGS},
                                                                  resources=DISPLAY), range(2))  # fmt: skip
        node_b = add_node(cluster, stores["b"])  # node A is full: the next two go to node B
        with ThreadPoolExecutor(2) as pool:
            sessions += pool.map(lambda _: backend.create_session({"build": "kitchen:v1", **KWARGS},
                                                                  resources=DISPLAY), range(2))  # fmt: skip
        nodes = [s.info()["node"] for s in sessions]
        assert nodes == [node_a.node_id] * 2 + [node_b.node_id] * 2
        for session in sessions:
            assert session._kwargs["build"] == build.digest  # pinned on the driver
            event = session.step("RotateRight")
            assert event.frame.shape == (48, 64, 3) and event.frame.any()
        # each node fetched once (one manifest, the build's bytes once), the other session found it there
        served = backend.build_fetches()
        assert served == {n.node_id: {"manifests": 1, "bytes": blob_bytes(build)} for n in (node_a, node_b)}
        fetched = sorted(bool(s._placed["build_fetched"]["fetched"]) for s in sessions)
        assert fetched == [False, False, True, True]
        for store in (stores["a"], stores["b"]):
            assert BuildStore(store).digests() == [build.digest]
            assert BuildStore(store).verify(build.digest) == []
        assert BuildStore(stores["driver"]).digests() == [build.digest]
    finally:
        for session in sessions:
            session.stop()
        backend.close()
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node)


def test_a_build_no_store_holds_fails_the_session_with_one_clear_error(cluster, stores, tmp_path):
    missing = "sha256:" + "0f" * 32
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    try:
        node = add_node(cluster, tmp_path / "node-c")
        with pytest.raises(BuildFetchError) as caught:
            backend.create_session({"build": missing, **KWARGS}, resources=DISPLAY)
        message = str(caught.value)
        assert missing in message and node.node_id in message and str(stores["driver"]) in message
        assert backend.sessions() == []
    finally:
        backend.close()
        for worker in list(cluster.worker_nodes):
            cluster.remove_node(worker)
