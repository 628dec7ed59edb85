"""What every back-end shares: argument checks, scene state, reused output arrays, and the flow rule."""

from __future__ import annotations

import numpy as np

from .scene import MODALITIES, Camera, Instance, Light, Mesh, RenderInfo
from .scene_state import SceneState, check_modalities

_OUTPUT_SPECS = {"rgb": np.uint8, "depth": np.float32, "instance": np.uint32, "normals": np.float32,
                 "flow": np.float32}
_OUTPUT_CHANNELS = {"depth": 1, "instance": 1, "normals": 3, "flow": 2}  # rgb: rgb_channels


class RendererBase:
    """Back-ends implement ``_draw(camera, previous_camera, outputs, rgb_channels) -> dict`` for the ordered
    ``outputs`` (a subset of MODALITIES), ``_resize_targets()``, ``_release()`` and ``_closed``."""

    info: RenderInfo
    width: int
    height: int
    _max_size: int = 16384  # back-ends set the device's largest texture dimension

    def __init__(self) -> None:
        self._state = SceneState()
        self._outputs: dict[tuple[str, int], np.ndarray] = {}

    def set_scene(self, meshes: dict[str, Mesh], instances: list[Instance], lights: list[Light],
                  ambient=(0.3, 0.3, 0.3), background=(0.0, 0.0, 0.0)) -> None:
        self._state.set_scene(meshes, instances, lights, ambient, background)

    def update_instances(self, instances: list[Instance]) -> None:
        self._state.update_instances(instances)

    def resize(self, width: int, height: int) -> None:
        width, height = int(width), int(height)
        if width <= 0 or height <= 0:
            raise ValueError(f"size must be positive, got {width}x{height}")
        if max(width, height) > self._max_size:
            raise ValueError(f"size {width}x{height} exceeds this device's limit of {self._max_size} pixels")
        if self._closed:
            raise RuntimeError("renderer is closed")
        self.width, self.height = width, height
        self._outputs = {}
        self._resize_targets()

    def render(self, camera: Camera, modalities, previous_camera: Camera | None = None,
               rgb_channels: int = 3) -> dict[str, np.ndarray]:
        if self._closed:
            raise RuntimeError("renderer is closed")
        wanted = check_modalities(modalities)
        if rgb_channels not in (3, 4):
            raise ValueError(f"rgb_channels must be 3 or 4, got {rgb_channels}")
        if not isinstance(camera, Camera) or not isinstance(previous_camera, Camera | None):
            raise TypeError("camera and previous_camera must be Camera objects")
        # Without a previous camera there is no previous frame: flow is zero (and not rendered at all).
        zero_flow = "flow" in wanted and previous_camera is None
        outputs = tuple(m for m in MODALITIES if m in wanted and not (m == "flow" and zero_flow))
        result = self._draw(camera, previous_camera, outputs, rgb_channels) if outputs else {}
        if zero_flow:
            flow = self._output("flow", rgb_channels)
            flow.fill(0.0)
            result["flow"] = flow
        self._state.mark_rendered()
        return result

    def _output(self, name: str, rgb_channels: int) -> np.ndarray:
        """The reused array a modality is returned in (the caller consumes it before the next render)."""
        channels = rgb_channels if name == "rgb" else _OUTPUT_CHANNELS[name]
        out = self._outputs.get((name, channels))
        if out is None:
            shape = (self.height, self.width) if channels == 1 else (self.height, self.width, channels)
            out = self._outputs[(name, channels)] = np.zeros(shape, dtype=_OUTPUT_SPECS[name])
        return out

    def close(self) -> None:
        if not self._closed:
            self._release()

    # to implement
    @property
    def _closed(self) -> bool:
        raise NotImplementedError

    def _draw(self, camera, previous_camera, outputs, rgb_channels) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _resize_targets(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError
