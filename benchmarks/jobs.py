"""Jobs benchmark: frames/s written to disk for a 300x300 all-modality job with 1 and 2 workers, and the
share of time spent outside rendering (selecting, encoding, writing).

Measured side by side in one run on the reference player (EGL, software rasteriser on a CPU-only machine):

* ``pure stepping``: the same episodes through one Controller, no writing (frames are not even decoded);
* ``job npz, 1 worker`` / ``job png, 1 worker`` / ``job npz, 2 workers``: ``unirender.render`` end to end.

Write overhead = worker time in the job (stepping + writing, player start excluded) / pure stepping time - 1.
Targets: overhead <= 25 % with npz; 2 workers >= 1.3x the frames/s of one.

    python benchmarks/jobs.py [--frames-per-episode 48] [--episodes 8] [--size 300] [--rounds 3] [--md FILE]

``--datasets`` measures the dataset side instead (figures in ``results-jobs-datasets.md``):

* bytes of metadata + resume state per frame on ``examples/grid_sweep.yaml``, before (one JSON record per frame
  in the unit's resume file and again in ``metadata.jsonl``, as jobs wrote until chunked commits) and after
  (msgpack + zstd per chunk, an append-only commit log), against the image bytes (target: under 5 %), with the
  other encodings considered (zlib, zstd levels, Parquet through pyarrow when it is installed) and npz with and
  without deflate;
* the time to open a finished job (``render()`` of a job whose every chunk is committed: lock, commit log,
  sweep, manifest) written by the code at 10,000 and 100,000 frames (target: under 1 s at 100,000);
* frames redone after a SIGKILL at random frames inside one long generator episode (``unirender render`` in
  a subprocess), against the chunk size (target: at most one chunk);
* CPU per frame to write a frame's metadata: decoded and re-packed vs the player's bytes spliced in;
* one grid episode on 1 and 2 nodes of a local Ray cluster (loopback), frames/s side by side.

    python benchmarks/jobs.py --datasets [--every 4] [--kills 3] [--md FILE]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault(
    "RAY_USAGE_STATS_ENABLED", "0"
)  # --datasets starts a local Ray cluster: nothing phones home
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
if not os.environ.get("RAY_TMPDIR"):  # Ray's session folders (logs, sockets) in a short temp dir, removed at exit
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="unirender-ray-")
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)

ALL = ["rgb", "depth", "instance_segmentation", "semantic_segmentation", "normals", "flow"]
TOUR = ["MoveAhead", {"action": "RotateRight", "degrees": 30}, {"action": "LookDown", "degrees": 10},
        "MoveAhead", {"action": "RotateLeft", "degrees": 45}, {"action": "LookUp", "degrees": 10},
        "MoveBack", {"action": "RotateRight", "degrees": 15}]  # fmt: skip
SCENES = ["FloorPlan1_physics", "FloorPlan201_physics", "FloorPlan301_physics"]


def job_spec(out: Path, *, size: int, episodes: int, frames: int, fmt: str) -> dict:
    actions = [TOUR[i % len(TOUR)] for i in range(frames - 1)]
    return {
        "name": "bench",
        "environment": {"executable": "builtin", "platform": "EGL", "width": size, "height": size},
        "render": {"modalities": ALL, "flow_policy": "previous_step"},
        "episodes": [{"scene": SCENES[i % len(SCENES)], "actions": actions} for i in range(episodes)],
        "output": {"directory": str(out), "format": fmt},
    }


def pure_stepping(spec_doc: dict) -> tuple[float, int]:
    """Seconds spent in reset/step for every episode (Controller start excluded), and the frame count."""
    from unirender.controller import Controller
    from unirender.spec import load_spec

    spec = load_spec(spec_doc)
    os.environ["LP_NUM_THREADS"] = str(os.cpu_count() or 1)  # what a 1-worker job gives its player
    try:
        with Controller(**spec.controller_kwargs()) as controller:
            frames, start = 0, time.perf_counter()
            for episode in spec.episodes:
                controller.reset(episode.scene)
                frames += 1
                for action in episode.action_dicts():
                    controller.step(action)
                    frames += 1
            return time.perf_counter() - start, frames
    finally:
        os.environ.pop("LP_NUM_THREADS", None)


def run_job(spec_doc: dict, workers: int) -> dict:
    from unirender.jobs import render

    out = Path(spec_doc["output"]["directory"])
    shutil.rmtree(out, ignore_errors=True)
    stamps: list[float] = []
    start = time.perf_counter()
    result = render(
        spec_doc, workers=workers, resume=False, progress=lambda p: stamps.append(time.perf_counter())
    )
    wall = time.perf_counter() - start
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "frames": result.frames_written,
        "wall_s": wall,
        "fps": result.frames_written / wall,
        # Players started and first frames in: the rate of the rest (start-up is paid once per job).
        "steady_fps": (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0,
        "step_s": result.step_s,
        "write_s": result.write_s,
        "encode_s": result.encode_s,
        "mb": size / 1e6,
    }


# -- the dataset side (--datasets) ----------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent


def _tree_bytes(root: Path, *parts: str) -> int:
    return sum(p.stat().st_size for part in parts for p in (root / part).rglob("*") if p.is_file())


def metadata_sizes(every: int, tmp: Path) -> tuple[list[str], dict]:
    """The grid example rendered once per npz setting; metadata/resume bytes before and after, per frame."""
    import json
    import zlib

    import msgpack
    import yaml
    import zstandard

    from unirender.jobs import load_dataset, render
    from unirender.jobs.chunks import encode_records
    from unirender.jobs.encoding import dumps_json

    doc = yaml.safe_load((REPO / "examples" / "grid_sweep.yaml").read_text())
    doc["episodes"][0]["generator"]["every"] = every
    from unirender.jobs import writers

    runs = {}
    chosen = writers.NPZ_DEFLATE_LEVEL
    for name, compress, level in (
        ("deflate 1 (default)", True, 1),
        ("deflate 6", True, 6),
        ("stored", False, 1),
    ):
        doc["output"] = {
            **doc["output"],
            "directory": str(tmp / f"grid-{level}-{compress}"),
            "compress": compress,
        }
        writers.NPZ_DEFLATE_LEVEL = level
        try:
            start = time.perf_counter()
            result = render(doc, workers=1)
        finally:
            writers.NPZ_DEFLATE_LEVEL = chosen
        runs[name] = (result, time.perf_counter() - start, Path(doc["output"]["directory"]))
    result, _, out = runs["deflate 1 (default)"]
    frames = result.frames
    images = _tree_bytes(out, "shards")
    after = _tree_bytes(out, "meta") + _tree_bytes(out, ".unirender-job")
    records = load_dataset(out).records
    per_frame_json = [dumps_json(r).encode() for r in records]
    before = 2 * sum(len(b) for b in per_frame_json)  # units/*.json and metadata.jsonl: each record twice
    from unirender.spec import load_spec

    chunk = load_spec(doc).output.frames_per_shard
    chunks = [records[i : i + chunk] for i in range(0, len(records), chunk)]
    packed = [msgpack.packb(c, use_bin_type=True) for c in chunks]
    options = {
        "JSON, uncompressed (before)": sum(len(dumps_json(c)) for c in chunks),
        "JSON + zlib 6": sum(len(zlib.compress(dumps_json(c).encode(), 6)) for c in chunks),
        "msgpack, uncompressed": sum(len(p) for p in packed),
        "msgpack + zstd 3 (chosen)": sum(len(encode_records(c)) for c in chunks),
        "msgpack + zstd 9": sum(len(zstandard.ZstdCompressor(level=9).compress(p)) for p in packed),
        "msgpack + zstd 19": sum(len(zstandard.ZstdCompressor(level=19).compress(p)) for p in packed),
    }
    timings = {}
    for name, level in (("zstd 3", 3), ("zstd 9", 9), ("zstd 19", 19)):
        t0 = time.perf_counter()
        for p in packed:
            zstandard.ZstdCompressor(level=level).compress(p)
        timings[name] = 1000 * (time.perf_counter() - t0) / len(packed)
    try:
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        for name, rows in (
            (
                "Parquet + zstd, metadata as a JSON string column",
                [{**r, "metadata": json.dumps(r["metadata"])} for r in records],
            ),
            ("Parquet + zstd, metadata as nested columns", records),
        ):
            buf = io.BytesIO()
            try:
                pq.write_table(pa.Table.from_pylist(rows), buf, compression="zstd")
                options[name] = len(buf.getvalue())
            except (pa.ArrowException, TypeError, ValueError) as exc:  # a schema Arrow cannot infer
                options[f"{name}: {type(exc).__name__}"] = None
    except ImportError:
        options["Parquet (pyarrow not installed)"] = None
    lines = [
        f"### Metadata and resume state: examples/grid_sweep.yaml (every {every}): {frames} frames, "
        f"{chunk} frames per chunk",
        "",
        "| | bytes | per frame | of image bytes |",
        "|---|---:|---:|---:|",
        f"| images (npz, deflated) | {images:,} | {images / frames:,.0f} | 100 % |",
        f"| metadata + resume state before (JSON, twice) | {before:,} | {before / frames:,.0f} | "
        f"{100 * before / images:.1f} % |",
        f"| metadata + resume state now (meta/ + .unirender-job/) | {after:,} | {after / frames:,.0f} | "
        f"{100 * after / images:.2f} % |",
        "",
        f"target < 5 % of image bytes: {'PASS' if after / images < 0.05 else 'FAIL'}; "
        f"{before / after:.0f}x smaller than before",
        "",
        "Encodings of the same frame metadata (one stream per chunk):",
        "",
        "| encoding | bytes | per frame |",
        "|---|---:|---:|",
    ]
    for name, size in options.items():
        lines.append(
            f"| {name} | {size:,} | {size / frames:,.0f} |" if size else f"| {name} | not installed | |"
        )
    lines += ["", "zstd time per chunk: " + ", ".join(f"{k} {v:.1f} ms" for k, v in timings.items()), ""]
    lines += [
        "npz arrays deflated (the default, level 1), at zlib's default level 6, and stored:",
        "",
        "| npz | image bytes | per frame | job wall s | write-behind busy s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (r, wall, d) in runs.items():
        size = _tree_bytes(d, "shards")
        lines.append(f"| {name} | {size:,} | {size / frames:,.0f} | {wall:.1f} | {r.encode_s:.1f} |")
    lines.append("")
    return lines, {"ratio": after / images}


def resume_open_times(tmp: Path) -> list[str]:
    """A finished job's state written by the code (commit log + one metadata file per chunk), then opened."""
    from unirender.jobs import render
    from unirender.jobs.chunks import Commit, digest, encode_records, meta_path
    from unirender.jobs.state import JobState
    from unirender.spec import load_spec

    lines = [
        "### Opening a finished job (no player starts)",
        "",
        "| frames | chunks | open s |",
        "|---:|---:|---:|",
    ]
    worst = 0.0
    for frames in (10_000, 100_000):
        root = tmp / f"open-{frames}"
        spec = load_spec(
            {
                "episodes": [
                    {"scene": "FloorPlan1_physics", "generator": {"kind": "random", "count": frames}}
                ],
                "output": {"directory": str(root), "format": "npz"},
            }
        )
        unit = "e0000-FloorPlan1_physics-r000"
        records = [{"index": i, "location": "shards/x.npz", "files": {"frame": f"{i:06d}.frame"}, "metadata": {}}
                   for i in range(100)]  # fmt: skip
        data = encode_records(records)
        with JobState.open(root, spec) as state:
            meta_path(root, unit, 0).parent.mkdir(parents=True, exist_ok=True)
            for k in range(frames // 100):
                meta_path(root, unit, k).write_bytes(data)
                state.log.append(Commit(unit, k, 100, frames, digest(data)))

        def no_player(_kwargs):
            raise AssertionError("a finished job must not start a player")

        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            result = render(spec, player_factory=no_player)
            best = min(best, time.perf_counter() - start)
        assert result.frames == frames and result.frames_written == 0
        worst = max(worst, best)
        lines.append(f"| {frames:,} | {frames // 100:,} | {best:.3f} |")
    lines += ["", f"target < 1 s at 100,000 frames: {'PASS' if worst < 1 else 'FAIL'} ({worst:.3f} s)", ""]
    return lines


def frames_redone(kills: int, tmp: Path) -> list[str]:
    """SIGKILL ``unirender render`` at random frames of one 300-frame generator episode; frames redone."""
    import random
    import signal
    import subprocess

    import yaml

    from unirender.jobs import render
    from unirender.jobs.chunks import CommitLog

    rng = random.Random(7)
    lines = ["### Frames redone after a SIGKILL (one 300-frame generator episode, 100-frame chunks)", "",
             "| killed after frame | committed | redone | chunk |", "|---:|---:|---:|---:|"]  # fmt: skip
    worst = 0
    for n in range(kills):
        out = tmp / f"kill-{n}"
        doc = {
            "environment": {"executable": "builtin", "platform": "EGL", "width": 64, "height": 64},
            "episodes": [
                {"scene": "FloorPlan1_physics", "generator": {"kind": "random", "count": 300, "seed": n}}
            ],
            "output": {"directory": str(out)},
            "workers": 1,
        }
        job = tmp / f"kill-{n}.yaml"
        job.write_text(yaml.safe_dump(doc))
        at = rng.randrange(30, 280)
        proc = subprocess.Popen([sys.executable, "-m", "unirender.cli", "render", str(job)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            while proc.poll() is None and len(list(out.glob("frames/*/*/*.frame.png"))) < at:
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        rendered = len(list(out.glob("frames/*/*/*.frame.png")))
        kept = sum(c.frames for c in CommitLog(out / ".unirender-job" / "commits.log").read().values())
        result = render(job)
        assert result.frames == 300 and result.frames_written == 300 - kept
        worst = max(worst, rendered - kept)
        lines.append(f"| {rendered} | {kept} | {rendered - kept} | 100 |")
    lines += ["", f"at most one chunk redone: {'PASS' if worst <= 100 else 'FAIL'} (worst {worst})", ""]
    return lines


def metadata_write_cost(frames: int = 100, rounds: int = 7) -> list[str]:
    """CPU per frame to turn a frame's metadata into its chunk's bytes, side by side: decoded and re-packed (as jobs
    did) vs the player's bytes spliced in as received (``frame_metadata``), for a FIFO (msgpack) and a WSGI (JSON)
    reference player. Events are captured once, then copied by pickling (which keeps them undecoded)."""
    import pickle
    import statistics

    from unirender.controller import Controller
    from unirender.jobs.chunks import encode_records, select_metadata
    from unirender.jobs.write_behind import frame_metadata

    def decoded(event):
        return select_metadata(dict(event.metadata), "all")

    lines = ["### Writing a frame's metadata: decode + re-pack vs the player's bytes spliced in", "",
             "| player | metadata bytes per frame | decode + re-pack ms/frame | spliced ms/frame | ratio |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for server in ("fifo", "wsgi"):
        with Controller(executable="builtin", platform="EGL", width=64, height=64, server=server,
                        scene="FloorPlan201_physics") as controller:  # fmt: skip
            events = [pickle.dumps(controller.step(action="RotateRight", degrees=7)) for _ in range(frames)]
        size = statistics.mean(len(pickle.loads(e).metadata_document.raw) for e in events)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(rounds):
            for kind in (("old", "new") if r % 2 else ("new", "old")):
                fresh = [pickle.loads(e) for e in events]
                start = time.process_time()
                stored = [decoded(e) if kind == "old" else frame_metadata(e, "all") for e in fresh]
                encode_records([{"index": i, "metadata": m} for i, m in enumerate(stored)])
                times[kind].append((time.process_time() - start) * 1000 / frames)
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        lines.append(f"| {server} | {size:,.0f} | {old:.3f} | {new:.3f} | {old / new:.1f}x |")
    return lines + [""]


def _cpu_busy() -> list[float]:
    """Seconds each core has been busy (not idle or iowait), from /proc/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            values = [int(v) for v in line.split()[1:]]
            busy.append((sum(values) - values[3] - values[4]) / ticks)
    return busy


def ray_nodes(tmp: Path, every: int, rounds: int = 2, driver_node: int = 0) -> list[str]:
    """One grid episode on a local Ray cluster of 1 node and of 2 nodes (one player slot each), interleaved.

    Both "nodes" run on this one host, so each is given a core of its own (``sched_setaffinity`` before it
    starts: its raylet, workers and players inherit it), as two machines would have. This process (the job's
    driver: it receives every frame and writes the dataset) shares the core of node ``driver_node``: 0, the head
    (where a driver usually runs), or 1, the second node (a job submitted from that machine; in the 1-node runs
    it then has that core to itself). Unpinned, the nodes and the driver share the same cores and a second node
    adds no CPU."""
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        return ["### Ray: not installed", ""]
    from unirender.cluster import create_backend
    from unirender.cluster.ray_backend import INLINE_FRAMES_SYSTEM_CONFIG
    from unirender.jobs import render

    slot = "player_slot"
    store = 100 * 2**20
    cores = sorted(os.sched_getaffinity(0))
    pin = len(cores) >= 2
    original = set(cores)

    def on_core(i: int) -> None:
        if pin:
            os.sched_setaffinity(0, {cores[i % len(cores)]})

    rows = []
    on_core(0)
    # Frames inline in the actors' replies (docs/cluster.md), not through the object store and node-to-node pulls.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": store, "resources": {slot: 1},
                                                            "_system_config": INLINE_FRAMES_SYSTEM_CONFIG})  # fmt: skip
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        second = None
        for r in range(2 * rounds):
            nodes = 1 + r % 2
            if nodes == 2:
                on_core(1)
                second = cluster.add_node(num_cpus=1, resources={slot: 1}, object_store_memory=store)
                cluster.wait_for_nodes()
                on_core(0)
            doc = {
                "environment": {"executable": "builtin", "platform": "EGL", "width": 300, "height": 300},
                "render": {"modalities": ["rgb", "depth", "instance_segmentation"]},
                "episodes": [{"scene": "FloorPlan201_physics",
                              "generator": {"kind": "grid", "every": every, "rotations": [0, 90, 180, 270]}}],
                "output": {"directory": str(tmp / f"ray-driver{driver_node}-{r}"), "format": "npz"},
            }  # fmt: skip
            stamps: list[float] = []
            busy_before = _cpu_busy()
            with create_backend("ray", cpu_resource=slot, start_timeout=120, step_timeout=120) as backend:
                start = time.perf_counter()
                result = render(doc, backend=backend, workers=nodes,
                                progress=lambda _, stamps=stamps: stamps.append(time.perf_counter()))
                wall = time.perf_counter() - start
            used = len({p.get("node") for p in result.players})
            busy = [(b - a) / wall for a, b in zip(busy_before, _cpu_busy(), strict=True)]
            print(f"ray_nodes: {nodes} node(s): busy share of each core {[round(b, 2) for b in busy]}", flush=True)
            # Steady rate: from the 10th percentile of frames on, once every player (and Ray worker) has started.
            first = len(stamps) // 10
            steady = (len(stamps) - 1 - first) / (stamps[-1] - stamps[first])
            rows.append((nodes, used, result.frames, wall, result.frames / wall, steady))
            if second is not None:
                cluster.remove_node(second)
                second = None
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.sched_setaffinity(0, original)
    lines = ["### One grid episode on 1 and 2 nodes of a local Ray cluster (300x300, rgb + depth + instances)", "",
             f"Each node pinned to a core of its own: {'yes' if pin else 'no (one core)'}; the driver on the core of "
             f"{'the head node' if driver_node == 0 else 'the second node'}.", "",
             "| nodes | nodes used | frames | wall s | frames/s (wall) | frames/s (steady) |",
             "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    lines += [f"| {n} | {u} | {f} | {t:.1f} | {fps:.1f} | {st:.1f} |" for n, u, f, t, fps, st in rows]
    best = {n: max(row[4] for row in rows if row[0] == n) for n in (1, 2)}
    steady = {n: max(row[5] for row in rows if row[0] == n) for n in (1, 2)}
    lines += ["", f"2 nodes vs 1 (best of {rounds} each): {best[2] / best[1]:.2f}x wall, "
              f"{steady[2] / steady[1]:.2f}x steady (after the first 10 % of frames: players and Ray workers "
              "started)", ""]
    return lines


def datasets(args) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="unirender-bench-datasets-", dir=args.dir))
    load_before = os.getloadavg()[0]
    try:
        lines = [
            f"jobs benchmark, dataset side: {os.cpu_count()} CPUs, load average {load_before:.1f} before",
            "",
        ]
        lines += resume_open_times(tmp)
        size_lines, _ = metadata_sizes(args.every, tmp)
        lines += size_lines
        lines += frames_redone(args.kills, tmp)
        lines += metadata_write_cost()
        # A grid of several chunks per node (504 frames, 100 per chunk): the runner splits an episode by chunks.
        lines += ray_nodes(tmp, max(1, args.every // 2), driver_node=0)
        lines += ray_nodes(tmp, max(1, args.every // 2), driver_node=1)
        lines.append(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--frames-per-episode", type=int, default=48)
    parser.add_argument(
        "--rounds", type=int, default=3, help="repeat the side-by-side set; best of each kept"
    )
    parser.add_argument("--md", type=Path, default=None, help="also write the table to this Markdown file")
    parser.add_argument("--dir", default=None, help="where the datasets go (default: the system temp dir)")
    parser.add_argument(
        "--datasets", action="store_true", help="measure the dataset side (see the module doc)"
    )
    parser.add_argument("--every", type=int, default=4, help="--datasets: grid_sweep's 'every'")
    parser.add_argument("--kills", type=int, default=3, help="--datasets: SIGKILLs to count redone frames")
    args = parser.parse_args(argv)
    if args.datasets:
        return datasets(args)

    tmp = Path(tempfile.mkdtemp(prefix="unirender-bench-jobs-", dir=args.dir))
    try:
        docs = {
            fmt: job_spec(
                tmp / fmt, size=args.size, episodes=args.episodes, frames=args.frames_per_episode, fmt=fmt
            )
            for fmt in ("npz", "png")
        }
        best: dict[str, dict] = {}
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):
            pure_s, pure_frames = pure_stepping(docs["npz"])
            rows = {
                "pure stepping": {"frames": pure_frames, "wall_s": pure_s, "fps": pure_frames / pure_s,
                                  "steady_fps": pure_frames / pure_s, "step_s": pure_s, "write_s": 0.0,
                                  "encode_s": 0.0, "mb": 0.0},
                "job npz, 1 worker": run_job(docs["npz"], 1),
                "job png, 1 worker": run_job(docs["png"], 1),
                "job npz, 2 workers": run_job(docs["npz"], 2),
            }  # fmt: skip
            for name, row in rows.items():
                if name not in best or row["fps"] > best[name]["fps"]:
                    best[name] = row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    pure = best["pure stepping"]
    lines = [
        f"jobs benchmark: {args.size}x{args.size}, all 6 modalities, {args.episodes} episodes x "
        f"{args.frames_per_episode} frames, EGL reference player, {os.cpu_count()} CPUs, best of {args.rounds} "
        f"rounds; written to {tmp.parent}; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        "",
        "| run | frames | wall s | frames/s (wall) | frames/s (after 1st frame) | worker step s | worker blocked "
        "on writing s | write-behind busy s | outside rendering | MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in best.items():
        share = row["write_s"] / (row["step_s"] + row["write_s"]) if row["step_s"] + row["write_s"] else 0.0
        lines.append(
            f"| {name} | {row['frames']} | {row['wall_s']:.2f} | {row['fps']:.2f} | {row['steady_fps']:.2f} | "
            f"{row['step_s']:.2f} | {row['write_s']:.2f} | {row['encode_s']:.2f} | {100 * share:.1f}% | "
            f"{row['mb']:.1f} |"
        )
    npz1, npz2 = best["job npz, 1 worker"], best["job npz, 2 workers"]
    overhead = (npz1["step_s"] + npz1["write_s"]) / pure["step_s"] - 1
    speedup = npz2["fps"] / npz1["fps"]
    steady = npz2["steady_fps"] / npz1["steady_fps"]
    lines += [
        "",
        f"write overhead, npz, 1 worker: {100 * overhead:+.1f}% of pure stepping time (target <= +25%): "
        f"{'PASS' if overhead <= 0.25 else 'FAIL'}",
        f"2 workers vs 1 (npz, wall frames/s incl. player start): {speedup:.2f}x (target >= 1.3x): "
        f"{'PASS' if speedup >= 1.3 else 'FAIL'}; after the first frame: {steady:.2f}x",
        "outside rendering = worker time blocked on writing / (stepping + blocked); the write-behind thread's "
        "own time overlaps stepping",
    ]
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
