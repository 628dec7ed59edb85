"""OpenEnv's WebSocket vs unirender's own service, for the same game and image size, side by side in one run
(issue 50). Target: OpenEnv's path within 1.5x of the service's time per step at 84² and 300².

Two servers on loopback, both started here: ``unirender openenv serve`` (a spec file with the game) and ``unirender
serve`` (its own config). The same game on both, one player per contender, launched before the rounds:

- ``service``: the Python client (``unirender.client.Client``, msgpack, the default), ``session.step(action)``;
- ``openenv png`` / ``openenv array``: openenv-core's own ``EnvClient`` (a subclass with the three conversions, as
  OpenEnv users write one; its ``.sync()`` wrapper, as the docs' example) over ``/ws``, after
  ``reset(include_visual=True, image_format=...)``: base64 PNG (what OpenEnv's Unity environment sends) or raw
  arrays (base64 in JSON; ``image_format="array"``);
- ``openenv array, async client``: the same client's coroutines run on the caller's own event loop (no
  ``.sync()`` wrapper, whose loop thread is a hop per call).

Each step reads what a trainer reads: the image as a uint8 array (decoded on the client for the OpenEnv paths).
Rounds are interleaved (service, png, array, service, ...), the best round kept: the machine is shared, and
the fastest round is the one least disturbed. Then, for AI2-THOR, where an OpenEnv step's time goes, stage by
stage in-process (:func:`breakdown`). Per path:
steps/s, ms per step and its ratio to the service's, bytes on the wire per step (HTTP heads and bodies; WebSocket
messages with their frame headers), client CPU ms per step (this process) and server CPU ms per step (the
server's process, all its threads, not the players it runs), both of the median round.

``--baseline-src DIR`` adds an earlier unirender's OpenEnv server (its ``src`` folder, e.g. ``git archive REV src |
tar -x -C DIR``) and its png and array paths, read as its client read them, to the same interleaved rounds.

    .venv/bin/python benchmarks/openenv.py [--family ai2thor|mlagents] [--sizes 84 300] [--steps N] [--rounds R]
        [--baseline-src DIR/src]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
# This script's folder is sys.path[0], and this script is named openenv: the package of that name comes first
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT / "src"))

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from PIL import Image  # noqa: E402

from unirender._process import ManagedProcess  # noqa: E402
from unirender.client import Client  # noqa: E402
from unirender.openenv import UnirenderAction, UnirenderObservation, UnirenderState  # noqa: E402
from unirender.openenv.images import decode_array, decode_image  # noqa: E402

# Even, as --steps should be: AI2THOR_ACTIONS alternate, so every round starts from the reset's view and sees the
# same two frames (with 5, each round turned the agent a quarter more: the rounds compared different views, and a
# PNG's size and encoding time depend on the view).
WARMUP = 6
AI2THOR_ACTIONS = ["RotateRight", "RotateLeft"]  # alternate so every frame is rendered anew


def environment(family: str, size: int) -> dict:
    if family == "ai2thor":
        return {"executable": "builtin", "width": size, "height": size}
    return {"protocol": "mlagents", "executable": "builtin", "width": size, "height": size, "time_scale": 100}


# -- the service ------------------------------------------------------------------------------------------------
def counting_client(url: str) -> Client:
    """A client that counts the bytes on its loopback connection: ``benchmarks/mlagents_service.py``'s, loaded by
    path (this script takes benchmarks/ off sys.path, see above)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlagents_service", ROOT / "benchmarks" / "mlagents_service.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.counting_client(url)


def start(command: list[str], log: Path, pattern: str, env: dict | None = None) -> tuple[ManagedProcess, str]:
    process = ManagedProcess(command, log_path=str(log), name=Path(log).stem, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.alive():
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.05)  # polling a log file for the announced URL: nothing to wait on
    process.terminate(grace=5)
    raise RuntimeError(log.read_text())


# -- OpenEnv ------------------------------------------------------------------------------------------------------
def ws_frame_bytes(payload: int, masked: bool) -> int:
    """A WebSocket frame's size for a payload (RFC 6455 5.2: 2 bytes, the extended length, the client's mask)."""
    extended = 0 if payload < 126 else 2 if payload < 65536 else 8
    return 2 + extended + (4 if masked else 0) + payload


