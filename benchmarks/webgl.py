"""The webgl family in headless Chromium on SwiftShader (issue 37): boot time to the first frame, steps/s at 300²
per frame-readback path, what each readback costs inside the page, and memory per tab.

    PYTHONPATH=src .venv/bin/python benchmarks/webgl.py [--steps N] [--rounds N] [--no-unity]

* Games: the test game (tests/fixtures/webgl_game: WebGL2 clears, a tiny wasm) and, unless ``--no-unity``, a
  real Unity 2020.3 runtime, ``@dcl/unity-renderer@1.0.10896`` from the npm registry (cached outside the repo,
  tests/fixtures/unity_webgl.py), both at 300x300, one frame per step.
* Readback paths, interleaved in rounds on the same controller (so the same page, the same load): ``pixels``
  (``gl.readPixels`` + base64 in the page), ``png`` (``canvas.toDataURL``), ``screenshot`` (DevTools
  ``Page.captureScreenshot``); and ``none`` (the step's frames and emitted JSON, no frame), the floor. Steps/s
  is the median over rounds; the in-page cost of a readback is timed in the page (``performance`` is the
  virtual clock there, so ``Date.now`` over 20 calls).
* Memory: the sum of PSS (``/proc/<pid>/smaps_rollup``) over the browser's process group after the steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures import unity_webgl  # noqa: E402
from fixtures.webgl import ACTIONS, GAME  # noqa: E402
from unirender.webgl import WebGLController  # noqa: E402
from unirender.webgl.browser import group_members  # noqa: E402

PATHS = ("none", "pixels", "png", "screenshot")


def pss_mib(pgid: int) -> float:
    total = 0
    for pid in group_members(pgid):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def steps_per_s(controller: WebGLController, path: str, steps: int, action) -> float:
    if path == "none":
        started = time.perf_counter()
        for _ in range(steps):
            controller.evaluate("unirender.step(1, 'none')")
        return steps / (time.perf_counter() - started)
    controller.readback = path
    started = time.perf_counter()
    for _ in range(steps):
        controller.step(action)
    return steps / (time.perf_counter() - started)


def in_page_ms(controller: WebGLController, what: str) -> float:
    expression = {"tick": "unirender.tick(1)", "pixels": "unirender.readPixels()",
                  "png": "unirender.readPNG()"}[what]
    return controller.evaluate(
        f"(() => {{ const t = Date.now(); for (let i = 0; i < 20; i++) {expression}; return (Date.now() - t) / 20; }})()")


def run(name: str, make, steps: int, rounds: int, action) -> dict:
    started = time.perf_counter()
    controller = make()
    try:
        controller.reset()
        first_frame_s = time.perf_counter() - started
        rates: dict[str, list[float]] = {p: [] for p in PATHS}
        for round_index in range(rounds):
            order = PATHS if round_index % 2 == 0 else tuple(reversed(PATHS))
            for path in order:
                rates[path].append(steps_per_s(controller, path, steps, action))
        page = {what: in_page_ms(controller, what) for what in ("tick", "pixels", "png")}
        memory = pss_mib(controller.process.pid)
        return {"name": name, "first_frame_s": first_frame_s, "boot_s": controller.boot_seconds,
                "rates": {p: statistics.median(v) for p, v in rates.items()}, "page_ms": page, "pss_mib": memory,
                "renderer": controller.renderer}
    finally:
        controller.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-unity", action="store_true")
    args = parser.parse_args()
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "unirender-bench-webgl"
    results = [run("test game", lambda: WebGLController(GAME, 300, 300, actions=ACTIONS, log_dir=log_dir),
                   args.steps, args.rounds, "right")]
    if not args.no_unity:
        build = unity_webgl.install()
        results.append(run(
            "Unity (DCL renderer)",
            lambda: WebGLController(build, 300, 300, actions=unity_webgl.ACTIONS, log_dir=log_dir,
                                    host_script=unity_webgl.HOST_SCRIPT, wait_for="ready", boot_timeout=300,
                                    step_timeout=120),
            max(5, args.steps // 4), args.rounds, "forward"))
    print(f"renderer: {results[0]['renderer']}; load average {os.getloadavg()[0]:.1f}")
    print("| game | boot to first frame (s) | steps/s: no frame | pixels | png | screenshot | in page ms: frame | "
          "readPixels+base64 | toDataURL | PSS per tab (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        rate, page = r["rates"], r["page_ms"]
        print(f"| {r['name']} | {r['first_frame_s']:.1f} | {rate['none']:.0f} | {rate['pixels']:.0f} | "
              f"{rate['png']:.0f} | {rate['screenshot']:.0f} | {page['tick']:.1f} | {page['pixels']:.1f} | "
              f"{page['png']:.1f} | {r['pss_mib']:.0f} |")


if __name__ == "__main__":
    main()
