"""ML-Agents benchmark: ``MLAgentsController`` vs mlagents-envs' ``UnityEnvironment``, 0.28.0 (Release 19) and 1.1.0
(Release 22, the current one), side by side in one run, all driving the same reference player (``unirender-player``
launched as a Unity build: ReachTarget, 2 agents, camera + 8-float vector observation, EGL renderer, time scale 100
so real-time pacing never waits). The player forces no package, so each client gets the game its generation
decodes (0.28: HWC, 1.1 and unirender: CHW); the rendering and the PNG bytes are the same.

    .venv/bin/python benchmarks/mlagents.py [--steps N] [--write]

Per size (84x84 and 512x512, PNG camera), per client, best of ``--rounds`` interleaved rounds: steps/s (wall) and
the client's CPU time per step (``time.process_time`` of the client process: its gRPC threads, message parsing,
image decoding, actions). Every step each client reads what a trainer reads: unirender the uint8 frames + vector
obs ("frames"), and also, in a second run, mlagents-envs' float view (``obs``, /255) for a like-for-like
comparison. Then 1024x1024 with an uncompressed camera (12 MiB of floats per agent): unirender delivers it,
mlagents-envs' 4 MiB limit refuses it.

mlagents-envs runs in its own venvs (``tests/mlagents/mlagents_envs_venv.py``, built once, need PyPI).
``--write`` writes ``benchmarks/results-mlagents.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "mlagents"))
sys.path.insert(0, str(ROOT / "src"))

from mlagents_envs_venv import VENVS, ensure_venv, write_player_launcher  # noqa: E402

from unirender.mlagents import MLAgentsController  # noqa: E402

WARMUP = 10
DRIVER = Path(__file__).with_name("mlagents_envs_driver.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_unirender(size: int, steps: int, read: str, env: dict) -> dict:
    rng = np.random.default_rng(0)
    try:
        with MLAgentsController("builtin", platform="EGL", width=size, height=size, time_scale=100.0,
                                timeout=60, env=env) as c:  # fmt: skip
            event = c.reset()
            spec = next(iter(c.behavior_specs.values())).action_spec
            wall = cpu = 0.0
            for i in range(WARMUP + steps):
                if i == WARMUP:
                    wall, cpu = time.perf_counter(), time.process_time()
                decision, _ = event.steps()
                event = c.step(spec.random(len(decision), rng))
                decision, _ = event.steps()
                if read == "frames":
                    _ = decision.frames["CameraSensor"], decision.obs[1]
                else:
                    _ = decision.obs[0], decision.obs[1]
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            shape = list(decision.frames["CameraSensor"].shape)
        return {"steps": steps, "wall_s": wall, "cpu_s": cpu, "shape": shape}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def run_mlagents_envs(python: Path, build: Path, size: int, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), str(DRIVER), str(build), str(free_port()), str(steps), str(size), str(size)],
                          capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"driver exited {done.returncode}: {done.stderr[-300:]}"}
    return json.loads(lines[-1])


OURS = ("unirender (uint8 frames)", "unirender (float obs)")
THEIRS = {version: venv.label for version, venv in VENVS.items()}  # "0.28": "mlagents-envs 0.28.0", ...


def best_run(results: list[dict]) -> dict:
    good = [r for r in results if "error" not in r]
    return min(good, key=lambda r: r["cpu_s"] / r["steps"]) if good else results[0]


def per_step(r: dict) -> tuple[float, float]:
    return r["steps"] / r["wall_s"], 1000.0 * r["cpu_s"] / r["steps"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300, help="timed steps at 84x84 (a third of it at 512x512)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each client counts")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    pythons = {version: ensure_venv(version) for version in THEIRS}
    rows, lines = [], []
    with tempfile.TemporaryDirectory(prefix="unirender-bench-mlagents-") as tmp:
        png_env = {"UNIRENDER_MLAGENTS_AGENTS": "2", "UNIRENDER_PLAYER_BACKEND": "egl"}
        build = write_player_launcher(Path(tmp), "ReachTarget.x86_64", png_env)
        for size, steps in ((84, args.steps), (512, max(30, args.steps // 3))):
            # Rounds interleave the clients; the best round of each counts (other load on a shared machine only
            # ever adds time, so the minimum is the cleanest estimate of each client's own cost).
            runs: dict[str, list[dict]] = {label: [] for label in (*OURS, *THEIRS.values())}
            for _ in range(args.rounds):
                runs[OURS[0]].append(run_unirender(size, steps, "frames", png_env))
                runs[OURS[1]].append(run_unirender(size, steps, "obs", png_env))
                for version, label in THEIRS.items():
                    runs[label].append(run_mlagents_envs(pythons[version], build.with_suffix(""), size, steps))
            best = {label: best_run(results) for label, results in runs.items()}
            for label, r in best.items():
                if "error" in r:
                    rows.append((f"{size}x{size}", label, "-", "-", *(["-"] * len(THEIRS)), r["error"]))
                    continue
                sps, cpu = per_step(r)
                ratios = []
                for theirs in THEIRS.values():
                    other = best[theirs]
                    ratio = per_step(other)[1] / cpu if "error" not in other else float("nan")
                    ratios.append(f"{ratio:.2f}x cheaper" if label in OURS else f"{ratio:.2f}x")
                rows.append((f"{size}x{size}", label, f"{sps:.0f}", f"{cpu:.2f}", *ratios, ""))
            for row in rows[-len(best):]:
                print(" | ".join(row), flush=True)
        raw_env = {**png_env, "UNIRENDER_MLAGENTS_CAMERA_COMPRESSION": "none"}
        raw_build = write_player_launcher(Path(tmp), "RawTarget.x86_64", raw_env)
        ours = run_unirender(1024, 3, "frames", raw_env)
        ours_text = f"delivered {ours['shape']} uint8 frames" if "error" not in ours else ours["error"]
        lines.append(f"- 1024x1024 uncompressed camera, 2 agents: unirender {ours_text}")
        for version, label in THEIRS.items():
            theirs = run_mlagents_envs(pythons[version], raw_build.with_suffix(""), 1024, 3)
            theirs_text = theirs.get("error") or f"delivered {theirs['shape']}"
            if "error" in theirs:  # the player quits when its message is refused, as Unity does: say why
                theirs_text += " (the player was refused: gRPC RESOURCE_EXHAUSTED above the 4 MiB default)"
            lines.append(f"- the same with {label}: {theirs_text}")
        print("\n".join(lines))
    columns = "".join(f" vs {label} |" for label in THEIRS.values())
    header = f"| size | client | steps/s | client CPU ms/step |{columns} note |\n|---|---|---|---|{'---|' * len(THEIRS)}---|\n"
    table = header + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    if args.write:
        stamp = time.strftime("%Y-%m-%d")
        text = (f"# ML-Agents benchmark ({stamp}, {platform.machine()}, {os.cpu_count()} CPUs, Mesa llvmpipe EGL)\n\n"
                "`benchmarks/mlagents.py`: same reference player (2 agents, camera + 8 floats, time scale 100), "
                f"side by side in one run, best of {args.rounds} interleaved rounds, {args.steps} steps at 84x84 and "
                f"{max(30, args.steps // 3)} at 512x512.\n\n" + table + "\n" + "\n".join(lines) + "\n")  # fmt: skip
        Path(__file__).with_name("results-mlagents.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
