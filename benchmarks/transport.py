"""Transport benchmark: per-step round trip through ``Controller.step()``, side by side with a null floor and
(``--with-ai2thor``) AI2-THOR 5.0.0's own FifoServer/WsgiServer, all fed by the same fake player answering at once.

    .venv/bin/python benchmarks/transport.py [--with-ai2thor] [--quick] [--write]

* unirender: ``Controller(fake player).step("MoveAhead")``; images are not touched (lazy decoding). The controller's
  own overhead per step is the step time minus the time spent inside ``transport.send``/``transport.receive``.
* AI2-THOR 5.0.0: its ``FifoServer``/``WsgiServer`` ``send`` + ``receive`` in a separate venv
  (``/tmp/unirender-bench-ai2thor``, set up by this script with ``ai2thor==5.0.0 Flask==2.1.3 Werkzeug==2.1.1``).
  Werkzeug 2.1 closes every connection, so for it (only) the fake reconnects instead of failing like Unity.
* null floor: a child that writes the same number of bytes per step to a pipe / TCP socket and reads a 64-byte
  reply; the parent reads them into a preallocated buffer. Nothing is parsed.

Prints medians, p90 and ratios; ``--write`` also writes ``benchmarks/results-transport.md``.
"""

from __future__ import annotations

import argparse
import fcntl
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures import write_fake_player_executable  # noqa: E402
from fixtures.fake_player import wire_image  # noqa: E402
from unirender._process import ManagedProcess  # noqa: E402

AI2THOR_VENV = Path(os.environ.get("UNIRENDER_AI2THOR_VENV", "/tmp/unirender-bench-ai2thor"))
AI2THOR_PINS = ["ai2thor==5.0.0", "Flask==2.1.3", "Werkzeug==2.1.1"]
RGB_DEPTH_IDS = {"renderDepthImage": True, "renderInstanceSegmentation": True}
CONFIGS = [
    ("300x300 rgb", 300, 300, {}),
    ("300x300 rgb+depth+ids", 300, 300, RGB_DEPTH_IDS),
    ("1024x1024 rgb+depth+ids", 1024, 1024, RGB_DEPTH_IDS),
]
REPLY = b'{"action": "MoveAhead", "sequenceId": 12345}'.ljust(64)
METADATA_BYTES = 2500  # about what the fake's metadata weighs per step (msgpack / JSON)


def steps_for(width: int, quick: bool) -> tuple[int, int]:
    """(warm-up, measured) steps."""
    if width >= 1024:
        return (3, 15) if quick else (5, 40)
    return (10, 60) if quick else (30, 400)


def fake_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, FAKE_PLAYER_STATIC="1", FAKE_PLAYER_FLAVOUR="Linux64", FAKE_PLAYER_MISBEHAVE="")
    env.update(extra or {})
    return env


def payload_bytes(width: int, height: int, params: dict) -> int:
    kinds = ["rgb"] + (["depth", "ids"] if params else [])
    return METADATA_BYTES + sum(len(wire_image(k, width, height, frame=0, index=0)) for k in kinds)


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1e3,
        "n": len(ordered),
    }


# -- unirender ----------------------------------------------------------------------------------------------------
def bench_unirender(exe: str, server: str, width: int, height: int, params: dict, quick: bool, log_dir: str):
    from unirender import Controller

    os.environ.update(fake_env())
    warmup, steps = steps_for(width, quick)
    with Controller(exe, width=width, height=height, server=server, platform="CloudRendering", log_dir=log_dir,
                    **params) as c:  # fmt: skip
        transport = c.transport
        inside = [0.0]
        send, receive = transport.send, transport.receive

        def timed_send(action):
            t = time.perf_counter()
            try:
                return send(action)
            finally:
                inside[0] += time.perf_counter() - t

        def timed_receive(timeout):
            t = time.perf_counter()
            try:
                return receive(timeout)
            finally:
                inside[0] += time.perf_counter() - t

        transport.send, transport.receive = timed_send, timed_receive
        totals, overheads = [], []
        for i in range(warmup + steps):
            inside[0] = 0.0
            t0 = time.perf_counter()
            event = c.step("MoveAhead")
            elapsed = time.perf_counter() - t0
            if i >= warmup:
                totals.append(elapsed)
                overheads.append(elapsed - inside[0])
        assert event.metadata["screenWidth"] == width
        # one decode, to show what touching the frame costs on top (not part of the step)
        t0 = time.perf_counter()
        _ = event.frame
        decode_ms = (time.perf_counter() - t0) * 1e3
    return {"samples": totals, "overheads": overheads, "decode_ms": [decode_ms]}


