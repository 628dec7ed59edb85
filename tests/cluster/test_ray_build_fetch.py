"""A Ray node fetches a build it lacks (issue 46): a real local Ray cluster on 127.0.0.1 (every node and the driver
bound to loopback) whose nodes each have their own build store (the raylet's ``UNIRENDER_BUILDS``, inherited by
its workers), the builds only in the driver's store. Sessions naming one by tag are pinned to its digest on the
driver; each node fetches it once from the driver's store through Ray (sessions starting at once on a node share
one fetch), and frames come back from the fake Unity build's reference player. Stage 3: a job and a vector env
split across two nodes (each node fetching once; the job's frames equal a local run's), a bounded node store
that evicts an unused build but never the one a running player uses, and a cut fetch resumed on a node."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fixtures.unity_builds import make_build

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.builds import BuildFetchError, BuildStore, manifest  # noqa: E402
from unirender.builds.bounds import MAX_BYTES_ENV, is_leased  # noqa: E402
from unirender.cluster import Resources, create_backend  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STORE = 100 * 2**20
LOOPBACK = "127.0.0.1"  # nothing of the cluster listens beyond this machine
DISPLAY = Resources(display=True)
KWARGS = {"width": 64, "height": 48, "platform": "CloudRendering"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-fetch")
    driver = BuildStore(root / "driver")
    build = driver.add(make_build(root / "src", family="ai2thor", player="reference", asset_size=3 << 20),
                       name="kitchen:v1")  # fmt: skip
    # Three small builds of one game for the bounded store: each its own assets (1 MiB each), the rest shared.
    sources = {k: make_build(root / f"src-{k}", family="ai2thor", player="reference", asset_size=1 << 20,
                             variant=i + 1, changed=4) for i, k in enumerate("abc")}  # fmt: skip
    bounded = {k: driver.add(src, name=f"bounded:{k}") for k, src in sources.items()}
    return {"driver": driver.root, "a": root / "node-a", "b": root / "node-b", "build": build,
            "bounded": bounded, "sources": sources}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(stores):
    """A head without displays (it takes no session; the driver's store server runs there) and, added by the test,
    two display nodes each with its own store."""
    before = os.environ.get("UNIRENDER_BUILDS")
    os.environ["UNIRENDER_BUILDS"] = str(stores["driver"])  # the driver's store (this process's)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                       "object_store_memory": STORE, "node_ip_address": LOOPBACK,
                                                       "env_vars": {"UNIRENDER_BUILDS": str(stores["driver"])}})  # fmt: skip
    try:
        if ray.is_initialized():  # another module's Ray instance: this one is ours
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False, _node_ip_address=LOOPBACK)
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {LOOPBACK}
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if before is None:
            os.environ.pop("UNIRENDER_BUILDS", None)
        else:
            os.environ["UNIRENDER_BUILDS"] = before


def add_node(cluster, store, *, displays: int = 2, max_bytes: int | None = None, **resources: float):
    env = {"UNIRENDER_BUILDS": str(store)}
    if max_bytes is not None:
        env[MAX_BYTES_ENV] = str(max_bytes)
    node = cluster.add_node(num_cpus=1, resources={"display": displays, **resources}, object_store_memory=STORE,
                            node_ip_address=LOOPBACK, env_vars=env)  # fmt: skip
    cluster.wait_for_nodes()
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {LOOPBACK}
    return node


def remove_workers(cluster):
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)


def blobs(build) -> set[tuple[str, int]]:
    entries = manifest.parse((build.path / "manifest.json").read_bytes())
    return {(e.sha256, e.size) for e in entries if e.type == "file"}


def blob_bytes(build, held: set[tuple[str, int]] = frozenset()) -> int:
    """The bytes a node moves to fetch ``build`` when its store already holds the blobs ``held``."""
    return sum(size for _sha, size in blobs(build) - held)


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
        assert build.digest in BuildStore(stores["driver"]).digests()
    finally:
        for session in sessions:
            session.stop()
        backend.close()
        remove_workers(cluster)


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
        remove_workers(cluster)


# ------------------------------------------------------------------------------------------------- stage 3
SLOT = "player_slot"  # one per node: a job's two players land on different nodes


def grid_job(out, build: str = "kitchen:v1") -> dict:
    return {
        "environment": {"build": build, "platform": "CloudRendering", "width": 32, "height": 32},
        "render": {"modalities": ["rgb", "depth"]},
        "episodes": [
            {
                "scene": "FloorPlan201_physics",
                "generator": {"kind": "grid", "every": 4, "rotations": [0, 180]},
            }
        ],
        "output": {"directory": str(out), "format": "npz", "frames_per_shard": 4},
        "workers": 2,
    }


def dataset_frames(root) -> list[dict]:
    from unirender.jobs import load_dataset

    found = []
    for record in load_dataset(root):
        frames = record.frames() if callable(getattr(record, "frames", None)) else {"frame": record.frame}
        found.append({key: np.asarray(value) for key, value in frames.items()})
    return found


def test_a_job_split_across_two_nodes_fetches_once_per_node_and_writes_the_local_dataset(
    cluster, stores, tmp_path
):
    """``environment.build: kitchen:v1``: the job's two players run on the two nodes (one slot each), each node
    fetches the pinned build once, the dataset's manifest records its digest, and its frames are the local run's."""
    from unirender.jobs import render

    build = stores["build"]
    try:
        nodes = [add_node(cluster, tmp_path / f"node-{name}", displays=1, **{SLOT: 1}) for name in "ab"]
        with create_backend("ray", cpu_resource=SLOT, wait_timeout=60, start_timeout=180,
                            step_timeout=120) as backend:  # fmt: skip
            result = render(grid_job(tmp_path / "ray"), backend=backend)
            assert backend.sessions() == []
            served = backend.build_fetches()
        assert result.workers == 2 and result.units == 1
        assert {p["node"] for p in result.players} == {n.node_id for n in nodes}, result.players
        assert all(p["frames"] > 0 for p in result.players), result.players
        assert served == {n.node_id: {"manifests": 1, "bytes": blob_bytes(build)} for n in nodes}
        for node_store in (tmp_path / "node-a", tmp_path / "node-b"):
            assert BuildStore(node_store).digests() == [build.digest]
        local = render(grid_job(tmp_path / "local"), workers=1)
        assert local.frames == result.frames > 8
        for out in ("ray", "local"):
            recorded = json.loads((tmp_path / out / "manifest.json").read_text())["build"]
            assert recorded == {"name": "kitchen:v1", "digest": build.digest}
        remote, here = dataset_frames(tmp_path / "ray"), dataset_frames(tmp_path / "local")
        assert len(remote) == len(here) == result.frames
        for a, b in zip(remote, here, strict=True):
            assert a.keys() == b.keys() and a
            for key in a:
                assert np.array_equal(a[key], b[key]), key
    finally:
        remove_workers(cluster)


def test_a_vector_env_across_two_nodes_fetches_once_per_node(cluster, stores, tmp_path):
    from unirender.gym import UnityVectorEnv

    build = stores["build"]
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    env = None
    try:
        nodes = [add_node(cluster, tmp_path / f"node-{name}", displays=1) for name in "ab"]
        env = UnityVectorEnv(2, {"build": "kitchen:v1", **KWARGS}, backend=backend, resources=DISPLAY)
        obs, _info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        obs, rewards, *_ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and rewards.shape == (2,)
        sessions = [e.session for e in env.envs]
        assert {s.info()["node"] for s in sessions} == {n.node_id for n in nodes}
        assert all(s._kwargs["build"] == build.digest for s in sessions)  # pinned on the driver
        assert backend.build_fetches() == {
            n.node_id: {"manifests": 1, "bytes": blob_bytes(build)} for n in nodes
        }
        for node_store in (tmp_path / "node-a", tmp_path / "node-b"):
            assert BuildStore(node_store).digests() == [build.digest]
    finally:
        if env is not None:
            env.close()
        backend.close()
        remove_workers(cluster)


def test_a_bounded_node_store_evicts_an_unused_build_and_spares_the_one_a_player_runs(
    cluster, stores, tmp_path
):
    """A node's store bounded (the raylet's ``UNIRENDER_BUILDS_MAX_BYTES``) to one build of three (A, B, C: own
    assets, shared rest). C is there unused: A's fetch evicts it. While A's player runs (its lease held), B cannot
    be made room for: its session fails with one clear error and A stays. Once A's session stops, B's session
    evicts A; B's blobs, verified by the failed fetch, are not moved again."""
    a, b, c = (stores["bounded"][k] for k in "abc")
    node_store = tmp_path / "node-bounded"
    one = blob_bytes(a)
    bound = one + (1 << 20)  # one build and a spare MiB: never two (each brings 4 MiB of its own)
    assert blob_bytes(b) == blob_bytes(c) == one and one + blob_bytes(c, blobs(a)) > bound
    assert (
        BuildStore(node_store, max_bytes=None).add(stores["sources"]["c"], name="bounded:c").digest
        == c.digest
    )
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    sessions = []
    try:
        node = add_node(cluster, node_store, max_bytes=bound)
        first = backend.create_session({"build": "bounded:a", **KWARGS}, resources=DISPLAY)
        sessions.append(first)
        assert first.info()["node"] == node.node_id and first._kwargs["build"] == a.digest
        assert BuildStore(node_store).digests() == [a.digest]  # C, unused, was evicted to make room for A
        assert is_leased(node_store, a.digest)  # A's player holds its lease
        assert first.step("RotateRight").frame.any()

        with pytest.raises(BuildFetchError) as caught:
            backend.create_session({"build": "bounded:b", **KWARGS}, resources=DISPLAY)
        message = str(caught.value)
        assert b.digest in message and node.node_id in message and str(node_store) in message
        assert "StoreFullError" in message and "in use by running players were spared" in message, message
        assert f"{bound:,}" in message
        assert BuildStore(node_store).digests() == [a.digest]  # A spared while its player runs
        assert BuildStore(node_store).verify(a.digest) == []
        assert first.step("RotateLeft").frame.any()  # and that player runs on
        assert backend.sessions() == [first]

        first.stop()
        sessions.remove(first)
        assert not is_leased(node_store, a.digest)
        second = backend.create_session({"build": "bounded:b", **KWARGS}, resources=DISPLAY)
        sessions.append(second)
        assert BuildStore(node_store).digests() == [b.digest]  # A, no longer in use, evicted for B
        assert BuildStore(node_store).verify(b.digest) == []
        assert second.step("RotateRight").frame.any()
        # three fetches (A; B refused; B); B's own bytes moved once: the refused fetch kept what it verified
        assert backend.build_fetches() == {
            node.node_id: {"manifests": 3, "bytes": blob_bytes(a, blobs(c)) + blob_bytes(b, blobs(a))}
        }
    finally:
        for session in sessions:
            session.stop()
        backend.close()
        remove_workers(cluster)


