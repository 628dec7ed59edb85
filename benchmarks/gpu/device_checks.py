"""The GPU machine's checks (issue 38), run by ``benchmarks/gpu/run_device.sh``: one JSON file and a few PNG frames.

Every check runs on its own, bounded in time, and records its result or its error: one failing check never hides
the others' figures (a device run is scarce). What it records, in ``OUT/gpu.json``:

1. ``nvidia_smi``: driver, GPU name, memory; ``nvenc``: whether the GPU has an H.264/HEVC encoder (NVML's encoder
   capacity; the H100/H200 family has NVDEC but no NVENC), from ``nvidia-smi -q`` (saved as ``nvidia-smi.txt``);
2. ``doctor``: ``unirender doctor --json`` (which platforms resolve; the device EGL and Vulkan selected);
3. ``renderers``: for EGL and Vulkan, the renderer string of the device the reference player renders on
   (a software rasteriser is refused unless ``--allow-software``), a frame of a fixed pose saved as PNG and its
   mean absolute difference from the same pose on llvmpipe (``reference-llvmpipe.png``, rendered here or on the
   device when Mesa is there);
4. ``players``: Controller steps/s at 300x300 and 1024x1024 rgb for 1, 4 and 16 players at once, on each GPU
   back-end and, side by side, on llvmpipe when the device has Mesa (``--software-baseline``);
5. ``remote_vector``: ``benchmarks/remote_vector.py`` (batched vs unbatched service steps, service vs local);
6. ``mlagents``: the ML-Agents reference game's camera path (MLAgentsController, 2 agents) at 84x84 and 512x512.

    python3 benchmarks/gpu/device_checks.py --out DIR [--allow-software] [--quick]

``--quick`` is the dry run for a CPU machine (short measurements, fewer players).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLATFORM_OF = {"egl": "EGL", "vulkan": "CloudRendering"}
POSE_STEPS = 6  # RotateRight 5 degrees this many times from the scene's start: the compared pose
# Mesa's files, when the device has them: point the loaders at the software driver alone for the baseline.
MESA_EGL_VENDOR = Path("/usr/share/glvnd/egl_vendor.d/50_mesa.json")
LAVAPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")


def log(msg: str) -> None:
    print(f"[device] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def checked(results: dict, name: str):
    """Decorator-like helper: run ``fn`` and store its value or its error under ``results[name]``."""

    def run(fn, *args, **kwargs):
        started = time.perf_counter()
        log(f"{name} ...")
        try:
            results[name] = fn(*args, **kwargs)
        except Exception as exc:  # a failed check is a figure too; the others still run
            results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=6),
            }
        log(f"{name} done in {time.perf_counter() - started:.1f} s")

    return run


def nvidia(out: Path) -> dict:
    try:
        text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60).stdout
    except FileNotFoundError:
        return {"present": False}
    (out / "nvidia-smi.txt").write_text(text)

    def field(name: str) -> str | None:
        m = re.search(rf"^\s*{re.escape(name)}\s*:\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else None

    info = {"present": True, "driver": field("Driver Version"), "cuda": field("CUDA Version"),
            "gpu": field("Product Name"), "memory_total": field("Total")}  # fmt: skip
    try:  # NVML says whether the chip has an encoder at all; nvidia-smi -q prints Encoder Stats either way
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        capacity = {}
        for codec, query in (("h264", 0), ("hevc", 1)):
            try:
                capacity[codec] = pynvml.nvmlDeviceGetEncoderCapacity(handle, query)
            except pynvml.NVMLError as exc:
                capacity[codec] = f"NVMLError: {exc}"
        info["nvenc"] = {"capacity": capacity, "has_encoder": any(isinstance(v, int) and v > 0
                                                                   for v in capacity.values())}  # fmt: skip
    except ImportError:
        info["nvenc"] = {"error": "pynvml (nvidia-ml-py) not importable"}
    return info


def doctor() -> dict:
    proc = subprocess.run([sys.executable, "-c", "from unirender.cli import main; main()", "doctor", "--json"],
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"doctor exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    summary = {p["platform"]: {"status": p["status"], "device": (p.get("device") or {}).get("summary")}
               for p in report.get("platforms", [])}  # fmt: skip
    return {"summary": summary, "report": report}


def software_env(backend: str) -> dict[str, str] | None:
    """The environment that makes ``backend`` render on Mesa's software driver, or None when Mesa is not here."""
    if backend == "egl" and MESA_EGL_VENDOR.exists():
        return {"__EGL_VENDOR_LIBRARY_FILENAMES": str(MESA_EGL_VENDOR)}
    if backend == "vulkan" and LAVAPIPE_ICD.exists():
        return {"VK_DRIVER_FILES": str(LAVAPIPE_ICD), "VK_ICD_FILENAMES": str(LAVAPIPE_ICD)}
    return None


