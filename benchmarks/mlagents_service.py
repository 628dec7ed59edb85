"""ML-Agents over the service: today's body vs the batched one (issue 49), side by side in one run.

A ``unirender serve`` process (loopback, its own config) runs the reference game (builtin player, 2 agents,
camera + 8-float vector, EGL, time scale 100); one thin client drives two sessions of it, in interleaved rounds:

- ``today``: what a client of today's body does: JSON list actions (``tolist()``), the per-agent records;
- ``batched``: the client's default: msgpack action arrays, ``Unirender-Body: batched``.

Each step sends random actions and reads what a trainer reads (the uint8 camera frames and the vector ``obs``).
Per size: client CPU per step (``time.process_time`` of this process: the service runs in another), bytes on the
wire per step (response body + request body + both heads as sent), steps/s (wall), and the raw sensor bytes per
step (frames + float32 vectors of the decision agents) for the bytes ratio.

    .venv/bin/python benchmarks/mlagents_service.py [--sizes 84 512] [--steps N] [--rounds R]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from unirender import http_format  # noqa: E402
from unirender._process import ManagedProcess  # noqa: E402
from unirender.client import Client  # noqa: E402

BEHAVIOR = "ReachTarget?team=0"
WARMUP = 5


class CountingClient(Client):
    """Counts the bytes of each request and response on its loopback connection (bodies and heads as sent)."""

    wire = 0

    def _direct_request(self, method, path, data, headers, params):
        resp = super()._direct_request(method, path, data, headers, params)
        sent = {**self._default_headers, **headers}
        request_head = len(f"{method} {path} HTTP/1.1\r\nHost: {self.url}\r\n") + sum(
            len(k) + len(str(v)) + 4 for k, v in sent.items()) + 2 + (len(str(len(data))) + 18 if data else 0)
        response_head = 17 + sum(len(k) + len(v) + 4 for k, v in resp.headers.items()) + 2
        self.wire += request_head + len(data or b"") + response_head + len(resp.content)
        return resp


def serve(tmp: Path, pixels: int) -> tuple[ManagedProcess, str]:
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


def run(session, client: CountingClient, steps: int, rng) -> dict:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 512])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        process, url = serve(Path(tmp), max(args.sizes) ** 2)
        try:
            for size in args.sizes:
                env = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": size,
                       "height": size, "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"}}  # fmt: skip
                best: dict[str, dict] = {}
                with CountingClient(url) as client:
                    today, batched = client.session(env), client.session(env)
                    today.batched, today.request_format = False, http_format.JSON  # today's client
                    try:
                        for r in range(args.rounds):
                            for name, session in (("today", today), ("batched", batched)):
                                result = run(session, client, args.steps, np.random.default_rng(r))
                                if name not in best or result["cpu_ms"] < best[name]["cpu_ms"]:
                                    best[name] = result
                    finally:
                        today.stop()
                        batched.stop()
                for name, result in best.items():
                    rows.append((size, name, result))
        finally:
            process.terminate(grace=10)
    print("| size | body | client CPU ms/step | steps/s | wire bytes/step | raw sensor bytes/step | wire/raw |")
    print("|---|---|---|---|---|---|---|")
    for size, name, r in rows:
        print(f"| {size}² | {name} | {r['cpu_ms']:.3f} | {r['steps/s']:.1f} | {r['wire']:.0f} | {r['raw']:.0f} | "
              f"{r['wire'] / r['raw']:.3f} |")


if __name__ == "__main__":
    main()
