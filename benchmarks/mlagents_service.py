"""ML-Agents over the service: today's body vs the batched one (issue 49), side by side in one run.

A ``unirender serve`` process (loopback, its own config) runs the reference game (builtin player, 2 agents,
camera + 8-float vector, EGL, time scale 100); client processes drive one session of it each, in interleaved
rounds:

- ``today``: what a client of today's body does: JSON list actions (``tolist()``), the per-agent records;
- ``batched``: the client's default: msgpack action arrays, ``Unirender-Body: batched``.

``--baseline-src DIR`` (the ``src`` of another checkout, e.g. a worktree at the commit before a change) adds the
same two clients running that tree's client code against the same service, so that before and after are measured
in one run. Each client is a process of its own (``--worker``), so its CPU is its own.

Each step sends random actions and reads what a trainer reads (the uint8 camera frames and the vector ``obs``).
Per size: client CPU per step (``time.process_time`` of the client's process), bytes on the wire per step
(response body + request body + both heads as sent), steps/s (wall), and the raw sensor bytes per step (frames +
float32 vectors of the decision agents) for the bytes ratio.

    .venv/bin/python benchmarks/mlagents_service.py [--sizes 84 512] [--steps N] [--rounds R] [--baseline-src DIR]

Last, per size, the floor under any socket transport: a bare loopback read of as many bytes (one 1-byte request,
a fresh buffer, no HTTP), the kernel's copy and the syscalls.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
BEHAVIOR = "ReachTarget?team=0"
WARMUP = 5


def reference_env(size: int) -> dict:
    """The reference game's environment at ``size`` x ``size`` (builtin player, 2 agents, EGL, time scale 100)."""
    return {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": size, "height": size,
            "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"}}  # fmt: skip


def best_cpu_ms(step, steps: int, rounds: int, warmup: int = WARMUP) -> float:
    """``step()`` run ``warmup`` times, then ``rounds`` rounds of ``steps`` calls: the best round's CPU ms per call
    (``time.process_time``: this process's own)."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(rounds):
        cpu = time.process_time()
        for _ in range(steps):
            step()
        best = min(best, 1000 * (time.process_time() - cpu) / steps)
    return best


def counting_client(url: str):
    """A client that counts the bytes of each request and response on its loopback connection (bodies and heads
    as sent)."""
    from unirender.client import Client

    class CountingClient(Client):
        wire = 0

        def _direct_request(self, method, path, data, headers, params):
            resp = super()._direct_request(method, path, data, headers, params)
            sent = {**self._default_headers, **headers}
            request_head = len(f"{method} {path} HTTP/1.1\r\nHost: {self.url}\r\n") + sum(
                len(k) + len(str(v)) + 4 for k, v in sent.items()) + 2 + (len(str(len(data))) + 18 if data else 0)
            response_head = 17 + sum(len(k) + len(v) + 4 for k, v in resp.headers.items()) + 2
            self.wire += request_head + len(data or b"") + response_head + len(resp.content)
            return resp

    return CountingClient(url)


def serve(tmp: Path, pixels: int):
    from unirender._process import ManagedProcess

    config = tmp / "service.yaml"
    config.write_text(yaml.safe_dump({"port": 0, "data_root": str(tmp / "data"), "limits": {"pixels": pixels}}))
    log = tmp / "serve.log"
    process = ManagedProcess([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                             log_path=str(log), name="unirender-serve")  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.alive():
        found = re.search(r"unirender serving on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.05)
    process.terminate(grace=5)
    raise RuntimeError(log.read_text())


def run(session, client, steps: int, rng) -> dict:
    event = session.step({})
    wall = cpu = 0.0
    raw = 0
    for i in range(WARMUP + steps):
        if i == WARMUP:
            client.wire, wall, cpu = 0, time.perf_counter(), time.process_time()
        n = len(event.decision_steps[BEHAVIOR])
        actions = {BEHAVIOR: {"continuous": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                              "discrete": rng.integers(0, 3, (n, 1)).astype(np.int32)}}  # fmt: skip
        event = session.step(actions)
        decision = event.decision_steps[BEHAVIOR]
        frames, vector = decision.frames["CameraSensor"], decision.obs[1]
        if i >= WARMUP:
            raw += frames.nbytes + vector.astype(np.float32, copy=False).nbytes
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"steps/s": steps / wall, "cpu_ms": 1000 * cpu / steps, "wire": client.wire / steps, "raw": raw / steps}


_SENDER = """
import socket, sys
blob = b"x" * int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while conn.recv(1):
    conn.sendall(blob)
