"""Transport benchmark: per-step round trip through ``Controller.step()`` with AI2-THOR-sized metadata, side by side
with the same code before lazy metadata, a null floor and (``--with-ai2thor``) AI2-THOR 5.0.0's own
FifoServer/WsgiServer, all fed by the same fake player answering at once.

    .venv/bin/python benchmarks/transport.py [--with-ai2thor] [--quick] [--rounds N] [--objects N] [--write]

* The payload: the fake player with ``FAKE_PLAYER_OBJECTS=50`` (50 AI2-THOR-like objects with every key a 5.0.0
  build sends: ~55 KB of msgpack / ~83 KB of JSON per step) plus the frames of each configuration.
* Every contender is measured twice, as two kinds of caller: **frames** = ``step()`` and the enabled frames read
  (``event.frame``, ``depth_frame``, ``instance_segmentation_frame``), metadata untouched; **keys** = the same plus
  every metadata key read (every agent key and every key of every object).
* unirender: ``Controller(fake player).step("MoveAhead")`` in a child process (WSGI: the private fast path,
  ``transport.direct``; **hub** is the same on a private waitress ``PlayerHub``, frames only). **eager** is the same tree as it was
  before lazy metadata (``git archive`` of the parent of the commit that added ``protocol/metadata.py``, or
  ``--eager-ref``), run the same way: today's eager path, for the "no slower with every key read" check.
* AI2-THOR 5.0.0: its ``FifoServer``/``WsgiServer`` ``send`` + ``receive`` in a separate venv
  (``/tmp/unirender-bench-ai2thor``, set up by this script with ``ai2thor==5.0.0 Flask==2.1.3 Werkzeug==2.1.1``).
  Werkzeug 2.1 closes every connection, so for it (only) the fake reconnects instead of failing like Unity.
* null floor: a child that writes the same number of bytes per step to a pipe / TCP socket and reads a 64-byte
  reply; the parent reads them into a preallocated buffer. Nothing is parsed.

Rounds are interleaved (every contender once per round) and their samples pooled; prints medians, p90 and ratios.
``--write`` also writes ``benchmarks/results-transport.md`` (keeping its hand-written "## Notes").
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
DEFAULT_OBJECTS = 50  # a FloorPlan kitchen has 50-100 objects
CALLERS = ("frames", "keys")


def steps_for(width: int, quick: bool) -> tuple[int, int]:
    """(warm-up, measured) steps."""
    if width >= 1024:
        return (3, 15) if quick else (5, 30)
    return (10, 60) if quick else (20, 200)


def fake_settings(objects: int) -> dict:
    """The fake player's environment: static frames, realistic metadata encoded once (its own cost is not what is
    measured, and it is the same for every contender)."""
    return {"FAKE_PLAYER_STATIC": "1", "FAKE_PLAYER_FLAVOUR": "Linux64", "FAKE_PLAYER_MISBEHAVE": "",
            "FAKE_PLAYER_OBJECTS": str(objects)}  # fmt: skip


def fake_env(objects: int) -> dict:
    return dict(os.environ, **fake_settings(objects))


def metadata_bytes(width: int, height: int, params: dict, objects: int) -> tuple[int, int]:
    """(msgpack, JSON) size of the fake's metadata for one step of this configuration."""
    from fixtures.fake_player import FakeAgentManager, dumps_metadata, pack_metadata

    manager = FakeAgentManager(["-screen-width", str(width), "-screen-height", str(height)], fake_env(objects))
    manager.dispatch({"action": "Initialize", **params})
    metadata, _images = manager.emission(render=True)
    return len(pack_metadata(metadata)), len(dumps_metadata(metadata).encode())


def payload_bytes(width: int, height: int, params: dict, objects: int, server: str) -> int:
    kinds = ["rgb"] + (["depth", "ids"] if params else [])
    packed, text = metadata_bytes(width, height, params, objects)
    images = sum(len(wire_image(k, width, height, frame=0, index=0)) for k in kinds)
    return images + (packed if server == "fifo" else text)


def read_frames(event, params: dict) -> None:
    """What a frames-only caller does: take the arrays of every enabled modality."""
    assert event.frame is not None
    if params:
        assert event.depth_frame is not None and event.instance_segmentation_frame is not None


