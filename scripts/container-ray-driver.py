"""The Ray half of ``./dev container-test``: a dataset job with backend ray, run inside the head container.

Each node declares one ``player_slot`` (``ray start --resources``) and every session asks for one, so the job's
two players land one per container (as in tests/jobs/test_ray_jobs.py). scripts/container-test.sh watches both
containers' process trees, kills the worker container mid-job and reads the JSON line this prints at the end.

    python container-ray-driver.py ADDRESS OUT_DIR [--count N] [--size PX] [--frames-per-shard K]

With ``--build NAME`` it opens one session per node on that build of the driver's store (the head container's,
``UNIRENDER_BUILDS``) instead, steps each once and prints what the nodes fetched (docs/cluster.md, "How builds
reach players"): a node whose store lacks the build fetches it from this driver's store through Ray first.
With ``--build-source URL`` as well (``--build`` then a full digest, the token in ``UNIRENDER_BUILD_TOKEN``) the
nodes fetch it from that service instead (``build_source=``, docs/builds.md); before that, one session each with a
wrong and with no token, whose creation must fail with ``BuildFetchError``: their messages are printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import ray

from unirender.builds import BuildFetchError, BuildStore, manifest
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


def _backend(address: str, **options):
    # start_timeout covers the fetch too (docs/cluster.md): small here, but a cold node's first player is slow.
    return create_backend("ray", address=address, cpu_resource=SLOT, wait_timeout=60, start_timeout=240,
                          step_timeout=60, **options)


def _kwargs(build: str) -> dict:
    return {"build": build, "width": 64, "height": 48, "platform": "CloudRendering"}


def refused_tokens(address: str, build: str, build_source: str) -> dict:
    """A session on ``build`` from ``build_source`` with a wrong token, then with none: each creation must fail
    with BuildFetchError (its message, for the caller to check), else "no error"."""
    refused = {}
    for label, token in (("wrong", "not-" + os.environ["UNIRENDER_BUILD_TOKEN"]), ("missing", None)):
        with _backend(address, build_source=build_source, token=token) as backend:
            try:
                backend.create_session(_kwargs(build)).stop()
                refused[label] = "no error: the session started"
            except BuildFetchError as exc:
                refused[label] = str(exc)
    return refused


def sessions_on_build(address: str, build: str, nodes: int, build_source: str | None = None) -> dict:
    """One session per node (each node has one player_slot) on ``build``: what each node's actor fetched.
    ``build_source``: the nodes fetch from that service (the token in UNIRENDER_BUILD_TOKEN), and this driver's
    store need not hold the build (``build`` is its digest; ``blob_bytes`` is then for the caller to know)."""
    if build_source:
        digest, blob_bytes = build, None
        options = {"build_source": build_source, "token": os.environ["UNIRENDER_BUILD_TOKEN"]}
    else:
        stored = BuildStore().resolve(build)
        entries = manifest.parse((stored.path / "manifest.json").read_bytes())
        digest = stored.digest
        blob_bytes = sum(size for _sha, size in {(e.sha256, e.size) for e in entries if e.type == "file"})
        options = {}
    kwargs = _kwargs(build)
    with _backend(address, **options) as backend:
        sessions = []
        try:
            for _ in range(nodes):  # one at a time: each takes a node's only slot, the next goes to another
                sessions.append(backend.create_session(dict(kwargs)))
            placed = []
            for session in sessions:
                event = session.step("RotateRight")
                info = session.info()
                placed.append({"node_ip": info["node_ip"], "node": info["node"], "pinned": session._kwargs["build"],
                               "frame": list(event.frame.shape), "frame_nonzero": bool(event.frame.any()),
                               "build_fetched": session._placed.get("build_fetched")})
        finally:
            for session in sessions:
                session.stop()
        served = backend.build_fetches()
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}  # while the backend's Ray is up
    return {"digest": digest, "blob_bytes": blob_bytes, "sessions": placed,
            "served": {ips.get(node, node): counts for node, counts in served.items()}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--frames-per-shard", type=int, default=10)
    parser.add_argument("--build", help="open one session per node on this build instead of running the job")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--build-source", help="the nodes fetch --build (a digest) from this service's URL")
    args = parser.parse_args()
    if args.build and args.build_source:
        # Joined here, so that the three backends below share this driver's Ray rather than each starting it.
        ray.init(address=args.address, log_to_driver=False)
        refused = refused_tokens(args.address, args.build, args.build_source)
        result = sessions_on_build(args.address, args.build, args.nodes, args.build_source)
        print(json.dumps({**result, "refused": refused}), flush=True)
        return 0
    if args.build:
        print(json.dumps(sessions_on_build(args.address, args.build, args.nodes)), flush=True)
        return 0
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