# -- AI2-THOR 5.0.0 -----------------------------------------------------------------------------------------------
AI2THOR_RUNNER = r"""
import json, os, statistics, subprocess, sys, time
cfg = json.loads(sys.argv[1])
from ai2thor.fifo_server import FifoServer
from ai2thor.wsgi_server import WsgiServer
w, h = cfg["width"], cfg["height"]
if cfg["server"] == "fifo":
    server = FifoServer(width=w, height=h, timeout=60)
else:
    server = WsgiServer(host="127.0.0.1", port=0, width=w, height=h, timeout=60)
server.client_token = "bench-token"
server.start()
env = dict(os.environ)
env.update(cfg["env"])
for k, v in server.unity_params().items():
    env["AI2THOR_" + k.upper()] = str(v)
env.update(AI2THOR_CLIENT_TOKEN="bench-token", AI2THOR_SERVER_TYPE=server.server_type,
           AI2THOR_SERVER_SIDE_SCREENSHOT="True")
log = open(cfg["log"], "ab")
proc = subprocess.Popen([cfg["exe"], "-screen-fullscreen", "0", "-screen-quality", "7", "-screen-width", str(w),
                         "-screen-height", str(h)], env=env, stdout=log, stderr=log)
server.unity_proc = proc
try:
    server.receive()
    server.send(dict(action="Initialize", **cfg["params"]))
    server.receive()
    times = []
    for i in range(cfg["warmup"] + cfg["steps"]):
        t0 = time.perf_counter()
        server.send({"action": "MoveAhead"})
        event = server.receive()
        if i >= cfg["warmup"]:
            times.append(time.perf_counter() - t0)
    assert event.metadata["screenWidth"] == w
    print(json.dumps(times))
finally:
    proc.kill()
    proc.wait()
    try:
        server.stop()
    except Exception:
        pass
"""


def ensure_ai2thor_venv() -> Path:
    python = AI2THOR_VENV / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import ai2thor.fifo_server, flask"],
                                          capture_output=True).returncode == 0:  # fmt: skip
        return python
    print(f"setting up {AI2THOR_VENV} with {' '.join(AI2THOR_PINS)} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(AI2THOR_VENV)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *AI2THOR_PINS], check=True)
    return python


def bench_ai2thor(python: Path, exe: str, server: str, width: int, height: int, params: dict, quick: bool,
                  log_dir: str):  # fmt: skip
    warmup, steps = steps_for(width, quick)
    cfg = {"server": server, "width": width, "height": height, "params": params, "warmup": warmup,
           "steps": steps, "exe": exe, "log": os.path.join(log_dir, f"ai2thor-{server}.log"),
           "env": {"FAKE_PLAYER_STATIC": "1", "FAKE_PLAYER_FLAVOUR": "Linux64", "FAKE_PLAYER_MISBEHAVE": "",
                   "FAKE_PLAYER_TOLERATE_CLOSE": "1"}}  # fmt: skip
    out = subprocess.run([python, "-c", AI2THOR_RUNNER, json.dumps(cfg)], capture_output=True, text=True,
                         timeout=600, cwd=log_dir)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"AI2-THOR {server} run failed:\n{out.stderr[-3000:]}")
    return {"samples": json.loads(out.stdout.strip().splitlines()[-1])}