class OpenEnvBench(EnvClient[UnirenderAction, UnirenderObservation, UnirenderState]):
    """The three conversions, and EnvClient's own send/receive with the bytes counted."""

    wire = 0

    def _step_payload(self, action: UnirenderAction) -> dict:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict) -> StepResult[UnirenderObservation]:
        observation = UnirenderObservation(**payload["observation"], reward=payload.get("reward"),
                                           done=payload.get("done", False))  # fmt: skip
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict) -> UnirenderState:
        return UnirenderState(**payload)

    async def _send(self, message: dict) -> None:
        text = json.dumps(message)
        self.wire += ws_frame_bytes(len(text.encode()), masked=True)
        await self._ws.send(text)

    async def _receive(self) -> dict:
        import asyncio

        raw = await asyncio.wait_for(self._ws.recv(), timeout=self._message_timeout)
        # an ASCII str's length is its UTF-8 size: no 361 KB copy of the message charged to the client's CPU
        size = len(raw) if isinstance(raw, bytes) or raw.isascii() else len(raw.encode())
        self.wire += ws_frame_bytes(size, masked=False)
        return json.loads(raw)


def image_of(observation: UnirenderObservation, stdlib: bool = False) -> np.ndarray:
    """The first image as a uint8 array, as docs/openenv.md's client reads it (``decode_array``,
    ``decode_image``); ``stdlib``: as the client read it before them (the standard library's base64, Pillow)."""
    name = observation.visual_observation_names[0]
    if observation.arrays is not None:
        if stdlib:
            encoded = observation.arrays[name]
            data = base64.b64decode(encoded.data)
            return np.frombuffer(data, dtype=np.dtype(encoded.dtype)).reshape(encoded.shape)
        return decode_array(observation.arrays[name])
    if stdlib:
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(observation.visual_observations[0]))))
    return decode_image(observation.visual_observations[0])


# -- the rounds ---------------------------------------------------------------------------------------------------
class Contender:
    def __init__(self, name: str, step, counter):
        self.name, self.step, self.counter = name, step, counter  # step(i) -> the image as uint8 array
        self.server_pid: int | None = None  # the server process it talks to (its CPU, not its players')


def process_cpu_s(pid: int | None) -> float:
    """A process's CPU seconds so far, all its threads (``/proc/PID/stat`` utime + stime); 0 off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def actions_for(family: str, spec: dict):
    """Step i's action for an OpenEnv client: AI2THOR_ACTIONS alternating, or random ML-Agents values."""
    if family == "ai2thor":
        return lambda i: UnirenderAction(action={"action": AI2THOR_ACTIONS[i % 2]})
    rng = np.random.default_rng(0)
    return lambda i: UnirenderAction(continuous_actions=rng.uniform(-1, 1, spec["continuous_size"]).tolist(),
                                     discrete_actions=[int(rng.integers(0, b)) for b in spec["discrete_branches"]])  # fmt: skip


def service_contender(client: Client, family: str, size: int) -> tuple[Contender, object]:
    session = client.session(environment(family, size))
    if family == "ai2thor":
        def step(i: int) -> np.ndarray:
            return session.step(AI2THOR_ACTIONS[i % 2]).frame
    else:
        behaviors = session.describe()["actions"]["behaviors"]  # the description as a document
        behavior = next(iter(behaviors))
        continuous, branches = behaviors[behavior]["continuous"], behaviors[behavior]["discrete"]
        rng = np.random.default_rng(0)
        event = session.step({})

        def step(i: int) -> np.ndarray:
            nonlocal event
            n = len(event.decision_steps[behavior])
            discrete = np.stack([rng.integers(0, b, n) for b in branches], axis=1).astype(np.int32)
            event = session.step({behavior: {"continuous": rng.uniform(-1, 1, (n, continuous)).astype(np.float32),
                                             "discrete": discrete}})  # fmt: skip
            decision = event.decision_steps[behavior]
            return next(iter(decision.frames.values()))[0]
    return Contender("service (msgpack)", step, client), session


def openenv_contender(url: str, family: str, image_format: str, label: str = "") -> tuple[Contender, OpenEnvBench]:
    client = OpenEnvBench(base_url=url, message_timeout_s=120)
    env = client.sync()
    env.connect()
    env.reset(include_visual=True, image_format=image_format)
    spec = env.state().action_spec
    pick = actions_for(family, spec)

    def step(i: int) -> np.ndarray:
        return image_of(env.step(pick(i)).observation, stdlib=bool(label))

    return Contender(f"openenv {image_format}{label}", step, client), env


