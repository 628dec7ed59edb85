"""One grid episode of a job split across two nodes of a real local Ray cluster (loopback only)."""

from __future__ import annotations

import pytest
from job_helpers import image_files, records_without_clock

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from unirender.cluster import create_backend  # noqa: E402
from unirender.jobs import render  # noqa: E402

pytestmark = pytest.mark.ray

STORE = 100 * 2**20
SLOT = "player_slot"  # one player per node: the two sessions of the job land on different nodes


def grid_job(out) -> dict:
    return {
        "environment": {"executable": "builtin", "platform": "EGL", "width": 32, "height": 32},
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


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": STORE,
            "resources": {SLOT: 1},
        },
    )
    try:
        cluster.add_node(num_cpus=1, resources={SLOT: 1}, object_store_memory=STORE)
        cluster.wait_for_nodes()
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_one_grid_episode_runs_on_two_nodes_at_once(tmp_path, two_nodes):
    with create_backend("ray", cpu_resource=SLOT, start_timeout=60, step_timeout=60) as backend:
        result = render(grid_job(tmp_path / "ray"), backend=backend)
        assert backend.sessions() == []
    assert result.workers == 2 and result.units == 1
    nodes = {p["node"] for p in result.players}
    assert len(nodes) == 2, result.players
    assert all(p["frames"] > 0 for p in result.players), result.players
    assert sum(p["frames"] for p in result.players) == result.frames > 8
    local = render(grid_job(tmp_path / "local"), workers=1)
    assert image_files(tmp_path / "ray") == image_files(tmp_path / "local")
    assert records_without_clock(tmp_path / "ray") == records_without_clock(tmp_path / "local")
    assert local.frames == result.frames
