"""Video benchmark (issue 36): what ``output.video`` costs a job, the encoder's throughput, and its bytes.

Measured side by side in one run on the reference player (EGL, software rasteriser on a CPU-only machine):

* a 300x300 rgb job (png frames) with ``output.video`` off and on, rounds interleaved (off, on, off, on, ...):
  wall time per round and the ratio (target: video on at most 15 % slower; encoding runs on threads of its own);
* the encoder alone (``unirender.jobs.video.VideoWriter``, H.264 at the default quality and preset) on rendered
  frames at 300x300 and 1024x1024: frames/s on the calling thread and with ``background=True``;
* bytes per frame: the job's mp4 against its PNG frames (the same rgb images).

    python benchmarks/video.py [--frames 200] [--rounds 3] [--md FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOUR = ["MoveAhead", {"action": "RotateRight", "degrees": 10}, {"action": "LookDown", "degrees": 5},
        "MoveAhead", {"action": "RotateLeft", "degrees": 15}, {"action": "LookUp", "degrees": 5},
        "MoveBack", {"action": "RotateRight", "degrees": 10}]  # fmt: skip


def job_spec(out: Path, frames: int, size: int, video: bool) -> dict:
    actions = [TOUR[i % len(TOUR)] for i in range(frames - 1)]
    spec = {
        "name": "video-bench",
        "environment": {"executable": "builtin", "platform": "EGL", "width": size, "height": size},
        "render": {"modalities": ["rgb"]},
        "episodes": [{"scene": "FloorPlan1_physics", "actions": actions}],
        "output": {"directory": str(out), "format": "png"},
        "workers": 1,
    }
    if video:
        spec["output"]["video"] = {"fps": 30}
    return spec


def run_job(root: Path, frames: int, size: int, video: bool, n: int) -> tuple[float, Path, float]:
    """(wall seconds, output, seconds the worker was blocked on writing: what encoding took from stepping)."""
    from unirender.jobs import render

    out = root / f"{'on' if video else 'off'}-{n}"
    started = time.perf_counter()
    result = render(job_spec(out, frames, size, video))
    return time.perf_counter() - started, out, result.write_s


def rendered_frames(size: int, count: int) -> list:
    """``count`` frames of a slow turn at ``size``: what an episode's video holds."""
    import numpy as np

    from unirender.controller import Controller

    with Controller(executable="builtin", platform="EGL", width=size, height=size, scene="FloorPlan1_physics") as c:
        return [np.asarray(c.step({"action": "RotateRight", "degrees": 3}).frame).copy() for _ in range(count)]


def encoder_rate(frames: list, background: bool, root: Path) -> tuple[float, float]:
    """(frames/s, CPU ms per frame of this process: the caller's and the encoder's threads)."""
    from unirender.jobs.video import VideoWriter

    path = root / f"enc-{len(frames)}-{frames[0].shape[0]}-{background}.mp4"
    started, cpu = time.perf_counter(), time.process_time()
    with VideoWriter(path, fps=30, background=background) as writer:
        for frame in frames:
            writer.add(frame)
    return len(frames) / (time.perf_counter() - started), 1000 * (time.process_time() - cpu) / len(frames)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--md", default=None, help="also write the table to this Markdown file")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="unirender-video-bench-"))
    lines = []
    try:
        times: dict[bool, list[float]] = {False: [], True: []}
        blocked: dict[bool, list[float]] = {False: [], True: []}
        last: dict[bool, Path] = {}
        run_job(root, 10, 300, True, -1)  # warm-up: imports, the encoder's first open, shader caches
        for n in range(args.rounds):
            for video in (False, True):
                elapsed, last[video], write_s = run_job(root, args.frames, 300, video, n)
                times[video].append(elapsed)
                blocked[video].append(write_s)
        off, on = statistics.median(times[False]), statistics.median(times[True])
        ratios = [b / a for a, b in zip(times[False], times[True], strict=True)]
        lines.append(f"300x300 rgb job, {args.frames} frames, png, 1 worker, {args.rounds} interleaved rounds:")
        lines.append(f"  video off: {', '.join(f'{t:.2f}' for t in times[False])} s (median {off:.2f})")
        lines.append(f"  video on:  {', '.join(f'{t:.2f}' for t in times[True])} s (median {on:.2f})")
        lines.append(f"  on / off per round: {', '.join(f'{r:.3f}' for r in ratios)}; medians {on / off:.3f}")
        for video in (False, True):
            lines.append(f"  worker blocked on writing, video {'on' if video else 'off'}: "
                         f"{', '.join(f'{t:.2f}' for t in blocked[video])} s")  # fmt: skip
        pngs = list((last[False] / "frames").rglob("*.png"))
        png_bytes = sum(p.stat().st_size for p in pngs) / len(pngs)
        mp4 = next((last[True] / "videos").rglob("*.mp4"))
        mp4_bytes = mp4.stat().st_size / args.frames
        lines.append(f"  bytes per frame: png {png_bytes:,.0f}, mp4 (H.264, quality high) {mp4_bytes:,.0f} "
                     f"({png_bytes / mp4_bytes:.1f}x smaller)")  # fmt: skip
        for size, count in ((300, 150), (1024, 60)):
            frames = rendered_frames(size, count)
            (fg, fg_cpu), (bg, bg_cpu) = encoder_rate(frames, False, root), encoder_rate(frames, True, root)
            lines.append(f"encoder at {size}x{size} ({count} rendered frames): {fg:.0f} frames/s on the caller's "
                         f"thread ({fg_cpu:.1f} CPU ms per frame), {bg:.0f} frames/s with background=True "
                         f"({bg_cpu:.1f} CPU ms per frame)")  # fmt: skip
        lines.append(f"load average at the end: {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text("# Video benchmark (benchmarks/video.py)\n\n```\n" + text + "\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