def read_every_key(event) -> int:
    """What a metadata-hungry caller does: every agent key, every key of every object."""
    metadata = event.metadata
    count = 0
    for _key, _value in metadata.items():  # items(): 5.0.0's wrapper raises on a plain ["reachablePositions"]
        count += 1
    for obj in metadata["objects"]:
        for _key, _value in obj.items():
            count += 1
    return count


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1e3,
        "n": len(ordered),
    }


# -- unirender ----------------------------------------------------------------------------------------------------
def unirender_runner(cfg: dict) -> None:
    """Child side: one Controller, ``cfg["steps"]`` timed steps as caller ``cfg["caller"]``; prints JSON samples.
    Runs in a child so that the eager contender imports the old tree (its ``PYTHONPATH``)."""
    from unirender import Controller

    os.environ.update(fake_settings(cfg["objects"]))
    params = cfg["params"]
    options = dict(params)
    if cfg.get("hub"):  # the private waitress PlayerHub instead of the fast path (only this tree knows the switch)
        options["wsgi_fast_path"] = False
    with Controller(cfg["exe"], width=cfg["width"], height=cfg["height"], server=cfg["server"],
                    platform="CloudRendering", log_dir=cfg["log_dir"], **options) as c:  # fmt: skip
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
        keys = cfg["caller"] == "keys"
        totals, overheads = [], []
        for i in range(cfg["warmup"] + cfg["steps"]):
            inside[0] = 0.0
            t0 = time.perf_counter()
            event = c.step("MoveAhead")
            read_frames(event, params)
            if keys:
                read_every_key(event)
            elapsed = time.perf_counter() - t0
            if i >= cfg["warmup"]:
                totals.append(elapsed)
                overheads.append(elapsed - inside[0])
        assert event.metadata["screenWidth"] == cfg["width"]
        assert len(event.metadata["objects"]) == max(cfg["objects"], 4)
    print(json.dumps({"samples": totals, "overheads": overheads}))


def bench_unirender(src: Path, exe: str, server: str, width: int, height: int, params: dict, caller: str,
                    args, log_dir: str, hub: bool = False) -> dict:  # fmt: skip
    warmup, steps = steps_for(width, args.quick)
    cfg = {"exe": exe, "server": server, "width": width, "height": height, "params": params, "caller": caller,
           "objects": args.objects, "warmup": warmup, "steps": steps, "log_dir": log_dir, "hub": hub}  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--unirender-runner", json.dumps(cfg)],
                         capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"unirender ({src}) {server} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def export_eager_tree(ref: str | None, into: str) -> tuple[Path, str]:
    """``src/`` as it was before lazy metadata (or at ``ref``), exported with ``git archive``; (path, commit)."""
    if ref is None:
        added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--",
                                "src/unirender/protocol/metadata.py"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()  # fmt: skip
        if not added:
            raise RuntimeError("cannot find the commit that added protocol/metadata.py; pass --eager-ref")
        ref = added[-1] + "^"
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return Path(into) / "src", commit


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
    keys = cfg["caller"] == "keys"
    times = []
    for i in range(cfg["warmup"] + cfg["steps"]):
        t0 = time.perf_counter()
        server.send({"action": "MoveAhead"})
        event = server.receive()
        assert event.frame is not None
        if cfg["params"]:
            assert event.depth_frame is not None and event.instance_segmentation_frame is not None
        if keys:
            metadata = event.metadata
            count = 0
            for _key, _value in metadata.items():
                count += 1
            for obj in metadata["objects"]:
                for _key, _value in obj.items():
                    count += 1
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


def bench_ai2thor(python: Path, exe: str, server: str, width: int, height: int, params: dict, caller: str,
                  args, log_dir: str):  # fmt: skip
    warmup, steps = steps_for(width, args.quick)
    cfg = {"server": server, "width": width, "height": height, "params": params, "warmup": warmup,
           "steps": steps, "exe": exe, "log": os.path.join(log_dir, f"ai2thor-{server}.log"), "caller": caller,
           "env": {**fake_settings(args.objects), "FAKE_PLAYER_TOLERATE_CLOSE": "1"}}  # fmt: skip
    out = subprocess.run([python, "-c", AI2THOR_RUNNER, json.dumps(cfg)], capture_output=True, text=True,
                         timeout=600, cwd=log_dir)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"AI2-THOR {server} run failed:\n{out.stderr[-3000:]}")
    return {"samples": json.loads(out.stdout.strip().splitlines()[-1])}