def openenv_async_contender(url: str, family: str) -> tuple[Contender, object]:
    """The same client without ``.sync()``: its coroutines run on this thread's loop (no hop to the wrapper's
    loop thread), raw arrays."""
    import asyncio

    loop = asyncio.new_event_loop()
    client = OpenEnvBench(base_url=url, message_timeout_s=120)
    loop.run_until_complete(client.connect())
    loop.run_until_complete(client.reset(include_visual=True, image_format="array"))
    pick = actions_for(family, loop.run_until_complete(client.state()).action_spec)

    def step(i: int) -> np.ndarray:
        return image_of(loop.run_until_complete(client.step(pick(i))).observation)

    class Closer:
        @staticmethod
        def close() -> None:
            try:
                loop.run_until_complete(client.close())
            finally:
                loop.close()

    return Contender("openenv array, async client", step, client), Closer


def run(contender: Contender, steps: int, size: int) -> dict:
    wall = cpu = server = 0.0
    for i in range(WARMUP + steps):
        if i == WARMUP:
            contender.counter.wire, wall, cpu = 0, time.perf_counter(), time.process_time()
            server = process_cpu_s(contender.server_pid)
        image = contender.step(i)
        assert image.dtype == np.uint8 and image.shape[:2] == (size, size), (image.dtype, image.shape)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server = process_cpu_s(contender.server_pid) - server
    return {"steps/s": steps / wall, "ms": 1000 * wall / steps, "cpu_ms": 1000 * cpu / steps,
            "server_cpu_ms": 1000 * server / steps, "wire": contender.counter.wire / steps}  # fmt: skip