# -- null floor ---------------------------------------------------------------------------------------------------
def null_peer_with_player_work(kind: str, width: int, height: int, params: dict, a: str, b: str) -> None:
    """Child side of the second floor: the fake player's own per-step work (dispatch, metadata, msgpack / WWWForm
    encoding, the HTTP head) and the same bytes, length-prefixed instead of framed so the parent parses nothing."""
    import msgpack

    from fixtures.fake_player import FakeAgentManager, fifo_frames, wwwform

    manager = FakeAgentManager(["-screen-width", str(width), "-screen-height", str(height)], fake_env())
    manager.dispatch({"action": "Initialize", **params})
    reply = bytearray(len(REPLY))
    if kind == "pipe":
        wfd, rfd = int(a), int(b)
    else:
        sock = socket.create_connection((a, int(b)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        metadata, images = manager.emission(render=True)
        if kind == "pipe":
            parts = fifo_frames(0x01, msgpack.packb(metadata, use_single_float=True), images)
        else:
            fields = [("metadata", json.dumps(metadata).encode(), False)]
            fields += [(name, data, True) for name, data in images] + [("token", b"t", False)]
            content_type, body = wwwform(fields)
            head = f"POST /train HTTP/1.1\r\nContent-Length: {sum(map(len, body))}\r\n"
            parts = [f"{head}Content-Type: {content_type}\r\n\r\n".encode(), *body]
        parts.insert(0, sum(map(len, parts)).to_bytes(8, "big"))
        views = [memoryview(p) for p in parts]
        while views:
            n = os.writev(wfd, views[:512]) if kind == "pipe" else sock.sendmsg(views[:512])
            while n:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0], n = views[0][n:], 0
        got = 0
        while got < len(reply):
            view = memoryview(reply)[got:]
            n = os.readv(rfd, [view]) if kind == "pipe" else sock.recv_into(view)
            if n == 0:
                return
            got += n
        manager.dispatch(json.loads(bytes(reply)))


def null_peer(kind: str, nbytes: int, a: str, b: str) -> None:
    """Child side: send ``nbytes`` per step, read a 64-byte reply; until the reply stream ends."""
    message = os.urandom(nbytes)
    reply = bytearray(len(REPLY))
    if kind == "pipe":
        wfd, rfd = int(a), int(b)
        while True:
            view = memoryview(message)
            while view:
                view = view[os.write(wfd, view):]
            got = 0
            while got < len(reply):
                n = os.readv(rfd, [memoryview(reply)[got:]])
                if n == 0:
                    return
                got += n
    else:
        sock = socket.create_connection((a, int(b)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            sock.sendall(message)
            got = 0
            while got < len(reply):
                n = sock.recv_into(memoryview(reply)[got:])
                if n == 0:
                    return
                got += n


def bench_null(kind: str, nbytes: int, width: int, quick: bool, player: tuple | None = None) -> dict:
    """``player=(width, height, params)``: the peer also does the fake player's work (length-prefixed bytes)."""
    warmup, steps = steps_for(width, quick)
    buffer = bytearray(nbytes * 2)
    view = memoryview(buffer)
    script = Path(__file__).resolve()
    extra = ["--with-player", json.dumps(player)] if player else []
    if kind == "pipe":
        to_parent_r, to_parent_w = os.pipe()
        to_child_r, to_child_w = os.pipe()
        for fd in (to_parent_r, to_child_r):
            try:
                fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
            except OSError:
                pass
        child = ManagedProcess([sys.executable, script, "--null-peer", "pipe", str(nbytes), str(to_parent_w),
                                str(to_child_r), *extra], pass_fds=(to_parent_w, to_child_r))  # fmt: skip
        os.close(to_parent_w)
        os.close(to_child_r)

        def read_into(v):
            return os.readv(to_parent_r, [v])

        def write(data):
            os.write(to_child_w, data)

        closers = [lambda: os.close(to_parent_r), lambda: os.close(to_child_w)]
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        child = ManagedProcess([sys.executable, script, "--null-peer", "tcp", str(nbytes), "127.0.0.1",
                                str(listener.getsockname()[1]), *extra])  # fmt: skip
        listener.settimeout(30)
        conn, _ = listener.accept()
        listener.close()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        read_into, write = conn.recv_into, conn.sendall
        closers = [conn.close]
    try:
        times = []

        def read_exactly(count: int) -> None:
            got = 0
            while got < count:
                n = read_into(view[got:count])
                if n == 0:
                    raise RuntimeError("null peer died")
                got += n

        def read_message():
            if player:
                read_exactly(8)
                read_exactly(int.from_bytes(view[:8], "big"))
            else:
                read_exactly(nbytes)

        read_message()  # the "hello"
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            write(REPLY)
            read_message()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        for close in closers:
            close()
        child.terminate(1.0)
    return {"samples": times}


# -- waitress floor -----------------------------------------------------------------------------------------------
def waitress_peer() -> None:
    """Child side of the WSGI server floor: waitress, tuned as the PlayerHub tunes it, with an app that reads the
    body and answers a fixed action: the cost of the mandated WSGI server alone, without unirender's code."""
    from waitress import create_server

    from unirender.transport.serving import quick_ack_channel_class, waitress_options

    def app(environ, start_response):
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(REPLY)))])
        return [REPLY]

    server = create_server(app, host="127.0.0.1", port=0, **waitress_options(1))
    server.channel_class = quick_ack_channel_class()
    print(server.effective_port, flush=True)
    server.run()


