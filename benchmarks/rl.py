"""RL benchmark: env-only steps/s through Stable-Baselines3 vector envs, measured side by side in one run.

Contenders, each for 1, 2 and 4 envs on the reference player (``observations="rgb"``, random actions, no
learning), all built before measuring and stepped in interleaved rounds so that they see the same load:

- ``sb3 path``: ``unirender.gym.sb3.make_vec_env`` (one ``UnityVectorEnv``, threads, under ``SB3VecEnv`` and
  ``VecMonitor``);
- ``DummyVecEnv``: SB3's ``DummyVecEnv`` over ``UnityEnv`` (``Monitor`` per env, stepped one after another);
- ``SubprocVecEnv`` (``--subproc``): SB3's worker processes, one ``UnityEnv`` each.

Also the resident memory each contender adds: this process's growth is not separable per contender, so the
players' RSS (children) and, for SubprocVecEnv, the workers' RSS are read from /proc.

Targets (issue 17): the SB3 path at least as fast as DummyVecEnv; 4 envs >= 1.5x one env on 2 cores.
Writes benchmarks/results-rl.md. Usage:
    .venv/bin/python benchmarks/rl.py [--size 64] [--steps 100] [--rounds 5] [--envs 1,2,4] [--subproc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from unirender.gym.sb3 import make_vec_env

HERE = Path(__file__).resolve().parent
ACTIONS = ["RotateRight", "RotateLeft", "MoveAhead"]


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(c) for t in tasks for c in (t / "children").read_text().split()]
    except OSError:
        return []


def build(kind: str, n: int, player: dict):
    cls = {"sb3 path": None, "DummyVecEnv": DummyVecEnv, "SubprocVecEnv": SubprocVecEnv}[kind]
    return make_vec_env(
        n, player, vec_env_cls=cls, observations="rgb", actions=ACTIONS, max_episode_steps=50, seed=0
    )


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def memory(kind: str, venv, before: set[int]) -> dict:
    """MiB: the players started for this contender, and its worker processes (SubprocVecEnv: they are children
    of multiprocessing's forkserver, not of this process, so they are taken from the VecEnv itself)."""
    if kind == "SubprocVecEnv":
        workers = [process.pid for process in venv.processes]
        players = [p for w in workers for p in descendants(w)]
    else:
        workers, players = [], [p for p in descendants(os.getpid()) if p not in before]
    return {
        "players": sum(rss_mib(p) for p in players),
        "workers": sum(rss_mib(p) for p in workers),
        "n_players": len(players),
        "n_workers": len(workers),
        "pids": players + workers,
    }


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def measure(
    venv, n: int, steps: int, rng: np.random.Generator, others: list[int]
) -> tuple[float, float, float]:
    """(env steps/s, CPU ms per env step in this process, in ``others`` (players, workers))."""
    actions = rng.integers(len(ACTIONS), size=(steps, n))
    own, theirs = time.process_time(), sum(cpu_seconds(p) for p in others)
    start = time.perf_counter()
    for a in actions:
        venv.step(a)
    elapsed = time.perf_counter() - start
    own, theirs = time.process_time() - own, sum(cpu_seconds(p) for p in others) - theirs
    return n * steps / elapsed, own * 1000 / (n * steps), theirs * 1000 / (n * steps)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="vector steps per contender per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--envs", default="1,2,4")
    parser.add_argument(
        "--subproc", action="store_true", help="also SubprocVecEnv (a worker process per env)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results-rl.md")
    args = parser.parse_args()
    player = {
        "executable": "builtin",
        "width": args.size,
        "height": args.size,
        "platform": "EGL",
        "server": "fifo",
    }
    kinds = ["sb3 path", "DummyVecEnv"] + (["SubprocVecEnv"] if args.subproc else [])
    counts = [int(n) for n in args.envs.split(",")]

    contenders: dict[tuple[str, int], object] = {}
    mem: dict[tuple[str, int], dict] = {}
    rates: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, int], list[tuple[float, float]]] = {}
    rss_start = rss_mib(os.getpid())
    try:
        for n in counts:
            for kind in kinds:
                before = set(descendants(os.getpid()))
                venv = build(kind, n, player)
                contenders[kind, n] = venv
                venv.reset()
                mem[kind, n] = memory(kind, venv, before)
                rates[kind, n], cpu[kind, n] = [], []
        rss_all = rss_mib(os.getpid())
        rng = np.random.default_rng(0)
        for key, venv in contenders.items():  # warm-up: first frames, lazy imports
            measure(venv, key[1], 10, rng, mem[key]["pids"])
        for r in range(args.rounds):
            # Interleaved, order rotated each round: every contender sees the same background load.
            keys = list(contenders)
            keys = keys[r % len(keys) :] + keys[: r % len(keys)]
            for key in keys:
                rate, own, theirs = measure(contenders[key], key[1], args.steps, rng, mem[key]["pids"])
                rates[key].append(rate)
                cpu[key].append((own, theirs))
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(f"{k} x{n} {rates[k, n][-1]:.0f}" for k, n in contenders),
                flush=True,
            )
    finally:
        for venv in contenders.values():
            venv.close()

    median = {key: statistics.median(v) for key, v in rates.items()}
    lines = [
        "# RL benchmark: env-only steps/s through SB3 vector envs",
        "",
        f"`benchmarks/rl.py --size {args.size} --steps {args.steps} --rounds {args.rounds} --envs {args.envs}"
        f"{' --subproc' if args.subproc else ''}`; reference player on EGL (Mesa llvmpipe), {args.size}x{args.size}"
        f" rgb, random actions, {os.cpu_count()} CPU cores (shared with other work while measuring). Steps/s count"
        " env steps (vector steps x envs), median of the rounds; contenders interleaved.",
        "",
        "| envs | " + " | ".join(f"{k} steps/s" for k in kinds) + " | sb3 path / DummyVecEnv |",
        "|---|" + "---|" * (len(kinds) + 1),
    ]
    for n in counts:
        cells = [f"{median[k, n]:.0f} ({min(rates[k, n]):.0f}-{max(rates[k, n]):.0f})" for k in kinds]
        lines.append(
            f"| {n} | " + " | ".join(cells) + f" | {median['sb3 path', n] / median['DummyVecEnv', n]:.2f}x |"
        )
    lines += ["", "Scaling against one env of the same kind:", ""]
    for k in kinds:
        if 1 in counts:
            lines.append(
                f"- {k}: "
                + ", ".join(f"{n} envs {median[k, n] / median[k, 1]:.2f}x" for n in counts if n != 1)
            )
    lines += [
        "",
        "CPU per env step (ms, median of the rounds): this process (Python; for threads, mostly under the GIL) and"
        " the contender's players and workers:",
        "",
        "| contender | this process | players (+ workers) |",
        "|---|---|---|",
    ]
    for key, values in cpu.items():
        own = statistics.median(v[0] for v in values)
        theirs = statistics.median(v[1] for v in values)
        lines.append(f"| {key[0]} x{key[1]} | {own:.2f} | {theirs:.2f} |")
    lines += [
        "",
        "Resident memory added (MiB, /proc VmRSS):",
        "",
        "| contender | players | SubprocVecEnv workers | per env |",
        "|---|---|---|---|",
    ]
    for (k, n), m in mem.items():
        per_env = (m["players"] + m["workers"]) / n
        lines.append(
            f"| {k} x{n} | {m['players']:.0f} ({m['n_players']}) | {m['workers']:.0f} ({m['n_workers']}) "
            f"| {per_env:.0f} |"
        )
    lines += [
        "",
        f"This process: {rss_start:.0f} MiB after imports (torch included), {rss_all:.0f} MiB with every "
        "contender built.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