def breakdown(size: int, n: int) -> list[tuple[str, float]]:
    """Where an OpenEnv step's time goes, in-process, stage by stage (the median of ``n`` of each, stages
    interleaved): the player's step (a local session: what both paths pay), then what the OpenEnv path adds on
    the server (the image's encoding, the observation model, OpenEnv's serialize_observation and its response's
    JSON) and on the client (JSON parsing, the observation model, the image's decoding)."""
    import statistics

    from openenv.core.env_server.serialization import serialize_observation
    from openenv.core.env_server.types import WSObservationResponse

    from unirender.cluster.local import LocalBackend
    from unirender.openenv.ai2thor import step_metadata
    from unirender.openenv.images import image_fields

    times: dict[str, list[float]] = {}

    def timed(name: str, call):
        start = time.perf_counter()
        value = call()
        times.setdefault(name, []).append(1000 * (time.perf_counter() - start))
        return value

    with LocalBackend() as backend:
        session = backend.create_session({"protocol": "ai2thor", "executable": "builtin", "width": size,
                                          "height": size})  # fmt: skip
        try:
            for i in range(WARMUP + n):
                event = timed("player step (both paths)", lambda i=i: session.step({"action": AI2THOR_ACTIONS[i % 2]}))
                info = timed("the observation's metadata keys (server)", lambda event=event: step_metadata(event))
                for fmt in ("png", "array"):
                    fields = timed(f"{fmt}: encode the image", lambda fmt=fmt, frame=event.frame: image_fields({"rgb": frame}, fmt))
                    obs = timed(f"{fmt}: the observation model", lambda fields=fields, info=info: UnirenderObservation(
                        done=False, reward=None, info=info, action_spec_info={"kind": "named"}, **fields))
                    text = timed(f"{fmt}: OpenEnv's serialize + response JSON", lambda obs=obs: WSObservationResponse(
                        data=serialize_observation(obs)).model_dump_json())
                    payload = timed(f"{fmt}: client json.loads", lambda text=text: json.loads(text))["data"]
                    parsed = timed(f"{fmt}: client observation model", lambda payload=payload: UnirenderObservation(
                        **payload["observation"], reward=None, done=False))
                    timed(f"{fmt}: client decode the image", lambda parsed=parsed: image_of(parsed))
        finally:
            session.stop()
    return [(name, statistics.median(values[WARMUP:])) for name, values in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", choices=["ai2thor", "mlagents"], default="ai2thor")
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 300])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--formats", nargs="+", default=["png", "array"])
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="a src/ folder of an earlier unirender (git archive REV src | tar -x -C DIR): its openenv server "
        "runs beside this one, its png and array paths interleaved with the rest (client decoding as then)",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        config = tmp / "service.yaml"
        config.write_text(yaml.safe_dump({"port": 0, "data_root": str(tmp / "data"),
                                          "limits": {"pixels": max(args.sizes) ** 2, "steps_per_second": 100000}}))
        service, service_url = start([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                                     tmp / "serve.log", r"unirender serving on (http://127\.0\.0\.1:\d+)")
        try:
            for size in args.sizes:
                spec = tmp / f"{args.family}-{size}.yaml"
                spec.write_text(yaml.safe_dump({"environment": environment(args.family, size)}))
                openenv, openenv_url = start(
                    [sys.executable, "-m", "unirender.cli", "openenv", "serve", str(spec), "--port", "0",
                     "--max-sessions", str(len(args.formats) + 1)],
                    tmp / f"openenv-{size}.log", r"on (http://127\.0\.0\.1:\d+)")  # fmt: skip
                opened = []
                baseline = None
                if args.baseline_src:
                    env_vars = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
                    baseline, baseline_url = start(
                        [sys.executable, "-m", "unirender.cli", "openenv", "serve", str(spec), "--port", "0",
                         "--max-sessions", str(len(args.formats))],
                        tmp / f"openenv-baseline-{size}.log", r"on (http://127\.0\.0\.1:\d+)", env=env_vars)  # fmt: skip
                try:
                    client = counting_client(service_url)
                    contender, session = service_contender(client, args.family, size)
                    contender.server_pid = service.pid
                    opened.append(session.stop)
                    contenders = [contender]
                    for image_format in args.formats:
                        contender, env = openenv_contender(openenv_url, args.family, image_format)
                        contender.server_pid = openenv.pid
                        opened.append(env.close)
                        contenders.append(contender)
                    contender, closer = openenv_async_contender(openenv_url, args.family)
                    contender.server_pid = openenv.pid
                    opened.append(closer.close)
                    contenders.append(contender)
                    if baseline is not None:
                        for image_format in args.formats:
                            contender, env = openenv_contender(baseline_url, args.family, image_format, " (before)")
                            contender.server_pid = baseline.pid
                            opened.append(env.close)
                            contenders.append(contender)
                    best: dict[str, dict] = {}
                    cpu: dict[str, list] = {}
                    for _ in range(args.rounds):
                        for c in contenders:
                            result = run(c, args.steps, size)
                            cpu.setdefault(c.name, []).append((result["cpu_ms"], result["server_cpu_ms"]))
                            if c.name not in best or result["ms"] < best[c.name]["ms"]:
                                best[c.name] = result
                    for c in contenders:  # CPU: the median round (steadier than the fastest's, on a shared machine)
                        best[c.name]["cpu_ms"] = statistics.median(v[0] for v in cpu[c.name])
                        best[c.name]["server_cpu_ms"] = statistics.median(v[1] for v in cpu[c.name])
                    base = best[contenders[0].name]["ms"]
                    for c in contenders:
                        rows.append((size, c.name, best[c.name], best[c.name]["ms"] / base))
                finally:
                    for close in reversed(opened):
                        close()
                    openenv.terminate(grace=10)
                    if baseline is not None:
                        baseline.terminate(grace=10)
        finally:
            service.terminate(grace=10)
    if args.family == "ai2thor":
        for size in args.sizes:
            print(f"\nwhere the time goes, {size}², in-process, median of {args.steps * args.rounds // 2} steps:")
            print("| stage | ms |\n|---|---|")
            for name, ms in breakdown(size, args.steps * args.rounds // 2):
                print(f"| {name} | {ms:.3f} |")
    print(f"\n{args.family}, best of {args.rounds} interleaved rounds of {args.steps} steps (CPU: the median round;"
          " server: its process, not the players)")  # fmt: skip
    print("| size | path | steps/s | ms/step | vs service | wire bytes/step | client CPU ms/step | server CPU ms/step |")
    print("|---|---|---|---|---|---|---|---|")
    for size, name, r, ratio in rows:
        print(f"| {size}² | {name} | {r['steps/s']:.1f} | {r['ms']:.2f} | {ratio:.2f}x | {r['wire']:.0f} | "
              f"{r['cpu_ms']:.2f} | {r['server_cpu_ms']:.2f} |")


if __name__ == "__main__":
    main()
