"""Camera and model matrices in Unity's conventions (pure numpy, column vectors: p' = M @ p).

View space is left-handed like Unity's world: x right, y up, z forward, so eye-space z is the planar depth.
Projections keep that orientation (no mirroring): +x lands on the image's right, +y at the top. Hence a face
whose numeric normal (v1-v0) x (v2-v0) points at the camera is clockwise on screen: back-ends cull with
front face = clockwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .scene import Camera


def _rot_x(deg: float) -> np.ndarray:
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=np.float64)


def _rot_y(deg: float) -> np.ndarray:
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=np.float64)


def _rot_z(deg: float) -> np.ndarray:
    c, s = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=np.float64)


def euler_to_matrix(rotation: Sequence[float]) -> np.ndarray:
    """Unity's Quaternion.Euler(x, y, z) as a 3x3 matrix: roll z first, then pitch x, then yaw y.

    Forward (0, 0, 1) maps to (sin yaw, 0, cos yaw) for a pure yaw (+90 looks down +x) and to (0, -1, 0) for
    pitch +90 (looks down)."""
    x, y, z = (float(a) for a in rotation)
    return _rot_y(y) @ _rot_x(x) @ _rot_z(z)


def trs(position: Sequence[float] = (0, 0, 0), rotation: Sequence[float] = (0, 0, 0),
        scale: Sequence[float] | float = 1.0) -> np.ndarray:
    """A 4x4 float32 model matrix: translate @ rotate (Unity euler degrees) @ scale."""
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), (3,))
    m = np.eye(4)
    m[:3, :3] = euler_to_matrix(rotation) * s[None, :]
    m[:3, 3] = position
    return m.astype(np.float32)


def view_matrix(camera: Camera) -> np.ndarray:
    """World -> left-handed view space (x right, y up, z forward), float64."""
    r = euler_to_matrix(camera.rotation)
    v = np.eye(4)
    v[:3, :3] = r.T
    v[:3, 3] = -r.T @ np.asarray(camera.position, dtype=np.float64)
    return v


def projection_matrix(camera: Camera, aspect: float, clip_z: str) -> np.ndarray:
    """Perspective projection of left-handed view space; w = eye z.

    ``clip_z`` "gl": near/far -> NDC z -1/+1 (OpenGL); "zero_to_one": 0/+1 (Vulkan/WebGPU). Both give the same
    window depth, so GL and Vulkan images agree."""
    f = 1.0 / math.tan(math.radians(camera.fov) / 2.0)
    n, fa = float(camera.near), float(camera.far)
    p = np.zeros((4, 4))
    p[0, 0] = f / aspect
    p[1, 1] = f
    p[3, 2] = 1.0
    if clip_z == "gl":
        p[2, 2] = (fa + n) / (fa - n)
        p[2, 3] = -2.0 * fa * n / (fa - n)
    elif clip_z == "zero_to_one":
        p[2, 2] = fa / (fa - n)
        p[2, 3] = -fa * n / (fa - n)
    else:
        raise ValueError(f"clip_z must be 'gl' or 'zero_to_one', got {clip_z!r}")
    return p


def view_projection(camera: Camera, aspect: float, clip_z: str) -> np.ndarray:
    return projection_matrix(camera, aspect, clip_z) @ view_matrix(camera)


def normal_matrix(model: np.ndarray) -> np.ndarray:
    """Inverse-transpose of the model's 3x3 (keeps normals perpendicular under non-uniform scale)."""
    return np.linalg.inv(np.asarray(model, dtype=np.float64)[:3, :3]).T
