"""An ML-Agents session in a Ray actor (one local node, loopback): the game starts inside the actor (gRPC's fork
support off in the actor's environment), steps with actions per behavior, events cross the object store."""

import numpy as np
import pytest

pytest.importorskip("grpc")
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.cluster import create_backend  # noqa: E402
from unirender.protocol.mlagents import ActionSpec  # noqa: E402

pytestmark = pytest.mark.ray
BEHAVIOR = "ReachTarget?team=0"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "object_store_memory": 100 * 2**20})  # fmt: skip
    try:
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def test_ray_backend_holds_an_mlagents_session(cluster):
    kwargs = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 32, "height": 32,
              "time_scale": 100, "seed": 2}  # fmt: skip
    with create_backend("ray", start_timeout=120, step_timeout=60) as backend:
        with backend.create_session(kwargs) as session:
            space = session.describe().actions.behaviors[BEHAVIOR]  # the port's description, from the actor
            decision, _ = session.last_event.steps()
            rng = np.random.default_rng(0)
            actions = ActionSpec(space.continuous, space.discrete).random(len(decision), rng)
            event = session.step({BEHAVIOR: {"continuous": actions.continuous, "discrete": actions.discrete}})
            assert event.frames()["CameraSensor"].shape == (2, 32, 32, 3)
            info = session.info()
            assert info["backend"] == "ray" and info["pid"] and info["pid"] != info["actor_pid"]
        assert session.state == "stopped"