def in_child(args: list[str], env_extra: dict[str, str], timeout: float) -> dict:
    """Run this script's ``--child`` mode in a fresh process (so that a loader environment applies from the start)."""
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_renderer(backend: str, png: str) -> dict:
    """Renderer string of ``backend`` and a frame of the fixed pose through the real player (saved to ``png``)."""
    from PIL import Image

    from unirender.controller import Controller
    from unirender.player.render import create_renderer

    r = create_renderer(backend, 64, 64)
    try:
        info = {"renderer": r.info.renderer, "vendor": r.info.vendor, "software": bool(r.info.software)}
    finally:
        r.close()
    with tempfile.TemporaryDirectory(prefix="unirender-gpu-") as log_dir:
        with Controller(platform=PLATFORM_OF[backend], width=300, height=300, scene="FloorPlan201_physics",
                        log_dir=log_dir) as c:  # fmt: skip
            for _ in range(POSE_STEPS):
                event = c.step("RotateRight", degrees=5)
            Image.fromarray(event.frame).save(png)
    return info


def child_players(backend: str, size: int, count: int, seconds: float) -> dict:
    """Steps/s of ``count`` players stepped at once (one thread each: a step waits on its player's pipe)."""
    from unirender.controller import Controller

    with tempfile.TemporaryDirectory(prefix="unirender-gpu-") as log_dir:
        controllers = []
        try:
            for _ in range(count):
                controllers.append(Controller(platform=PLATFORM_OF[backend], width=size, height=size,
                                              scene="FloorPlan201_physics", log_dir=log_dir))  # fmt: skip
            for c in controllers:
                for _ in range(3):
                    c.step("RotateRight", degrees=5)
            counts = [0] * count
            stop = time.perf_counter() + seconds
            errors: list[str] = []

            def drive(i: int) -> None:
                try:
                    while time.perf_counter() < stop:
                        controllers[i].step("RotateRight", degrees=5)
                        counts[i] += 1
                except Exception as exc:
                    errors.append(repr(exc))

            started = time.perf_counter()
            threads = [threading.Thread(target=drive, args=(i,)) for i in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - started
        finally:
            for c in controllers:
                c.stop()
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    return {"steps_per_s": sum(counts) / wall, "per_player": sum(counts) / wall / count, "steps": sum(counts)}


def child_mlagents(size: int, seconds: float) -> dict:
    from unirender.mlagents import MLAgentsController

    # time scale 100, as benchmarks/mlagents.py: the game's real-time pacing never waits, rendering is what counts
    with MLAgentsController("builtin", platform="EGL", width=size, height=size, time_scale=100.0) as env:
        event = env.reset()
        decision, _ = event.steps()
        n = len(decision)
        action = {"continuous": [[0.5, 0.0]] * n, "discrete": [[0]] * n}
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            event = env.step(action)
            frames = event.frames()
            steps += 1
        wall = time.perf_counter() - started
        shapes = {k: list(v.shape) for k, v in frames.items()}
    return {"steps_per_s": steps / wall, "steps": steps, "frames": shapes, "agents": n}


def mean_abs_diff(a: str, b: str) -> float:
    import numpy as np
    from PIL import Image

    x = np.asarray(Image.open(a).convert("RGB"), dtype=np.float32)
    y = np.asarray(Image.open(b).convert("RGB"), dtype=np.float32)
    return float(np.abs(x - y).mean())


def child_main(argv: list[str]) -> int:
    kind = argv[0]
    if kind == "renderer":
        result = child_renderer(argv[1], argv[2])
    elif kind == "players":
        result = child_players(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))
    elif kind == "mlagents":
        result = child_mlagents(int(argv[1]), float(argv[2]))
    else:
        raise SystemExit(f"unknown child kind {kind}")
    print(json.dumps(result))
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--allow-software", action="store_true", help="dry run: do not refuse llvmpipe/lavapipe"
    )
    parser.add_argument("--quick", action="store_true", help="dry run: short measurements, at most 4 players")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    seconds = 1.5 if args.quick else 4.0
    counts = (1, 4) if args.quick else (1, 4, 16)
    results: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("VK_", "__EGL", "__GLX", "NVIDIA"))},
    }
    checked(results, "nvidia_smi")(nvidia, out)
    checked(results, "doctor")(doctor)

    renderers: dict = {}
    results["renderers"] = renderers
    reference = out / "reference-llvmpipe.png"
    soft_egl = software_env("egl")
    if soft_egl is not None:  # the same pose on the device's own llvmpipe
        checked(renderers, "llvmpipe")(in_child, ["renderer", "egl", str(reference)], soft_egl, 240)
    elif (HERE / "reference-llvmpipe.png").exists():  # rendered on a CPU machine and committed
        reference.write_bytes((HERE / "reference-llvmpipe.png").read_bytes())
    gpu_backends = []
    for backend in ("egl", "vulkan"):
        png = out / f"frame-{backend}.png"
        checked(renderers, backend)(in_child, ["renderer", backend, str(png)], {}, 240)
        info = renderers[backend]
        if "error" in info:
            continue
        if reference.exists() and png.exists():
            info["mean_abs_diff_vs_llvmpipe"] = mean_abs_diff(str(png), str(reference))
        refused = info["software"] or "llvmpipe" in info["renderer"].lower()
        info["on_gpu"] = not refused
        if refused and not args.allow_software:
            info["refused"] = "software rasteriser: the GPU was not selected"
            continue
        gpu_backends.append(backend)

    players: dict = {}
    results["players"] = players
    for size in (300, 1024):
        for count in counts:
            for backend in gpu_backends:
                checked(players, f"{backend} {size}x{size} x{count}")(
                    in_child, ["players", backend, str(size), str(count), str(seconds)], {}, 300
                )
            if soft_egl is not None and not args.quick:
                checked(players, f"llvmpipe {size}x{size} x{count}")(
                    in_child, ["players", "egl", str(size), str(count), str(seconds)], soft_egl, 300
                )
    for key, value in list(players.items()):  # GPU vs llvmpipe ratios where both ran
        base = players.get("llvmpipe " + key.split(" ", 1)[1]) if not key.startswith("llvmpipe") else None
        if base and "error" not in base and "error" not in value:
            value["vs_llvmpipe"] = value["steps_per_s"] / base["steps_per_s"]

    def remote_vector() -> dict:
        md = out / "remote-vector.md"
        steps, rounds = ("10", "1") if args.quick else ("40", "3")
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "remote_vector.py"), "--steps", steps,
                               "--rounds", rounds, "--out", str(md)], capture_output=True, text=True,
                              timeout=240)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-3000:]}")
        return {"stdout_tail": proc.stdout[-4000:]}

    checked(results, "remote_vector")(remote_vector)
    mlagents: dict = {}
    results["mlagents"] = mlagents
    for size in (84, 512):
        checked(mlagents, f"{size}x{size}")(in_child, ["mlagents", str(size), str(seconds)], {}, 240)
    (out / "gpu.json").write_text(json.dumps(results, indent=2, default=str))
    failed = [
        k for k, v in {**renderers, **players, **mlagents}.items() if isinstance(v, dict) and "error" in v
    ]
    log(
        f"wrote {out / 'gpu.json'}; GPU back-ends: {gpu_backends or 'none'}; failed checks: {failed or 'none'}"
    )
    return 0 if gpu_backends and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