# -- null floor ---------------------------------------------------------------------------------------------------
def null_peer_with_player_work(kind: str, width: int, height: int, params: dict, objects: int, a: str,
                               b: str) -> None:  # fmt: skip
    """Child side of the second floor: the fake player's own per-step work (dispatch, metadata, msgpack / WWWForm
    encoding, the HTTP head) and the same bytes, length-prefixed instead of framed so the parent parses nothing."""
    from fixtures.fake_player import FakeAgentManager, dumps_metadata, fifo_frames, pack_metadata, wwwform

    manager = FakeAgentManager(["-screen-width", str(width), "-screen-height", str(height)], fake_env(objects))
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
            parts = fifo_frames(0x01, pack_metadata(metadata), images)
        else:
            fields = [("metadata", dumps_metadata(metadata).encode(), False)]
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
    """``player=(width, height, params, objects)``: the peer also does the fake player's work (length-prefixed
    bytes)."""
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
        eager_src, eager_commit = export_eager_tree(args.eager_ref, tmp)
        ai2thor_python = ensure_ai2thor_venv() if args.with_ai2thor else None
        trees = {"lazy": ROOT / "src", "eager": eager_src}
        rows = []
        for label, width, height, params in CONFIGS:
            for server, null_kind in (("fifo", "pipe"), ("wsgi", "tcp")):
                nbytes = payload_bytes(width, height, params, args.objects, server)
                runs: dict[str, list] = {}

                def add(name, result, runs=runs):
                    runs.setdefault(name, []).append(result)

                for _round in range(args.rounds):  # interleaved rounds, pooled
                    for caller in CALLERS:
                        for tree, src in trees.items():
                            add(f"{tree} {caller}", bench_unirender(src, exe, server, width, height, params, caller,
                                                                    args, tmp))  # fmt: skip
                        if server == "wsgi" and caller == "frames":
                            add("hub frames", bench_unirender(ROOT / "src", exe, server, width, height, params,
                                                              caller, args, tmp, hub=True))  # fmt: skip
                        if ai2thor_python:
                            add(f"ai2thor {caller}", bench_ai2thor(ai2thor_python, exe, server, width, height,
                                                                   params, caller, args, tmp))  # fmt: skip
                    add("null", bench_null(null_kind, nbytes, width, args.quick))
                    add("null+player", bench_null(null_kind, nbytes, width, args.quick,
                                                  player=(width, height, params, args.objects)))  # fmt: skip
                    if server == "wsgi":
                        add("bare waitress", bench_waitress_floor(nbytes, width, args.quick))
                result = {name: pooled(samples) for name, samples in runs.items()}
                rows.append((label, server.upper(), nbytes, result))
                print(format_row(rows[-1]), flush=True)
    return report(rows, args, eager_commit)


def ratio(result: dict, a: str, b: str) -> str:
    """median(a) / median(b), or '-' where either was not run."""
    if a not in result or b not in result:
        return "-"
    return f"{result[a]['median_ms'] / result[b]['median_ms']:.2f}x"


def median(result: dict, name: str) -> str:
    return f"{result[name]['median_ms']:.2f}" if name in result else "-"


def format_row(row) -> str:
    label, server, nbytes, result = row
    text = f"{label:24s} {server:4s}"
    for caller in CALLERS:
        text += (f"  [{caller}] lazy {median(result, f'lazy {caller}')} eager {median(result, f'eager {caller}')}"
                 f" ai2thor {median(result, f'ai2thor {caller}')}")  # fmt: skip
    if "hub frames" in result:
        text += f"  [frames] lazy on the waitress hub {median(result, 'hub frames')}"
    text += f"  null {median(result, 'null')} null+player {median(result, 'null+player')}"
    if "bare waitress" in result:
        text += f" bare waitress {median(result, 'bare waitress')}"
    return text


