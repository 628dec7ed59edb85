"""The reference player's renderer back-ends: "egl" and "glx" (moderngl, GLSL 330) and "vulkan" (wgpu, WGSL).

Usage::

    r = create_renderer("egl", 300, 300)
    r.set_scene({"box": mesh.box()}, [Instance("box", trs((0, 0, 5)), (1, 0, 0), 1)], [Light()])
    frames = r.render(Camera(), {"rgb", "depth"})

``render()`` returns only the requested modalities, ROW 0 = BOTTOM of the image (GL/Unity order, what goes on
the wire):

- ``rgb``      uint8   (H, W, rgb_channels): 3 = packed RGB24 (GL/Linux64 flavour), 4 = RGBA32 (alpha 255).
- ``depth``    float32 (H, W): planar eye-space z in metres (not ray length); background = camera.far.
- ``instance`` uint32  (H, W): instance ids, 0 = background.
- ``normals``  float32 (H, W, 3): world-space unit normals (Unity world axes); background = 0.
- ``flow``     float32 (H, W, 2): screen motion in pixels since the previous frame, x to the right, y UP (the
  bottom-up row order: +y = towards row H-1). It is the pixel's position now minus where the same surface point
  was, using ``previous_camera`` and each instance's pose before the latest ``update_instances``. With
  ``previous_camera=None`` (no previous frame) flow is all zeros. Background = 0.

The arrays are views of buffers the renderer reuses: consume or copy them before the next ``render()``.
Same inputs -> bit-identical output on the same back-end; GL and Vulkan agree within a small tolerance.

Flow and ``update_instances``: the "previous" pose of an instance is the pose that was current at the last
render() before the latest update_instances() call. Call update_instances() once per simulation step (also when
nothing moved) before rendering that step's cameras.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .scene import MODALITIES, Camera, Instance, Light, Mesh, RenderInfo
from .transforms import euler_to_matrix, trs

BACKENDS = ("egl", "glx", "vulkan")


class Renderer(Protocol):
    info: RenderInfo
    width: int
    height: int

    def set_scene(self, meshes: dict[str, Mesh], instances: list[Instance], lights: list[Light],
                  ambient=(0.3, 0.3, 0.3), background=(0.0, 0.0, 0.0)) -> None: ...

    def update_instances(self, instances: list[Instance]) -> None: ...

    def resize(self, width: int, height: int) -> None: ...

    def render(self, camera: Camera, modalities: set[str], previous_camera: Camera | None = None,
               rgb_channels: int = 3) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


def create_renderer(backend: str, width: int, height: int, device_index: int | None = None) -> Renderer:
    """A renderer of ``width`` x ``height`` pixels. Raises ``PlatformError`` when the back-end cannot start
    (no EGL device, no DISPLAY for glx, no Vulkan adapter) and ValueError for an unknown name.

    ``device_index``: "egl" = EGL device index (glcontext lets ``GLCONTEXT_DEVICE_INDEX`` in the environment
    override it); "vulkan" = index among the Vulkan adapters, GPUs first (None = wgpu's high-performance
    choice); "glx" ignores it (the X screen decides). Check ``info.renderer`` / ``info.software`` to see what
    was picked: a software rasteriser is never reported as a GPU."""
    if backend in ("egl", "glx"):
        from .gl import GLRenderer

        return GLRenderer(backend, width, height, device_index)
    if backend == "vulkan":
        from .vulkan import VulkanRenderer

        return VulkanRenderer(width, height, device_index)
    raise ValueError(f"unknown render back-end {backend!r}; choose one of {BACKENDS}")


__all__ = ["BACKENDS", "MODALITIES", "Camera", "Instance", "Light", "Mesh", "RenderInfo", "Renderer",
           "create_renderer", "euler_to_matrix", "trs"]