def bench_waitress_floor(nbytes: int, width: int, quick: bool) -> dict:
    """The same bytes POSTed to a bare waitress app the way Unity posts them (head, then body, in two sends on a
    keep-alive socket); timed here from the request to the full response."""
    warmup, steps = steps_for(width, quick)
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--waitress-peer"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        port = int(child.stdout.readline())
        sock = socket.create_connection(("127.0.0.1", port))
        body = os.urandom(nbytes)
        head = (f"POST /train HTTP/1.1\r\nContent-Length: {nbytes}\r\n"
                "Content-Type: multipart/form-data; boundary=\"b\"\r\n\r\n").encode()  # fmt: skip
        response = bytearray(4096)
        times = []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            sock.sendall(head)
            sock.sendall(body)
            got = 0
            while True:
                n = sock.recv_into(memoryview(response)[got:])
                if n == 0:
                    raise RuntimeError("waitress floor server closed the connection")
                got += n
                end = response.find(b"\r\n\r\n", 0, got)
                if end >= 0 and got >= end + 4 + len(REPLY):
                    break
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        sock.close()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return {"samples": times}


# -- report -------------------------------------------------------------------------------------------------------
def pooled(runs: list[dict]) -> dict:
    """Samples of every round pooled: load that drifts during the run hits every system alike."""
    result = summary([t for r in runs for t in r["samples"]])
    if "overheads" in runs[0]:
        result["controller_overhead_ms"] = statistics.median([t for r in runs for t in r["overheads"]]) * 1e3
    return result


def run(args) -> str:
    with tempfile.TemporaryDirectory(prefix="unirender-bench-") as tmp:
        exe = write_fake_player_executable(tmp)
        ai2thor_python = ensure_ai2thor_venv() if args.with_ai2thor else None
        rows = []
        for label, width, height, params in CONFIGS:
            nbytes = payload_bytes(width, height, params)
            for server, null_kind in (("fifo", "pipe"), ("wsgi", "tcp")):
                runs: dict[str, list] = {"ours": [], "floor": [], "floor_player": [], "floor_server": [], "theirs": []}
                for _round in range(args.rounds):  # interleaved rounds, pooled
                    runs["ours"].append(bench_unirender(exe, server, width, height, params, args.quick, tmp))
                    runs["floor"].append(bench_null(null_kind, nbytes, width, args.quick))
                    runs["floor_player"].append(
                        bench_null(null_kind, nbytes, width, args.quick, player=(width, height, params))
                    )
                    if server == "wsgi":
                        runs["floor_server"].append(bench_waitress_floor(nbytes, width, args.quick))
                    if ai2thor_python:
                        runs["theirs"].append(
                            bench_ai2thor(ai2thor_python, exe, server, width, height, params, args.quick, tmp)
                        )
                result = {k: pooled(v) if v else None for k, v in runs.items()}
                rows.append((label, server.upper(), nbytes, result["ours"], result["floor"], result["floor_player"],
                             result["floor_server"], result["theirs"]))  # fmt: skip
                print(format_row(rows[-1]), flush=True)
    return report(rows, args)


def format_row(row) -> str:
    label, server, nbytes, ours, floor, floor_player, floor_server, theirs = row
    text = (f"{label:24s} {server:4s} unirender {ours['median_ms']:6.2f} ms (p90 {ours['p90_ms']:6.2f}, ctl "
            f"{ours['controller_overhead_ms']:.3f})  null {floor['median_ms']:6.2f}  null+player "
            f"{floor_player['median_ms']:6.2f}")  # fmt: skip
    if floor_server:
        text += f"  bare waitress {floor_server['median_ms']:6.2f}"
    if theirs:
        text += f"  ai2thor {theirs['median_ms']:7.2f}"
    return text


