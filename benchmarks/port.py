"""What the simulator port costs per step: ``Controller.step()``, ``MLAgentsController.step()`` and a local
session's ``step()``, side by side with the tree before the port (issue 22's target: at most 5 us a step).

    .venv/bin/python benchmarks/port.py [--before REF] [--rounds N] [--steps N]

* Two trees: this one and ``REF`` (default: the last commit before the port, ``40befe1``), exported with
  ``git archive`` into a temp dir; each measurement is a child process with that tree first on ``PYTHONPATH``.
* AI2-THOR: ``Controller(fake player, 64x64, FIFO).step("MoveAhead")`` with the fake player answering at once
  (``FAKE_PLAYER_STATIC``), so the step is our code and the pipe; and the same through
  ``LocalBackend().create_session(...).step()``.
* ML-Agents: ``MLAgentsController("builtin", 16x16).step()`` of the reference game (its render is part of each
  step: the diff, not the level, is the figure).
* Rounds interleave the trees (before, after, after, before, ...); per-step times are the median of each child's
  steps; the printed diff is the median over rounds of (after - before), with the spread of the same tree
  measured twice in a round as the noise floor.
* Also counted, deterministically: Python function calls per step (``sys.setprofile``) in each tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "40befe1"

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.environ["BENCH_ROOT"], "tests"))
kind, steps = sys.argv[1], int(sys.argv[2])
count_calls = os.environ.get("BENCH_COUNT") == "1"

def measure(step):
    for _ in range(50):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
    calls = 0
    if count_calls:
        counter = [0]
        def prof(frame, event, arg):
            if event in ("call", "c_call"):
                counter[0] += 1
        sys.setprofile(prof); step(); sys.setprofile(None)
        calls = counter[0]
    return statistics.median(times) * 1e6, calls

if kind in ("controller", "session"):
    from fixtures import write_fake_player_executable
    import tempfile
    exe = write_fake_player_executable(tempfile.mkdtemp())
    os.environ.update({"FAKE_PLAYER_STATIC": "1", "FAKE_PLAYER_FLAVOUR": "Linux64", "FAKE_PLAYER_MISBEHAVE": ""})
    from unirender import Controller
    if kind == "controller":
        with Controller(exe, width=64, height=64, server="fifo") as c:
            out = measure(lambda: c.step("MoveAhead"))
    else:
        from unirender.cluster import create_backend
        with create_backend("local") as b, b.create_session({"executable": exe, "width": 64, "height": 64}) as s:
            out = measure(lambda: s.step("MoveAhead"))
else:
    from unirender.mlagents import MLAgentsController
    with MLAgentsController("builtin", width=16, height=16, time_scale=100, platform="EGL") as c:
        c.reset()
        out = measure(lambda: c.step())
print(json.dumps(out))
"""


def export(ref: str, into: Path) -> Path:
    archive = into / "tree.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref, "src", "tests"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def run(tree: Path, kind: str, steps: int, count: bool = False) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "BENCH_ROOT": str(tree),
           "BENCH_COUNT": "1" if count else "0", "GRPC_ENABLE_FORK_SUPPORT": "false"}  # fmt: skip
    env.pop("UNIRENDER_MLAGENTS_PACKAGE_VERSION", None)
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(steps)], env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{kind} in {tree} failed:\n{out.stderr[-3000:]}")
    us, calls = json.loads(out.stdout.strip().splitlines()[-1])
    return us, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="unirender-bench-port-") as tmp:
        before = export(args.before, Path(tmp))
        trees = {"before": before, "after": ROOT}
        print(f"before = {args.before}, after = working tree; {args.rounds} rounds x {args.steps} steps")
        for kind, steps in (("controller", args.steps), ("session", args.steps), ("mlagents", args.steps // 4)):
            calls = {name: run(tree, kind, 60, count=True)[1] for name, tree in trees.items()}
            diffs, noise, levels = [], [], {"before": [], "after": []}
            for r in range(args.rounds):
                order = ("before", "after", "after", "before") if r % 2 == 0 else ("after", "before", "before", "after")
                got: dict[str, list[float]] = {"before": [], "after": []}
                for name in order:
                    got[name].append(run(trees[name], kind, steps)[0])
                for name in got:
                    levels[name] += got[name]
                diffs.append(statistics.mean(got["after"]) - statistics.mean(got["before"]))
                noise.append(abs(got["before"][0] - got["before"][1]))
            print(f"{kind:>10}: before {statistics.median(levels['before']):8.1f} us  after "
                  f"{statistics.median(levels['after']):8.1f} us  diff (median of rounds) "
                  f"{statistics.median(diffs):+6.1f} us  same-tree noise {statistics.median(noise):5.1f} us  "
                  f"calls/step before {calls['before']} after {calls['after']}")


if __name__ == "__main__":
    main()
