"""The Ray half of ``./dev container-test``: a dataset job with backend ray, run inside the head container.

Each node declares one ``player_slot`` (``ray start --resources``) and every session asks for one, so the job's
two players land one per container (as in tests/jobs/test_ray_jobs.py). scripts/container-test.sh watches both
containers' process trees, kills the worker container mid-job and reads the JSON line this prints at the end.

    python container-ray-driver.py ADDRESS OUT_DIR [--count N] [--size PX] [--frames-per-shard K]
"""

from __future__ import annotations

import argparse
import json
import sys

from unirender.cluster import create_backend
from unirender.jobs import render
from unirender.jobs.dataset import load_dataset

SLOT = "player_slot"


def job(out: str, count: int, size: int, frames_per_shard: int) -> dict:
    return {
        "name": "container_ray",
        "environment": {"executable": "builtin", "platform": "EGL", "width": size, "height": size},
        "render": {"modalities": ["rgb", "depth"]},
        "episodes": [{"scene": "FloorPlan201_physics",
                      "generator": {"kind": "random", "count": count, "seed": 7, "rotations": [0, 90, 180, 270]}}],
        "output": {"directory": out, "format": "npz", "frames_per_shard": frames_per_shard},
        "workers": 2,
        "max_episode_retries": 2,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--frames-per-shard", type=int, default=10)
    args = parser.parse_args()
    # step_timeout: a killed container's address goes silent (no RST), so a call in flight ends by this bound.
    # start_timeout: the lost player's actor is restarted where a slot frees up, i.e. on the head once the
    # head's player has finished its own share of the work.
    with create_backend("ray", address=args.address, cpu_resource=SLOT, max_restarts=1, wait_timeout=60,
                        start_timeout=240, step_timeout=20) as backend:
        result = render(job(args.out, args.count, args.size, args.frames_per_shard), backend=backend)
        leftover = backend.sessions()
    dataset = load_dataset(args.out)
    frames_in_dataset = sum(1 for _ in dataset.records)
    print(json.dumps({
        "frames": result.frames,
        "frames_in_dataset": frames_in_dataset,
        "frames_rendered": sum(p["frames"] for p in result.players),
        "frames_per_shard": args.frames_per_shard,
        "players": [{k: p.get(k) for k in ("worker", "frames", "node", "node_ip", "pid", "actor_pid")}
                    for p in result.players],
        "sessions_left": len(leftover),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