"""


def socket_floor(nbytes: int, steps: int, rounds: int) -> float:
    """The floor under any client of a socket transport: CPU ms for one 1-byte request and a read of ``nbytes``
    over loopback TCP into a fresh buffer (the kernel's copy and the syscalls, no HTTP, no Python beyond the
    loop), best of ``rounds``."""
    import socket

    sender = subprocess.Popen([sys.executable, "-c", _SENDER, str(nbytes)], stdout=subprocess.PIPE, text=True)
    try:
        with socket.create_connection(("127.0.0.1", int(sender.stdout.readline()))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def read() -> None:
                sock.sendall(b"g")
                view, got = memoryview(bytearray(nbytes)), 0
                while got < nbytes:
                    got += sock.recv_into(view[got:])

            return best_cpu_ms(read, steps, rounds)
    finally:
        sender.kill()
        sender.wait()


def worker(url: str, size: int, body: str) -> None:
    """One client process: a session of the reference game; ``run STEPS SEED`` on stdin -> one JSON result line;
    end of input stops the session."""
    from unirender import http_format

    with counting_client(url) as client:
        session = client.session(reference_env(size))
        try:
            if body == "today":  # today's client: JSON list actions, the per-agent records
                session.batched, session.request_format = False, http_format.JSON
            print("ready", flush=True)
            for line in sys.stdin:
                steps, seed = map(int, line.split()[1:])
                print(json.dumps(run(session, client, steps, np.random.default_rng(seed))), flush=True)
        finally:
            session.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 512])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src: its client measured alongside")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "SIZE", "BODY"), help=argparse.SUPPRESS)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    if args.worker:
        url, size, body = args.worker
        worker(url, int(size), body)
        return
    trees = [("", ROOT / "src")] + ([(" (baseline)", args.baseline_src)] if args.baseline_src else [])
    rows, floors = [], []
    with tempfile.TemporaryDirectory() as tmp:
        process, url = serve(Path(tmp), max(args.sizes) ** 2)
        try:
            for size in args.sizes:
                workers: dict[str, subprocess.Popen] = {}
                best: dict[str, dict] = {}
                try:
                    for tag, src in trees:
                        for body in ("today", "batched"):
                            workers[body + tag] = subprocess.Popen(
                                [sys.executable, __file__, "--src", str(src), "--worker", url, str(size), body],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
                    for name, w in workers.items():
                        if w.stdout.readline().strip() != "ready":
                            raise RuntimeError(f"client {name} did not start")
                    for r in range(args.rounds):
                        for name, w in workers.items():
                            w.stdin.write(f"run {args.steps} {r}\n")
                            w.stdin.flush()
                            result = json.loads(w.stdout.readline())
                            if name not in best or result["cpu_ms"] < best[name]["cpu_ms"]:
                                best[name] = result
                finally:
                    for w in workers.values():
                        w.stdin.close()  # the worker stops its session and exits
                    for w in workers.values():
                        try:
                            w.wait(timeout=60)
                        except subprocess.TimeoutExpired:
                            w.kill()
                            w.wait()
                rows += [(size, name, result) for name, result in best.items()]
                wire = best["batched"]["wire"]
                floors.append((size, wire, socket_floor(int(wire), args.steps, args.rounds)))
        finally:
            process.terminate(grace=10)
    print("| size | body (client) | client CPU ms/step | steps/s | wire bytes/step | raw sensor bytes/step | wire/raw |")
    print("|---|---|---|---|---|---|---|")
    for size, name, r in rows:
        print(f"| {size}² | {name} | {r['cpu_ms']:.3f} | {r['steps/s']:.1f} | {r['wire']:.0f} | {r['raw']:.0f} | "
              f"{r['wire'] / r['raw']:.3f} |")
    print()
    print("| size | bare loopback read of the batched step's bytes (no HTTP): client CPU ms/read |")
    print("|---|---|")
    for size, wire, floor in floors:
        print(f"| {size}² ({wire:.0f} bytes) | {floor:.3f} |")


if __name__ == "__main__":
    main()
