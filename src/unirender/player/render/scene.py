"""What a renderer draws: meshes, placed instances, lights and a camera (plain data, no GPU).

All positions and directions are in the Unity world: left-handed, y up, z forward, metres.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MODALITIES = ("rgb", "depth", "instance", "normals", "flow")
LIGHT_KINDS = ("directional", "point")


@dataclass
class Mesh:
    """Indexed triangles. Winding: the numeric cross product (v1-v0) x (v2-v0) points outward, which in Unity's
    left-handed world means clockwise as seen from outside (Unity's front-face rule)."""

    vertices: np.ndarray  # (N, 3) float32
    normals: np.ndarray  # (N, 3) float32, unit
    indices: np.ndarray  # (M, 3) uint32
    uvs: np.ndarray | None = None  # (N, 2) float32, (0, 0) = bottom-left of the texture image

    def __post_init__(self) -> None:
        self.vertices = np.ascontiguousarray(self.vertices, dtype=np.float32).reshape(-1, 3)
        self.normals = np.ascontiguousarray(self.normals, dtype=np.float32).reshape(-1, 3)
        self.indices = np.ascontiguousarray(self.indices, dtype=np.uint32).reshape(-1, 3)
        n = len(self.vertices)
        if len(self.normals) != n:
            raise ValueError(f"Mesh has {n} vertices but {len(self.normals)} normals")
        if self.indices.size and int(self.indices.max()) >= n:
            raise ValueError(f"Mesh index {int(self.indices.max())} out of range for {n} vertices")
        if self.uvs is not None:
            self.uvs = np.ascontiguousarray(self.uvs, dtype=np.float32).reshape(-1, 2)
            if len(self.uvs) != n:
                raise ValueError(f"Mesh has {n} vertices but {len(self.uvs)} uvs")


@dataclass
class Instance:
    """One placed copy of a mesh. ``instance_id`` > 0 is what the instance modality reports (0 = background)."""

    mesh: str
    model: np.ndarray  # (4, 4) float32 world matrix (column vectors: world = model @ [x, y, z, 1])
    color: tuple[float, float, float] = (0.8, 0.8, 0.8)
    instance_id: int = 1
    texture: str | None = None  # image path, sampled with the mesh uvs and multiplied by color

    def __post_init__(self) -> None:
        self.model = np.asarray(self.model, dtype=np.float32).reshape(4, 4)
        if not 0 < int(self.instance_id) < 2**32:
            raise ValueError(f"instance_id must be in 1..2**32-1 (0 is the background), got {self.instance_id}")


@dataclass
class Light:
    """Lambert light. Directional: ``direction`` is where the light travels (Unity's light forward vector).
    Point: ``position``; no distance falloff (keeps scenes easy to light)."""

    kind: str = "directional"
    direction: tuple[float, float, float] = (0.0, -1.0, 0.0)
    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    intensity: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in LIGHT_KINDS:
            raise ValueError(f"Light kind must be one of {LIGHT_KINDS}, got {self.kind!r}")


@dataclass
class Camera:
    """A perspective camera. ``rotation`` is Unity euler degrees (x, y, z): y = yaw (+ turns right), x = pitch
    (+ looks down, like AI2-THOR's cameraHorizon), z = roll; applied z, then x, then y (Unity's order)."""

    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rotation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    fov: float = 90.0  # vertical, degrees
    near: float = 0.1
    far: float = 20.0

    def __post_init__(self) -> None:
        if not 0.0 < self.fov < 180.0:
            raise ValueError(f"Camera fov must be in (0, 180) degrees, got {self.fov}")
        if not 0.0 < self.near < self.far:
            raise ValueError(f"Camera needs 0 < near < far, got near={self.near} far={self.far}")


@dataclass
class RenderInfo:
    backend: str  # "egl" | "glx" | "vulkan"
    renderer: str  # GL_RENDERER or the wgpu adapter's device name
    vendor: str
    software: bool  # llvmpipe / lavapipe / any CPU adapter
    device_type: str  # "CPU" for software rasterisers, else "GPU" (GL) or wgpu's adapter_type
    extra: dict = field(default_factory=dict)


def is_software_renderer(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in ("llvmpipe", "lavapipe", "softpipe", "swrast", "swiftshader"))