def test_a_cut_fetch_resumes_on_the_node_moving_only_the_missing_bytes(cluster, stores, tmp_path):
    """What a cut fetch left in the node's store (``tmp/fetch-<hex>/blobs/``: one asset verified whole, half of
    another) is kept: the next session's fetch moves only the rest."""
    build = stores["build"]
    driver = BuildStore(stores["driver"])
    node_store = tmp_path / "node-cut"
    assets = sorted((sha, size) for sha, size in blobs(build) if size == 3 << 20)
    (whole, whole_size), (partial, partial_size) = assets[:2]
    work = node_store / "tmp" / f"fetch-{build.digest.removeprefix('sha256:')}" / "blobs"
    work.mkdir(parents=True)
    (work / whole).write_bytes(driver.blob_path(whole, False).read_bytes())
    (work / f"{partial}.part").write_bytes(driver.blob_path(partial, False).read_bytes()[: partial_size // 2])
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    session = None
    try:
        node = add_node(cluster, node_store)
        session = backend.create_session({"build": "kitchen:v1", **KWARGS}, resources=DISPLAY)
        assert session.step("RotateRight").frame.any()
        moved = blob_bytes(build) - whole_size - partial_size // 2
        assert backend.build_fetches() == {node.node_id: {"manifests": 1, "bytes": moved}}
        assert session._placed["build_fetched"]["bytes_moved"] == moved
        assert BuildStore(node_store).digests() == [build.digest]
        assert BuildStore(node_store).verify(build.digest) == []
        assert not work.parent.exists()  # published: the fetch's leftovers are gone
    finally:
        if session is not None:
            session.stop()
        backend.close()
        remove_workers(cluster)


def test_a_blob_damaged_at_the_driver_is_fetched_again_on_the_node(cluster, stores, tmp_path, monkeypatch):
    """The driver's store server sends one asset damaged (one bit flipped) the first time it is read: the node
    finds it does not hash to the manifest's sha256, discards it and fetches it again; the build it publishes
    verifies. (The hook: the backend's ``StoreServer`` swapped for a subclass defined here, which Ray ships to
    the driver's node by value; no production code knows of it.)"""
    from unirender.cluster import ray_backend, ray_builds

    build = stores["build"]
    target, size = sorted((sha, n) for sha, n in blobs(build) if n == 3 << 20)[0]

    class DamagedOnce(ray_builds.StoreServer):
        def __init__(self, root: str) -> None:
            super().__init__(root)
            self.damaged = False

        def send(self, sock, digest: str, sha256: str, offset: int, count: int, node: str | None = None) -> int:
            if sha256 != target or self.damaged:
                return super().send(sock, digest, sha256, offset, count, node)
            self.damaged = True
            data = self.read(sha256, offset, count, node)  # counted as served, as the blob's bytes are
            sock.sendall(bytes([data[0] ^ 1]) + data[1:])
            return len(data)

    monkeypatch.setattr(ray_backend, "StoreServer", DamagedOnce)
    node_store = tmp_path / "node-damaged"
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, step_timeout=120)
    session = None
    try:
        node = add_node(cluster, node_store)
        session = backend.create_session({"build": "kitchen:v1", **KWARGS}, resources=DISPLAY)
        assert session.step("RotateRight").frame.any()
        fetched = session._placed["build_fetched"]
        assert fetched["corrupt"] == 1 and fetched["bytes_moved"] == blob_bytes(build) + size
        # the damaged blob crossed twice, everything else once
        assert backend.build_fetches() == {node.node_id: {"manifests": 1, "bytes": blob_bytes(build) + size}}
        assert BuildStore(node_store).digests() == [build.digest]
        assert BuildStore(node_store).verify(build.digest) == []
    finally:
        if session is not None:
            session.stop()
        backend.close()
        remove_workers(cluster)
