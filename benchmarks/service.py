"""Render service benchmark: per-step latency over HTTP vs a local Controller, and aggregate throughput.

    .venv/bin/python benchmarks/service.py [--steps 200] [--seconds 5] [--out benchmarks/results-service.md]

1. Latency, measured side by side in one run (local and remote steps interleaved, same action, same size):
   a local ``Controller`` and a session on a ``unirender serve`` process (msgpack, JSON+base64, multipart), at
   300x300 with {rgb} and {rgb, depth, instance}. Target: msgpack adds <= 1.5 ms over local (p50).
2. Throughput: 1, 2, 4, 8 concurrent sessions stepped from a separate load process (one thread and one
   keep-alive connection per session). Checks: no errors, fair share (min/max steps per session), aggregate at
   4 sessions >= the best single session.
3. Realistic metadata (``--realistic-only`` runs just this): the same latency comparison with the test suite's
   fake player sending AI2-THOR-sized metadata (``FAKE_PLAYER_OBJECTS=50``: ~55 KB msgpack / ~83 KB JSON per
   step) over FIFO and WSGI, 300x300 rgb+depth+ids. The service forwards that metadata to the msgpack client
   without decoding it (FIFO: the player's bytes; WSGI: its JSON converted once) and the client decodes it only
   when read; rows for a client that reads no metadata ("frames") and one that reads every key ("keys").
   Target: msgpack adds <= 2.0 ms over local (p50, frames).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SIZE = 300
REALISTIC_OBJECTS = 50  # a FloorPlan kitchen has 50-100 objects
ACTIONS = ["RotateRight", "RotateLeft"]  # alternate so every frame is rendered anew


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start_server(tmp: Path, total_players: int, executables: list[str] = (),
                 env: dict | None = None) -> tuple[subprocess.Popen, str]:  # fmt: skip
    config = tmp / "service.yaml"
    config.write_text(json.dumps({
        "port": 0, "data_root": str(tmp / "data"), "allowed_executables": ["builtin", *executables],
        "limits": {"sessions_per_token": 16, "total_players": total_players, "steps_per_second": 100000},
    }))
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://\S+)", (tmp / "serve.log").read_text())
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start:\n" + (tmp / "serve.log").read_text())


FLOOR_SERVER = """
import sys
from waitress.server import create_server
from unirender.transport.serving import waitress_options
body = bytes(int(sys.argv[1]))
def app(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]
server = create_server(app, host="127.0.0.1", port=0, **waitress_options(4))
print(server.effective_port, flush=True)
server.run()
"""


def http_floor(size: int):
    """A bare waitress app answering ``size`` bytes, and a function doing one keep-alive POST to it the way the
    client does on loopback (``unirender.http_connection``): the HTTP cost without the service, same load."""
    from unirender.http_connection import HttpConnection

    proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(size)], stdout=subprocess.PIPE, text=True)
    conn = HttpConnection("127.0.0.1", int(proc.stdout.readline()), timeout=60)

    def post():
        conn.request("POST", "/step", {"Content-Type": "application/json", "Accept": "application/x-msgpack"},
                     b'{"action": "RotateRight"}')

    post.close = conn.close
    return proc, post


def latency(url: str, modalities: list[str], steps: int) -> list[dict]:
    from unirender.client import Client, RemoteSession
    from unirender.controller import Controller
    from unirender.spec import EnvironmentSpec, RenderSpec

    env = EnvironmentSpec(width=SIZE, height=SIZE)
    render = RenderSpec(modalities=modalities)
    local = Controller(**env.controller_kwargs(render), scene="FloorPlan1")
    client = Client(url, format="msgpack")
    remote = client.session(env, render=render, scene="FloorPlan1")
    size = len(client.request("POST", f"/v1/sessions/{remote.id}/step", {"action": "Pass"},
                              accept="application/x-msgpack").content)
    floor_proc, floor_post = http_floor(size)
    views = {
        "local Controller": None,
        f"HTTP floor: bare waitress + the client's connection, {size} B, no service": floor_post,
        "HTTP msgpack": remote,
        "HTTP JSON (base64 PNG/NPY)": RemoteSession(Client(url, format="json"), remote.info_at_start, modalities),
        "HTTP multipart (PNG/NPY)": RemoteSession(Client(url, format="multipart"), remote.info_at_start),
    }
    times: dict[str, list[float]] = {name: [] for name in views}
    parts: dict[str, list[float]] = {"player step (in the service)": [], "encode (msgpack)": [],
                                     "HTTP + client decode": []}
    try:
        for i in range(steps + 10):  # 10 warm-up rounds
            action = ACTIONS[i % 2]
            for name, view in views.items():
                started = time.perf_counter()
                if view is None:
                    event = local.step(action)
                    event.frames()  # decode, as the remote side must before sending
                elif callable(view):
                    view()
                else:
                    view.step(action).frames()
                elapsed = (time.perf_counter() - started) * 1000
                if i >= 10:
                    times[name].append(elapsed)
                    if view is remote:
                        t = remote.last_server_timing
                        parts["player step (in the service)"].append(t["step"])
                        parts["encode (msgpack)"].append(t["encode"])
                        parts["HTTP + client decode"].append(elapsed - t["step"] - t["encode"])
    finally:
        remote.stop()
        local.stop()
        floor_post.close()
        floor_proc.kill()
        floor_proc.wait()
    rows = []
    base = statistics.median(times["local Controller"])
    for name, values in times.items():
        p50 = statistics.median(values)
        rows.append({"path": name, "p50_ms": p50, "p90_ms": percentile(values, 0.9),
                     "mean_ms": statistics.fmean(values), "over_local_ms": p50 - base})
    for name, values in parts.items():
        rows.append({"path": f"  msgpack breakdown: {name}", "p50_ms": statistics.median(values),
                     "p90_ms": percentile(values, 0.9), "mean_ms": statistics.fmean(values),
                     "over_local_ms": float("nan")})
    return rows


def load_process(url: str, sessions: int, seconds: float) -> dict:
    """Runs in its own process: start ``sessions`` sessions, step each from its own thread for ``seconds``."""
    from unirender.client import Client

    client = Client(url)
    remote = [None] * sessions

    def open_session(i):
        remote[i] = client.session({"width": SIZE, "height": SIZE}, scene="FloorPlan1")

    openers = [threading.Thread(target=open_session, args=(i,)) for i in range(sessions)]
    for t in openers:
        t.start()
    for t in openers:
        t.join()
    counts, errors = [0] * sessions, [0] * sessions
    barrier = threading.Barrier(sessions + 1)
    stop_at = [0.0]

    def run(i):
        barrier.wait()
        n = 0
        while time.perf_counter() < stop_at[0]:
            try:
                remote[i].step(ACTIONS[n % 2])
                counts[i] += 1
            except Exception:
                errors[i] += 1
            n += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + seconds + 0.0
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for s in remote:
        s.stop()
    return {"sessions": sessions, "seconds": elapsed, "counts": counts, "errors": errors}


def throughput(url: str, seconds: float) -> list[dict]:
    rows = []
    for n in (1, 2, 4, 8):
        out = subprocess.run(
            [sys.executable, __file__, "--load-process", url, str(n), str(seconds)],
            capture_output=True, text=True, timeout=600,
        )
        if out.returncode != 0:
            raise RuntimeError(f"load process failed:\n{out.stderr}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        counts = result["counts"]
        rows.append({
            "sessions": n,
            "steps_per_s": sum(counts) / result["seconds"],
            "per_session": [round(c / result["seconds"], 1) for c in counts],
            "fairness": min(counts) / max(counts) if max(counts) else 0.0,
            "errors": sum(result["errors"]),
        })
    return rows


def fake_player_env() -> dict:
    """The fake player's settings (inherited by the service's players and the local Controller's): realistic
    metadata encoded once and spliced in (its own encoding is not what is measured)."""
    return {"FAKE_PLAYER_STATIC": "1", "FAKE_PLAYER_FLAVOUR": "Linux64", "FAKE_PLAYER_MISBEHAVE": "",
            "FAKE_PLAYER_OBJECTS": str(REALISTIC_OBJECTS)}  # fmt: skip


def realistic_latency(url: str, exe: str, transport: str, steps: int) -> list[dict]:
    """Local Controller vs the service's msgpack path with the fake player's realistic metadata; each as a
    frames-only caller and as one reading every metadata key (interleaved)."""
    from unirender.client import Client
    from unirender.controller import Controller
    from unirender.spec import EnvironmentSpec, RenderSpec

    env = EnvironmentSpec(width=SIZE, height=SIZE, executable=exe, transport=transport, platform="CloudRendering")
    render = RenderSpec(modalities=["rgb", "depth", "instance_segmentation"])
    local = Controller(**env.controller_kwargs(render))
    client = Client(url, format="msgpack")
    remote = client.session(env, render=render)
    size = len(client.request("POST", f"/v1/sessions/{remote.id}/step", {"action": "Pass"},
                              accept="application/x-msgpack").content)

    def every_key(event) -> None:
        metadata = event.metadata
        for value in metadata.values():
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        for _ in item.items():
                            pass

    views = {"local Controller": local, "HTTP msgpack": remote}
    times: dict[str, list[float]] = {f"{name}, {caller}": [] for caller in ("frames", "keys") for name in views}
    parts: dict[str, list[float]] = {"player step (in the service)": [], "encode (msgpack)": [],
                                     "HTTP + client decode": []}
    try:
        for i in range(steps + 10):  # 10 warm-up rounds
            action = ACTIONS[i % 2]
            for caller in ("frames", "keys"):
                for name, view in views.items():
                    started = time.perf_counter()
                    event = view.step(action)
                    event.frames()
                    if caller == "keys":
                        every_key(event)
                    elapsed = (time.perf_counter() - started) * 1000
                    if i < 10:
                        continue
                    times[f"{name}, {caller}"].append(elapsed)
                    if view is remote and caller == "frames":
                        t = remote.last_server_timing
                        parts["player step (in the service)"].append(t["step"])
                        parts["encode (msgpack)"].append(t["encode"])
                        parts["HTTP + client decode"].append(elapsed - t["step"] - t["encode"])
    finally:
        remote.stop()
        local.stop()
    rows = []
    for name, values in times.items():
        base = statistics.median(times["local Controller, " + name.rsplit(", ", 1)[1]])
        p50 = statistics.median(values)
        rows.append({"path": name, "p50_ms": p50, "p90_ms": percentile(values, 0.9),
                     "mean_ms": statistics.fmean(values), "over_local_ms": p50 - base})
    for name, values in parts.items():
        rows.append({"path": f"  msgpack frames breakdown: {name}", "p50_ms": statistics.median(values),
                     "p90_ms": percentile(values, 0.9), "mean_ms": statistics.fmean(values),
                     "over_local_ms": float("nan")})
    rows.append({"path": f"  (msgpack response: {size} B)", "p50_ms": float("nan"), "p90_ms": float("nan"),
                 "mean_ms": float("nan"), "over_local_ms": float("nan")})
    return rows


def realistic(steps: int) -> dict[str, list[dict]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fixtures import write_fake_player_executable

    os.environ.update(fake_player_env())  # the local Controller's player and the service's inherit it
    with tempfile.TemporaryDirectory(prefix="unirender-bench-") as tmp:
        exe = write_fake_player_executable(tmp)
        proc, url = start_server(Path(tmp), total_players=4, executables=[exe], env=dict(os.environ))
        try:
            return {f"fake player, {REALISTIC_OBJECTS} objects, rgb+depth+ids, {transport.upper()}":
                    realistic_latency(url, exe, transport, steps) for transport in ("fifo", "wsgi")}
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def latency_tables(lat: dict[str, list[dict]]) -> list[str]:
    """One Markdown table per label: p50/p90/mean and p50 over local (blank where a figure is missing)."""
    lines = []
    for label, rows in lat.items():
        lines += [f"### {label}", "", "| path | p50 | p90 | mean | over local (p50) |", "|---|---|---|---|---|"]
        for r in rows:
            cells = [("" if v != v else f"{v:.2f}") for v in (r["p50_ms"], r["p90_ms"], r["mean_ms"])]
            over = "" if r["over_local_ms"] != r["over_local_ms"] else f"{r['over_local_ms']:+.2f}"
            lines.append(f"| {r['path']} | {' | '.join(cells)} | {over} |")
        lines.append("")
    return lines


def realistic_report(lat: dict[str, list[dict]], steps: int) -> list[str]:
    lines = [
        f"## Realistic metadata: per-step latency, {steps} steps per path, interleaved (ms)",
        "",
        f"The test suite's fake player with {REALISTIC_OBJECTS} AI2-THOR-like objects in its metadata (as in "
        "`benchmarks/transport.py`), 300x300 rgb+depth+ids; local Controller vs the service's msgpack path, each "
        "as a caller that reads only frames and one that reads every metadata key. 'over local' compares like "
        "with like (frames with frames, keys with keys).",
        "",
    ]
    lines += latency_tables(lat)
    over = {label: next(r for r in rows if r["path"] == "HTTP msgpack, frames")["over_local_ms"]
            for label, rows in lat.items()}
    lines += ["Target: msgpack adds <= 2.0 ms over local with realistic metadata (frames): " + ", ".join(
        f"{label}: {v:+.2f} ms ({'met' if v <= 2.0 else 'NOT met'})" for label, v in over.items()), ""]
    return lines


def write_report(path: Path, lat: dict[str, list[dict]], tput: list[dict], args,
                 rich: dict[str, list[dict]] | None = None) -> str:  # fmt: skip
    lines = [
        "# Render service benchmark (`benchmarks/service.py`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs, shared with other work; {platform.python_implementation()} "
        f"{platform.python_version()}). Reference player, software GL (llvmpipe), {SIZE}x{SIZE}, FIFO transport, "
        "server = `unirender serve` (waitress) on 127.0.0.1. Client and server on the same machine.",
        "",
        f"## Per-step latency, {args.steps} steps per path, interleaved (ms)",
        "",
        "Each round steps the local Controller and then the same session once per format, so all paths see the "
        "same load. 'over local' = p50 of the path minus p50 of the local Controller. The breakdown rows split "
        "each msgpack step by the service's `Server-Timing` header: the player step as the service saw it, "
        "encoding, and the rest (HTTP both ways, the client's request and decode, thread hand-offs).",
        "",
    ]
    lines += latency_tables(lat)
    msgpack_over = {label: next(r for r in rows if r["path"] == "HTTP msgpack")["over_local_ms"]
                    for label, rows in lat.items()}
    lines += ["Target: msgpack adds <= 1.5 ms over local: " + ", ".join(
        f"{label}: {v:+.2f} ms ({'met' if v <= 1.5 else 'NOT met'})" for label, v in msgpack_over.items()), ""]
    lines += [
        f"## Aggregate throughput, {args.seconds:g} s per row, rgb {SIZE}x{SIZE}, msgpack",
        "",
        "A separate load process opens N sessions and steps each from its own thread on its own keep-alive "
        "connection. fairness = min/max steps per session.",
        "",
        "| sessions | steps/s (all) | per session | fairness | errors |",
        "|---|---|---|---|---|",
    ]
    for r in tput:
        lines.append(f"| {r['sessions']} | {r['steps_per_s']:.1f} | {r['per_session']} | {r['fairness']:.2f} | "
                     f"{r['errors']} |")
    best_single = tput[0]["steps_per_s"]
    four = next(r for r in tput if r["sessions"] == 4)["steps_per_s"]
    lines += ["", f"Aggregate at 4 sessions / single session: {four / best_single:.2f}x "
              f"({'met' if four >= best_single else 'NOT met'}: target >= 1.0x).", ""]
    if rich:
        lines += realistic_report(rich, args.steps)
    text = "\n".join(lines)
    if path.exists() and "\n## Notes" in path.read_text():  # the hand-written reading is kept
        text += "\n## Notes" + path.read_text().split("\n## Notes", 1)[1]
    path.write_text(text)
    return text


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--load-process":
        url, n, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        print(json.dumps(load_process(url, n, seconds)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results-service.md")))
    parser.add_argument("--realistic-only", action="store_true",
                        help="only section 3 (realistic metadata); prints it, writes nothing")
    args = parser.parse_args()
    if args.realistic_only:
        print("\n".join(realistic_report(realistic(args.steps), args.steps)))
        return 0
    with tempfile.TemporaryDirectory(prefix="unirender-bench-") as tmp:
        proc, url = start_server(Path(tmp), total_players=10)
        try:
            lat = {
                "{rgb}": latency(url, ["rgb"], args.steps),
                "{rgb, depth, instance}": latency(url, ["rgb", "depth", "instance_segmentation"], args.steps),
            }
            tput = throughput(url, args.seconds)
            rich = realistic(args.steps)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(write_report(Path(args.out), lat, tput, args, rich))
    return 0


if __name__ == "__main__":
    sys.exit(main())
