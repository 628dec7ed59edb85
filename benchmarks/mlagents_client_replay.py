"""The ML-Agents client's CPU per step without the game: a captured answer replayed (issue 49).

One batched step's answer of the reference game (2 agents, camera + 8-float vector) is captured from a
``unirender serve`` process, then answered to every request by a bare socket server in another process, at once or
after a pause (about a game's step). The client (this process: ``RemoteMLAgentsSession.step`` and a trainer's reads
of the frames and the vector ``obs``) does exactly the work it does against the service; what the pause adds is the
cost of waking up cold (caches and branch predictors shared with whatever ran meanwhile).

    .venv/bin/python benchmarks/mlagents_client_replay.py [--sizes 84 512] [--pauses-ms 0 5] [--steps N] [--rounds R]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlagents_service import BEHAVIOR, best_cpu_ms, reference_env, serve  # noqa: E402

_REPLAYER = """
import socket, sys, time
answer, pause = open(sys.argv[1], "rb").read(), float(sys.argv[2])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
pending = b""
while True:
    while b"\\r\\n\\r\\n" not in pending:
        data = conn.recv(65536)
        if not data:
            sys.exit()
        pending += data
    head, _, pending = pending.partition(b"\\r\\n\\r\\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\\r\\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(pending) < length:
        pending += conn.recv(65536)
    pending = pending[length:]
    if pause:
        time.sleep(pause)
    conn.sendall(answer)
"""


def capture(url: str, size: int, path: Path) -> dict:
    """One batched step's answer (head and body, as sent) -> ``path``; returns the session's start info."""
    from unirender.client import Client

    with Client(url) as client:
        session = client.session(reference_env(size))
        try:
            session.step({})
            conn = client._connection
            request = conn.request

            def keep(method, target, headers, body=None):
                head, content = request(method, target, headers, body)
                lines = [f"HTTP/1.1 {head.status} {head.reason}", *(f"{k}: {v}" for k, v in head.headers)]
                path.write_bytes(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + content)
                return head, content

            conn.request = keep
            session.step({})
            del conn.request
            return {**session.info_at_start, "description": session.describe()}
        finally:
            session.stop()


def measure(answer: Path, info: dict, pause_ms: float, steps: int, rounds: int) -> float:
    from unirender.client import Client
    from unirender.client.mlagents import RemoteMLAgentsSession

    replayer = subprocess.Popen([sys.executable, "-c", _REPLAYER, str(answer), str(pause_ms / 1000)],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with Client(f"http://127.0.0.1:{int(replayer.stdout.readline())}") as client:
            session = RemoteMLAgentsSession(client, info)
            rng = np.random.default_rng(0)

            def step() -> None:
                actions = {BEHAVIOR: {"continuous": rng.uniform(-1, 1, (2, 2)).astype(np.float32),
                                      "discrete": rng.integers(0, 3, (2, 1)).astype(np.int32)}}  # fmt: skip
                decision = session.step(actions).decision_steps[BEHAVIOR]
                decision.frames["CameraSensor"], decision.obs[1]

            return best_cpu_ms(step, steps, rounds, warmup=20)
    finally:
        replayer.kill()
        replayer.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 512])
    parser.add_argument("--pauses-ms", type=float, nargs="+", default=[0, 5])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        process, url = serve(Path(tmp), max(args.sizes) ** 2)
        try:
            answers = {size: (Path(tmp) / f"answer{size}", None) for size in args.sizes}
            answers = {size: (path, capture(url, size, path)) for size, (path, _) in answers.items()}
        finally:
            process.terminate(grace=10)
        for size, (path, info) in answers.items():
            for pause in args.pauses_ms:
                rows.append((size, path.stat().st_size, pause, measure(path, info, pause, args.steps, args.rounds)))
    print("| size | answer bytes | pause before each answer | client CPU ms/step |")
    print("|---|---|---|---|")
    for size, nbytes, pause, cpu in rows:
        print(f"| {size}² | {nbytes} | {pause:g} ms | {cpu:.3f} |")


if __name__ == "__main__":
    main()
