"""Unity-world transform maths for the reference player (pure numpy, no rendering).

Unity is left-handed with y up and z forward. Its matrices are numerically the usual ones (column vectors,
``p' = M @ p``); only the visual reading differs. Euler angles are degrees applied Z, then X, then Y, so
``R = Ry @ Rx @ Rz``: +y yaw turns right (forward +z swings to +x), +x pitch looks down.
"""

from __future__ import annotations

import math

import numpy as np


def rotation_matrix(rotation: tuple[float, float, float]) -> np.ndarray:
    """3x3 rotation for Unity Euler degrees ``(x, y, z)``."""
    ax, ay, az = (math.radians(float(a)) for a in rotation)
    cx, sx = math.cos(ax), math.sin(ax)
    cy, sy = math.cos(ay), math.sin(ay)
    cz, sz = math.cos(az), math.sin(az)
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]], dtype=np.float64)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]], dtype=np.float64)
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]], dtype=np.float64)
    return ry @ rx @ rz


def model_matrix(position, rotation, scale) -> np.ndarray:
    """4x4 float32 ``T @ R @ S`` in Unity world space."""
    m = np.eye(4, dtype=np.float64)
    m[:3, :3] = rotation_matrix(rotation) * np.asarray(scale, dtype=np.float64)[None, :]
    m[:3, 3] = position
    return m.astype(np.float32)


def forward_vector(yaw_degrees: float) -> np.ndarray:
    """Horizontal (x, z) unit vector the agent faces at this yaw."""
    a = math.radians(yaw_degrees)
    return np.array([math.sin(a), math.cos(a)])


def right_vector(yaw_degrees: float) -> np.ndarray:
    a = math.radians(yaw_degrees)
    return np.array([math.cos(a), -math.sin(a)])


def box_corners(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The 8 corners of an axis-aligned box, (8, 3), in Unity's cornerPoints order (max first)."""
    xs, ys, zs = (hi[0], lo[0]), (hi[1], lo[1]), (hi[2], lo[2])
    return np.array([[x, y, z] for x in xs for y in ys for z in zs], dtype=np.float64)


def transformed_bounds(local_lo, local_hi, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World axis-aligned bounds of a local box under a 4x4 model matrix."""
    corners = box_corners(np.asarray(local_lo, float), np.asarray(local_hi, float))
    world = corners @ np.asarray(matrix, np.float64)[:3, :3].T + np.asarray(matrix, np.float64)[:3, 3]
    return world.min(axis=0), world.max(axis=0)


def normalize_degrees(angle: float) -> float:
    """Angle in [0, 360), rounded to kill float noise from repeated rotations."""
    a = round(float(angle) % 360.0, 4)
    return 0.0 if a >= 360.0 else a


def vec3(v) -> dict[str, float]:
    return {"x": float(v[0]), "y": float(v[1]), "z": float(v[2])}
