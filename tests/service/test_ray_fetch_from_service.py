"""A Ray node fetches its session's build from a protected service (issue 46, stage 1): a ``RayBackend`` given
``build_source`` and ``token`` on a real local Ray cluster (127.0.0.1) whose display node has its own empty store;
the build lives only in a real ``unirender serve``'s store (the driver has none), is downloaded from its
``GET /v1/builds/{digest}`` with the token, and the session renders."""

from __future__ import annotations

import os

import pytest

from fixtures.unity_builds import make_build
from unirender.builds import BuildFetchError, BuildStore

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.cluster import Resources, create_backend  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ALICE = "alice-ray-fetch-token"
STORE = 100 * 2**20
KWARGS = {"width": 64, "height": 48, "platform": "CloudRendering"}


@pytest.fixture(scope="module")
def service(make_service, tmp_path_factory):
    root = tmp_path_factory.mktemp("service-store")
    store = BuildStore(root / "store")
    build = store.add(make_build(root / "src", family="ai2thor", player="reference"))
    service = make_service({"tokens": {"alice": ALICE}, "build_store": str(store.root),
                            "allowed_builds": [build.digest]})  # fmt: skip
    service.digest = build.digest
    return service


@pytest.fixture
def cluster(tmp_path):
    before = os.environ.get("UNIRENDER_BUILDS")
    os.environ["UNIRENDER_BUILDS"] = str(tmp_path / "driver")  # the driver's store: empty
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                       "object_store_memory": STORE})  # fmt: skip
    try:
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False)
        c.node_store = tmp_path / "node"
        c.add_node(num_cpus=1, resources={"display": 2}, object_store_memory=STORE,
                   env_vars={"UNIRENDER_BUILDS": str(c.node_store)})  # fmt: skip
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if before is None:
            os.environ.pop("UNIRENDER_BUILDS", None)
        else:
            os.environ["UNIRENDER_BUILDS"] = before


def test_a_node_fetches_from_the_service_with_the_token(cluster, service):
    wrong = create_backend("ray", wait_timeout=60, start_timeout=180, build_source=service.url, token="nope")
    try:
        with pytest.raises(BuildFetchError) as caught:
            wrong.create_session({"build": service.digest, **KWARGS}, resources=Resources(display=True))
        assert service.digest in str(caught.value) and service.url in str(caught.value)
    finally:
        wrong.close()
    backend = create_backend("ray", wait_timeout=60, start_timeout=180, build_source=service.url, token=ALICE)
    try:
        session = backend.create_session({"build": service.digest, **KWARGS}, resources=Resources(display=True))
        try:
            assert session.step("RotateRight").frame.shape == (48, 64, 3)
            assert session._placed["build_fetched"]["fetched"] is True
        finally:
            session.stop()
        assert backend.build_fetches() == {}  # nothing came from the driver's store
    finally:
        backend.close()
    assert BuildStore(cluster.node_store).digests() == [service.digest]
    assert BuildStore(os.environ["UNIRENDER_BUILDS"]).digests() == []
