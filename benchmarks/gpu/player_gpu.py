"""GPU check for the reference player (run on a machine with an NVIDIA GPU; nothing here needs a network).

For EGL and Vulkan it (1) creates the renderer directly and fails if it is a software rasteriser (llvmpipe /
lavapipe: a silent CPU fall-back), (2) runs the real player through the Controller and prints steps/s at
300x300 rgb, 300x300 rgb+depth+instance+normals and 1024x1024 rgb, plus raw renderer frames/s.

    .venv/bin/python benchmarks/gpu/player_gpu.py [--steps 300] [--device-index N]

Exit status 0 only if every back-end rendered on a GPU. Hints when it fails: EGL needs the NVIDIA EGL vendor
file (/usr/share/glvnd/egl_vendor.d/10_nvidia.json); in Docker set NVIDIA_DRIVER_CAPABILITIES=all (or include
"graphics"); Vulkan needs the NVIDIA ICD (nvidia_icd.json).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

PLATFORM_OF = {"egl": "EGL", "vulkan": "CloudRendering"}


def renderer_check(backend: str, device_index, frames: int) -> tuple[bool, str, float]:
    from unirender.player.render import Camera, Instance, Light, create_renderer, mesh, trs

    r = create_renderer(backend, 1024, 1024, device_index)
    try:
        info = r.info
        r.set_scene(
            {"box": mesh.box()}, [Instance("box", trs((0, 0, 3), (20, 30, 0)), (0.8, 0.2, 0.2), 1)], [Light()]
        )
        cam = Camera((0, 0, 0), (0, 0, 0), 60.0, 0.1, 20.0)
        r.render(cam, {"rgb"})
        start = time.perf_counter()
        for i in range(frames):
            out = r.render(Camera((0, 0, 0), (0, i % 7, 0), 60.0, 0.1, 20.0), {"rgb", "depth"})
        fps = frames / (time.perf_counter() - start)
        assert out["rgb"].shape[:2] == (1024, 1024) and out["rgb"].max() > 0
        return (
            (not info.software and "llvmpipe" not in info.renderer.lower()),
            f"{info.renderer} ({info.vendor})",
            fps,
        )
    finally:
        r.close()


def controller_steps(backend: str, size: int, init: dict, steps: int, log_dir: str) -> float:
    from unirender.controller import Controller

    with Controller(platform=PLATFORM_OF[backend], width=size, height=size, scene="FloorPlan201_physics",
                    log_dir=log_dir, **init) as c:  # fmt: skip
        for _ in range(10):
            c.step("RotateRight", degrees=5)
        start = time.perf_counter()
        for _ in range(steps):
            c.step("RotateRight", degrees=5)
        return steps / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device-index", type=int, default=None)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="unirender-gpu-") as log_dir:
        for backend in ("egl", "vulkan"):
            try:
                gpu, name, fps = renderer_check(backend, args.device_index, args.steps)
            except Exception as exc:
                print(f"{backend}: FAILED to render: {exc}")
                ok = False
                continue
            print(f"{backend}: renderer {name}: {'GPU' if gpu else 'SOFTWARE (llvmpipe/lavapipe)'}; "
                  f"raw 1024x1024 rgb+depth {fps:.0f} frames/s")  # fmt: skip
            if not gpu:
                ok = False
                continue
            for label, size, init in (
                ("300x300 rgb", 300, {}),
                ("300x300 rgb+depth+instance+normals", 300,
                 {"renderDepthImage": True, "renderInstanceSegmentation": True, "renderNormalsImage": True}),
                ("1024x1024 rgb", 1024, {}),
            ):  # fmt: skip
                try:
                    rate = controller_steps(backend, size, init, args.steps, log_dir)
                    print(f"{backend}: Controller.step {label}: {rate:.1f} steps/s")
                except Exception as exc:
                    print(f"{backend}: Controller.step {label}: FAILED: {exc}")
                    ok = False
    print("OK: every back-end rendered on a GPU" if ok else "FAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
