"""Scale-out benchmark: session backends against a bare Controller, measured side by side in one run.

1. Per-step latency at 300x300 rgb: a ``LocalBackend`` session and a ``RayBackend`` session (2-node Ray cluster
   on this machine), each interleaved round-robin with a bare ``Controller`` so that both see the same load.
   The LocalBackend's own cost is also measured directly: session.step time minus the Controller.step time
   inside it, per call.
2. Aggregate steps/s for 1, 2, 4, 8 sessions on each backend (one driver thread per session).
3. Ray frame transfer, two cluster settings: frames through the object store (Ray's default for returns over
   100 KiB) or inline in the actor's reply (``INLINE_FRAMES_SYSTEM_CONFIG``); whether the driver copies them.

Writes benchmarks/results-scale.md and benchmarks/scaling.png. Usage:
    .venv/bin/python benchmarks/scale.py [--seconds 4] [--steps 150] [--sessions 1,2,4,8]
                                         [--ray-modes objectstore,inline]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
if not os.environ.get("RAY_TMPDIR"):  # Ray's session folders (logs, sockets) in a short temp dir, removed at exit
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="unirender-ray-")
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)

from unirender.cluster import LocalBackend, create_backend  # noqa: E402
from unirender.controller import Controller  # noqa: E402

HERE = Path(__file__).resolve().parent
ACTIONS = ["RotateRight", "RotateLeft"]  # alternate so every step renders a new view


def player(width: int, height: int) -> dict:
    return {"executable": "builtin", "width": width, "height": height, "platform": "auto", "server": "fifo"}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# -- 1. per-step latency ----------------------------------------------------------------------------------------
def latency(kwargs: dict, steps: int, name: str, backend) -> dict:
    """p50/p90 ms of a session on ``backend`` and of a bare Controller, steps interleaved round-robin.

    LocalBackend: the bare contender is the session's own Controller called directly (same player, so only the
    backend's cost differs), and the wrapper's cost is also timed inside each call. Ray: a bare Controller of
    its own in this process."""
    session = backend.create_session(kwargs)
    bare = None
    inner_times: list[float] = []
    outer_times: list[float] = []
    try:
        if isinstance(backend, LocalBackend):
            controller_step = session.controller.step

            def timed_inner(action):  # the Controller's own share of each session.step
                t0 = time.perf_counter()
                try:
                    return controller_step(action)
                finally:
                    inner_times.append(time.perf_counter() - t0)

            session.controller.step = timed_inner

            def session_step(action):  # session.step timed alone, for the wrapper's cost
                t0 = time.perf_counter()
                event = session.step(action)
                outer_times.append(time.perf_counter() - t0)
                return event

            contenders = {
                "bare Controller": lambda a: controller_step(a).frame,
                name: lambda a: session_step(a).frame,
            }
        else:
            import ray

            bare = Controller(**kwargs)
            actor = session.actor
            contenders = {
                "bare Controller": lambda a: bare.step(a).frame,
                name: lambda a: session.step(a).frame,
                "(empty Ray actor call)": lambda a: ray.get(actor.ping.remote(), timeout=60),
            }
        for step in contenders.values():  # warm-up
            for i in range(10):
                step({"action": ACTIONS[i % 2]})
        inner_times.clear()
        outer_times.clear()
        times: dict[str, list[float]] = {n: [] for n in contenders}
        for i in range(steps):
            action = {"action": ACTIONS[i % 2]}
            for n, step in contenders.items():
                t0 = time.perf_counter()
                step(action)
                times[n].append(time.perf_counter() - t0)
        result = {
            n: {"p50": percentile(v, 0.5) * 1e3, "p90": percentile(v, 0.9) * 1e3} for n, v in times.items()
        }
        result["bare Controller"]["same_player"] = bare is None
        if inner_times:
            wrapper = [o - i for o, i in zip(outer_times, inner_times, strict=True)]
            result[name]["wrapper_p50_us"] = percentile(wrapper, 0.5) * 1e6
            result[name]["wrapper_mean_us"] = statistics.fmean(wrapper) * 1e6
        if bare is not None:
            frame = session.step({"action": "Pass"}).frame
            result[name]["owndata"] = bool(frame.flags.owndata)
            result[name]["writeable"] = bool(frame.flags.writeable)
        return result
    finally:
        session.stop()
        if bare is not None:
            bare.stop()


# -- 2. aggregate throughput -----------------------------------------------------------------------------------
def throughput(backend, kwargs: dict, n: int, seconds: float) -> float:
    with ThreadPoolExecutor(n) as pool:
        sessions = list(pool.map(lambda _: backend.create_session(kwargs), range(n)))
    try:
        for s in sessions:
            s.step({"action": "Pass"})
        counts = [0] * n
        stop = threading.Event()

        def run(i: int) -> None:
            j = 0
            while not stop.is_set():
                sessions[i].step({"action": ACTIONS[j % 2]})
                j += 1
                counts[i] += 1

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        return sum(counts) / (time.perf_counter() - t0)
    finally:
        for s in sessions:
            s.stop()


def start_ray_cluster(mode: str):
    import ray
    from ray.cluster_utils import Cluster

    from unirender.cluster.ray_backend import INLINE_FRAMES_SYSTEM_CONFIG

    store = 200 * 2**20
    head = {"num_cpus": 1, "include_dashboard": False, "object_store_memory": store}
    if mode == "inline":
        head["_system_config"] = INLINE_FRAMES_SYSTEM_CONFIG
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=1, resources={"display": 8}, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def write_plot(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in curves.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("aggregate steps/s (300x300 rgb)")
    ax.set_xticks(sorted({p[0] for pts in curves.values() for p in pts}))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("unirender session backends, reference player")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


RAY_MODES = {"objectstore": "RayBackend, frames via object store", "inline": "RayBackend, frames inline"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per throughput cell")
    parser.add_argument("--steps", type=int, default=150, help="latency samples per contender")
    parser.add_argument("--sessions", default="1,2,4,8")
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--ray-modes", default="objectstore,inline", help="comma list; empty: no Ray")
    parser.add_argument("--out", type=Path, default=HERE / "results-scale.md")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.sessions.split(",")]
    modes = [m for m in args.ray_modes.split(",") if m]
    kwargs = player(args.size, args.size)

    runs: list[dict] = []  # one latency table per run, each with its own bare Controller
    curves: dict[str, list[tuple[int, float]]] = {}
    with LocalBackend() as local:
        runs.append(latency(kwargs, args.steps, "LocalBackend", local))
        print("latency (ms):", runs[-1], flush=True)
        curves["LocalBackend"] = [(n, throughput(local, kwargs, n, args.seconds)) for n in counts]
        print("LocalBackend:", curves["LocalBackend"], flush=True)
    for mode in modes:
        import ray

        name = RAY_MODES[mode]
        t0 = time.perf_counter()
        cluster = start_ray_cluster(mode)
        print(f"ray 2-node cluster ({mode}) ready in {time.perf_counter() - t0:.1f} s", flush=True)
        try:
            with create_backend("ray", wait_timeout=60, start_timeout=120) as backend:
                runs.append(latency(kwargs, args.steps, name, backend))
                print("latency (ms):", runs[-1], flush=True)
                curves[name] = [(n, throughput(backend, kwargs, n, args.seconds)) for n in counts]
                print(f"{name}:", curves[name], flush=True)
        finally:
            ray.shutdown()
            cluster.shutdown()

    png = args.out.with_name("scaling.png")
    write_plot(curves, png)
    args.out.write_text(report(args, runs, curves, png.name))
    print(f"wrote {args.out} and {png}")
    return 0


def report(args, runs: list[dict], curves: dict, png_name: str) -> str:
    lines = [
        "# Scale-out benchmark (`benchmarks/scale.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} CPU cores, "
        f"Python {sys.version.split()[0]}; reference player (builtin), {args.size}x{args.size} rgb, FIFO, "
        "platform auto. Ray: a 2-node `ray.cluster_utils.Cluster` on this machine (head without displays, a "
        "worker node with `display: 8`). The machine is shared (2 cores, other work running): read the numbers "
        "as ratios within one table, not as absolutes.",
        "",
        f"## Per-step latency ({args.steps} steps per contender)",
        "",
        "Each row ran interleaved round-robin with a bare Controller (same load for both); the overhead is the "
        "difference of the two p50s. Every contender returns the decoded rgb frame (`step(...).frame`), since "
        "events decode lazily. For the LocalBackend the bare Controller is the session's own, called "
        "directly (same player process), so only the backend's cost differs.",
        "",
        "| path | p50 ms | p90 ms | bare Controller p50 ms (same run) | overhead p50 | target |",
        "|---|---|---|---|---|---|",
    ]
    targets = {"LocalBackend": "<= 0.3 ms"}
    for run in runs:
        bare = run["bare Controller"]["p50"]
        for name, v in run.items():
            if name == "bare Controller":
                continue
            target = "reference: Ray's floor" if name.startswith("(") else targets.get(name, "<= 5 ms")
            lines.append(
                f"| {name} | {v['p50']:.2f} | {v['p90']:.2f} | {bare:.2f} | {v['p50'] - bare:+.2f} ms | {target} |"
            )
    for run in runs:
        for name, v in run.items():
            if "wrapper_p50_us" in v:
                lines += [
                    "",
                    f"{name}'s own cost, measured inside each call (session.step minus the Controller.step it "
                    f"wraps): p50 **{v['wrapper_p50_us']:.1f} µs**, mean {v['wrapper_mean_us']:.1f} µs per step "
                    "(target <= 300 µs). The difference of p50s above is noise at this scale.",
                ]
            if "owndata" in v:
                lines.append(
                    f"\n{name}: driver-side frames `owndata={v['owndata']}`, `writeable={v['writeable']}` (views of "
                    "the buffer Ray received: no copy on the driver)."
                )
    lines += [
        "",
        f"## Aggregate throughput ({args.seconds:g} s per cell, one driver thread per session)",
        "",
        "| sessions | " + " | ".join(f"{name} steps/s" for name in curves) + " |",
        "|---|" + "---|" * len(curves),
    ]
    ns = [n for n, _ in next(iter(curves.values()))]
    for i, n in enumerate(ns):
        lines.append(f"| {n} | " + " | ".join(f"{pts[i][1]:.1f}" for pts in curves.values()) + " |")
    lines.append("")
    for name, pts in curves.items():
        rates = dict(pts)
        if 2 in rates and 8 in rates:
            lines.append(f"- {name}: 8 sessions / 2 sessions = **{rates[8] / rates[2]:.2f}x** (target >= 1).")
    lines += [
        "",
        f"![scaling curve]({png_name})",
        "",
        "Notes: every cell runs all players (and, for Ray, the actor workers and Ray's daemons) on the same 2 "
        "cores, so the curves flatten where the CPUs are full, not where a backend stops scaling. Repeated runs "
        "on this shared machine differ by up to about 30 %; compare the columns of one run. Inline frames "
        "(`INLINE_FRAMES_SYSTEM_CONFIG`) skip the object store's create/seal/pull round trips: with the driver "
        "and actors on different nodes each object-store frame is also pulled across nodes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