def report(rows, args, eager_commit: str) -> str:
    lines = [
        "# Transport benchmark results",
        "",
        f"`benchmarks/transport.py{' --with-ai2thor' if args.with_ai2thor else ''}{' --quick' if args.quick else ''}"
        f" --rounds {args.rounds} --objects {args.objects}`"
        f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {os.cpu_count()} CPUs (shared with other jobs), "
        f"Python {platform.python_version()}. Eager = this tree at `{eager_commit}` (before lazy metadata).",
        "All columns were measured side by side in one run, rounds interleaved and pooled; compare ratios rather",
        "than absolute numbers. Per-step round trip = action out + full emission (metadata + images) back; the fake",
        f"player answers at once with {args.objects} AI2-THOR-like objects in its metadata.",
        "",
        "Callers: **frames** = `step()` and every enabled frame taken (`frame`, `depth_frame`,",
        "`instance_segmentation_frame`), metadata untouched; **keys** = the same plus every metadata key read (every",
        "agent key, every key of every object). Columns: **lazy** = unirender now; **eager** = unirender before lazy",
        "metadata (decodes every step's metadata); **AI2-THOR 5.0.0** = its own servers and Event; **null** = the",
        "same bytes over a pipe / TCP socket, nothing parsed; **null+player** = the same with the fake player's own",
        "per-step work; **bare waitress** = the same bytes POSTed to a waitress app tuned as the hub is; **ctl** =",
        "unirender's controller overhead (step time minus time inside `transport.send`/`receive`), lazy, frames;",
        "**hub** = lazy, frames, WSGI served on a private waitress `PlayerHub` instead of the fast path",
        "(`Controller(wsgi_fast_path=False)`; lazy WSGI uses the fast path, `transport.direct`).",
        "",
        "| payload | transport | bytes/step | caller | lazy median / p90 ms | eager median ms | AI2-THOR 5.0.0 median"
        " / p90 ms | AI2-THOR / lazy | lazy / eager | null / null+player / bare waitress ms | ctl ms | hub ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, server, nbytes, result in rows:
        floors = " / ".join(median(result, n) for n in ("null", "null+player", "bare waitress"))
        for caller in CALLERS:
            lazy, eager, theirs = f"lazy {caller}", f"eager {caller}", f"ai2thor {caller}"
            ai2 = f"{result[theirs]['median_ms']:.2f} / {result[theirs]['p90_ms']:.2f}" if theirs in result else "not run"
            lines.append(
                f"| {label} | {server} | {nbytes:,} | {caller} | {result[lazy]['median_ms']:.2f} / "
                f"{result[lazy]['p90_ms']:.2f} | {median(result, eager)} | {ai2} | {ratio(result, theirs, lazy)} | "
                f"{ratio(result, lazy, eager)} | {floors} | "
                + (f"{result[lazy]['controller_overhead_ms']:.3f} |" if caller == "frames" else "- |")
                + (f" {median(result, 'hub frames')} |" if caller == "frames" else " - |")
            )
    lines += [
        "",
        "Targets (300x300 rgb+depth+ids): frames: AI2-THOR / lazy >= 3x on FIFO and on WSGI; keys: lazy / eager <= 1.05x.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--unirender-runner":
        unirender_runner(json.loads(sys.argv[2]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--waitress-peer":
        waitress_peer()
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--null-peer":
        kind, nbytes, a, b = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
        if len(sys.argv) > 7 and sys.argv[6] == "--with-player":
            width, height, params, objects = json.loads(sys.argv[7])
            null_peer_with_player_work(kind, width, height, params, objects, a, b)
        else:
            null_peer(kind, nbytes, a, b)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-ai2thor", action="store_true", help="also run AI2-THOR 5.0.0 (sets up its venv)")
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell, samples pooled")
    parser.add_argument("--objects", type=int, default=DEFAULT_OBJECTS, help="objects in the fake's metadata")
    parser.add_argument("--eager-ref", help="git ref of the eager baseline (default: before lazy metadata)")
    parser.add_argument("--only", help="run only configurations whose label contains this (e.g. '300x300 rgb+')")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results-transport.md")
    args = parser.parse_args()
    if args.only:
        CONFIGS[:] = [c for c in CONFIGS if args.only in c[0]]
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
