"""Web console benchmark: live-view frame rate and glass-to-glass latency, and what viewers cost the owner.

    .venv/bin/python benchmarks/console.py [--seconds 4] [--rounds 3] [--out benchmarks/results-console.md]

One ``unirender serve`` (no tokens: loopback), one 300x300 rgb session stepped as fast as it goes by its owner (a
client in this process, alternating RotateRight/RotateLeft so every frame is new). Phases, interleaved in
``--rounds`` rounds so that load changes on the machine hit each alike:

- ``none``: no viewer;
- ``1 viewer`` / ``4 viewers``: live views (``/ui/sessions/{id}/stream``) read as fast as they arrive by raw
  sockets in a separate process (the "browser");
- ``1 slow viewer``: one live view read at one frame per second.

Per phase: the owner's steps/s, each viewer's frames/s, and glass-to-glass latency: from the frame's
publication in the service (its step has just returned there) to the moment its last byte was read at the
viewer's socket (same host, same clock). Targets: a viewer sees >= 20 frames/s of a session stepping at 30+
steps/s, with < 100 ms added latency, and the owner loses <= 5 % of its steps/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))
from service import percentile, start_server  # noqa: E402  (benchmarks/service.py: one way to start it)

SIZE = 300
ACTIONS = ["RotateRight", "RotateLeft"]
PHASES = [("none", 0, False), ("1 viewer", 1, False), ("4 viewers", 4, False), ("1 slow viewer", 1, True)]


# -- the viewer process ("the browser") ------------------------------------------------------------------------
def viewer_main(url: str, path: str, viewers: int, slow: bool, seconds: float) -> None:
    """Open ``viewers`` streams, say "ready" once each has its first frame, read for ``seconds``, print stats."""
    import selectors

    parts = urlsplit(url)
    socks = []
    for _ in range(viewers):
        s = socket.create_connection((parts.hostname, parts.port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode())
        socks.append(s)
    buffers = [b""] * viewers
    stats = [{"frames": 0, "latency_ms": []} for _ in range(viewers)]

    def take_frames(i: int, now_ms: float, record: bool) -> None:
        while True:
            start = buffers[i].find(b"event: frame\n")
            end = buffers[i].find(b"\n\n", start) if start >= 0 else -1
            if end < 0:
                return
            doc = json.loads(buffers[i][start:end].split(b"data: ", 1)[1])
            buffers[i] = buffers[i][end + 2:]
            if record:
                stats[i]["frames"] += 1
                stats[i]["latency_ms"].append(now_ms - doc["rendered_ms"])
            else:
                stats[i]["first"] = True

    def has_frame(buffer: bytes) -> bool:
        start = buffer.find(b"event: frame\n")
        return start >= 0 and buffer.find(b"\n\n", start) >= 0

    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    while not all(st.get("first") for st in stats):  # each stream's current frame: not part of the figures
        for key, _ in sel.select(10):
            buffers[key.data] += key.fileobj.recv(1 << 20)
            if not buffers[key.data].startswith(b"HTTP/1.1 200"):
                sys.exit(f"viewer refused: {buffers[key.data].split(b'{', 1)[-1][:300]!r}")
            take_frames(key.data, time.time() * 1000, record=False)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    next_slow_read = time.monotonic()
    while time.monotonic() < deadline:
        if slow:  # one frame a second: read only what one frame needs, then sleep
            time.sleep(max(0.0, next_slow_read - time.monotonic()))
            next_slow_read += 1.0
            socks[0].setblocking(True)
            socks[0].settimeout(2)
            while not has_frame(buffers[0]):
                try:
                    buffers[0] += socks[0].recv(16 * 1024)
                except TimeoutError:
                    break
            take_frames(0, time.time() * 1000, record=True)
            continue
        for key, _ in sel.select(0.2):
            buffers[key.data] += key.fileobj.recv(1 << 20)
            take_frames(key.data, time.time() * 1000, record=True)
    for s in socks:
        s.close()
    print(json.dumps({"viewers": [{"frames": st["frames"], "fps": st["frames"] / seconds,
                                   "latency_ms": st["latency_ms"]} for st in stats]}), flush=True)


# -- the owner and the phases ------------------------------------------------------------------------------------
def run_phase(url: str, session, name: str, viewers: int, slow: bool, seconds: float) -> dict:
    proc = None
    time.sleep(0.5)  # the previous phase's viewers have gone: the service frees their slots within 0.25 s
    if viewers:
        proc = subprocess.Popen([sys.executable, __file__, "--viewer", url, f"/ui/sessions/{session.id}/stream",
                                 str(viewers), "1" if slow else "0", str(seconds)],
                                stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the viewers of phase {name!r} did not start")
    steps, i = 0, 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        session.step(ACTIONS[i % 2])
        i += 1
        steps += 1
    elapsed = time.perf_counter() - started
    result = {"phase": name, "steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed, "viewers": []}
    if proc is not None:
        out, _ = proc.communicate(timeout=seconds + 30)
        result["viewers"] = json.loads(out.strip().splitlines()[-1])["viewers"]
    return result


def summarise(results: list[dict]) -> list[dict]:
    rows = []
    base = None
    for name, viewers, _slow in PHASES:
        mine = [r for r in results if r["phase"] == name]
        steps = sum(r["steps"] for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        rate = steps / seconds
        if name == "none":
            base = rate
        # Per round, this phase against that round's "none": load from elsewhere on the machine moves both.
        nones = {r["round"]: r["steps_per_s"] for r in results if r["phase"] == "none"}
        ratios = [r["steps_per_s"] / nones[r["round"]] for r in mine if r["round"] in nones]
        row = {"phase": name, "steps_per_s": rate, "owner_ratio": rate / base if base else 1.0,
               "owner_ratio_median": statistics.median(ratios) if ratios else 1.0}
        if viewers:
            fps = [v["fps"] for r in mine for v in r["viewers"]]
            lat = [x for r in mine for v in r["viewers"] for x in v["latency_ms"]]
            row.update(viewer_fps_min=min(fps), viewer_fps_mean=statistics.fmean(fps),
                       latency_p50=percentile(lat, 0.5) if lat else None,
                       latency_p95=percentile(lat, 0.95) if lat else None)
        rows.append(row)
    return rows


def write_report(path: Path, rows: list[dict], args) -> str:
    lines = [
        "# Web console benchmark (`benchmarks/console.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs "
        f"(shared with other work), {SIZE}x{SIZE} rgb, {args.rounds} rounds x {args.seconds:g} s per phase, "
        "phases interleaved. Latency: frame published in the service -> its last byte read at the viewer's "
        "socket.",
        "",
        "| phase | owner steps/s | owner vs none (all / median of rounds) | viewer frames/s (min / mean) "
        "| latency p50 / p95 (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        fps = f"{r['viewer_fps_min']:.1f} / {r['viewer_fps_mean']:.1f}" if "viewer_fps_min" in r else "-"
        lat = (f"{r['latency_p50']:.1f} / {r['latency_p95']:.1f}" if r.get("latency_p50") is not None
               else "-")
        lines.append(f"| {r['phase']} | {r['steps_per_s']:.1f} | {r['owner_ratio']:.3f} / "
                     f"{r['owner_ratio_median']:.3f} | {fps} | {lat} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--viewer":
        url, path, viewers, slow, seconds = sys.argv[2:7]
        viewer_main(url, path, int(viewers), slow == "1", float(seconds))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results-console.md")))
    args = parser.parse_args()

    from unirender.client import Client

    with tempfile.TemporaryDirectory(prefix="unirender-console-bench-") as tmp:
        proc, url = start_server(Path(tmp), total_players=2)
        try:
            with Client(url) as client, client.session({"width": SIZE, "height": SIZE},
                                                       render={"modalities": ["rgb"]}, scene="FloorPlan1") as s:
                for _ in range(30):  # warm up
                    s.step(ACTIONS[0])
                results = []
                for rnd in range(args.rounds):
                    order = PHASES[rnd % len(PHASES):] + PHASES[:rnd % len(PHASES)]  # rotate the order
                    for name, viewers, slow in order:
                        r = run_phase(url, s, name, viewers, slow, args.seconds)
                        print(f"round {rnd + 1} {name}: {r['steps_per_s']:.1f} steps/s, viewers "
                              f"{[round(v['fps'], 1) for v in r['viewers']]} frames/s", flush=True)
                        r["round"] = rnd
                        results.append(r)
        finally:
            proc.terminate()
            proc.wait(30)
    print(write_report(Path(args.out), summarise(results), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