def report(rows, args) -> str:
    lines = [
        "# Transport benchmark results",
        "",
        f"`benchmarks/transport.py{' --with-ai2thor' if args.with_ai2thor else ''}{' --quick' if args.quick else ''}"
        f" --rounds {args.rounds}`"
        f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {os.cpu_count()} CPUs (shared with other jobs), "
        f"Python {platform.python_version()}.",
        "All columns were measured side by side in one run; compare ratios rather than absolute numbers.",
        "Per-step round trip = action out + full emission (metadata + images) back; the fake player answers at once.",
        "",
        "Columns: **unirender** = `Controller.step()` (images not decoded: lazy); **null** = the same number of bytes",
        "per step over a pipe / TCP socket between two processes that do nothing else; **null+player** = the same,",
        "but the peer also does the fake player's own per-step work (metadata, msgpack / WWWForm, HTTP head), so",
        "unirender / null+player isolates what unirender's transport and controller add; **bare waitress** (WSGI",
        "only) = the same bytes POSTed the way Unity posts them to a waitress app, tuned as the PlayerHub tunes it,",
        "that reads the body and answers a fixed action: what the WSGI server alone costs; **ctl** = controller",
        "overhead (step time minus time inside `transport.send`/`receive`).",
        "",
        "| payload | transport | bytes/step | unirender median / p90 ms | null median ms | null+player median ms |"
        " bare waitress median ms | unirender / null | unirender / null+player | bare waitress / null |"
        " AI2-THOR 5.0.0 median / p90 ms | AI2-THOR / unirender | ctl ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, server, nbytes, ours, floor, floor_player, floor_server, theirs in rows:
        ai2 = f"{theirs['median_ms']:.2f} / {theirs['p90_ms']:.2f}" if theirs else "not run"
        ai2_ratio = f"{theirs['median_ms'] / ours['median_ms']:.2f}x" if theirs else "-"
        bare = f"{floor_server['median_ms']:.2f}" if floor_server else "-"
        bare_ratio = f"{floor_server['median_ms'] / floor['median_ms']:.2f}x" if floor_server else "-"
        lines.append(
            f"| {label} | {server} | {nbytes:,} | {ours['median_ms']:.2f} / {ours['p90_ms']:.2f} | "
            f"{floor['median_ms']:.2f} | {floor_player['median_ms']:.2f} | {bare} | "
            f"{ours['median_ms'] / floor['median_ms']:.2f}x | {ours['median_ms'] / floor_player['median_ms']:.2f}x | "
            f"{bare_ratio} | {ai2} | {ai2_ratio} | {ours['controller_overhead_ms']:.3f} |"
        )
    lines += [
        "",
        "Targets: FIFO within 1.5x of the null floor, WSGI within 2x; controller overhead under 0.2 ms.",
        "Reference figures from the issue (ms/step median, 300² rgb / 300² rgb+depth+ids / 1024² rgb+depth+ids):",
        "AI2-THOR WSGI 5.4 / 8.3 / 27.8, AI2-THOR FIFO 2.3 / 5.4 / 53.9, null 0.3-0.4 / 0.75 / 5.8-8.4.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--waitress-peer":
        waitress_peer()
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--null-peer":
        kind, nbytes, a, b = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
        if len(sys.argv) > 7 and sys.argv[6] == "--with-player":
            width, height, params = json.loads(sys.argv[7])
            null_peer_with_player_work(kind, width, height, params, a, b)
        else:
            null_peer(kind, nbytes, a, b)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-ai2thor", action="store_true", help="also run AI2-THOR 5.0.0 (sets up its venv)")
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell, samples pooled")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results-transport.md")
    args = parser.parse_args()
    text = run(args)
    print()
    print(text)
    if args.write:
        path = ROOT / "benchmarks" / "results-transport.md"
        notes = ""  # a hand-written "## Notes" section survives re-runs
        if path.exists() and "\n## Notes" in path.read_text():
            notes = "\n## Notes" + path.read_text().split("\n## Notes", 1)[1]
        path.write_text(text + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
