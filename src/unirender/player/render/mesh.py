"""Primitive meshes (centred on the origin) and trimesh conversion.

Winding: every triangle's numeric cross product (v1-v0) x (v2-v0) points outward (see scene.Mesh)."""

from __future__ import annotations

import math

import numpy as np

from .scene import Mesh


def _oriented(vertices, normals, indices, uvs=None) -> Mesh:
    """Flip any triangle whose winding disagrees with its vertex normals, so generators need not care."""
    v = np.asarray(vertices, np.float32)
    n = np.asarray(normals, np.float32)
    idx = np.asarray(indices, np.uint32).reshape(-1, 3).copy()
    a, b, c = v[idx[:, 0]], v[idx[:, 1]], v[idx[:, 2]]
    face = np.cross(b - a, c - a)
    wrong = np.einsum("ij,ij->i", face, n[idx].sum(axis=1)) < 0
    idx[wrong] = idx[wrong][:, [0, 2, 1]]
    return Mesh(v, n, idx, uvs)


def box(size=(1.0, 1.0, 1.0)) -> Mesh:
    """An axis-aligned box, 24 vertices (flat normals per face), uvs 0..1 per face."""
    half = np.asarray(size, np.float64) / 2.0
    vertices, normals, uvs, indices = [], [], [], []
    for axis in range(3):
        for sign in (1.0, -1.0):
            normal = np.zeros(3)
            normal[axis] = sign
            u_axis, v_axis = np.zeros(3), np.zeros(3)
            u_axis[(axis + 1) % 3] = 1.0
            v_axis[(axis + 2) % 3] = 1.0
            base = len(vertices)
            for du, dv in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
                vertices.append((normal + du * u_axis + dv * v_axis) * half)
                normals.append(normal)
                uvs.append(((du + 1) / 2, (dv + 1) / 2))
            indices += [(base, base + 1, base + 2), (base, base + 2, base + 3)]
    return _oriented(vertices, normals, indices, uvs)


def plane(size=(1.0, 1.0)) -> Mesh:
    """A horizontal quad in the y = 0 plane, normal +y, ``size`` = (x extent, z extent)."""
    hx, hz = size[0] / 2.0, size[1] / 2.0
    vertices = [(-hx, 0, -hz), (hx, 0, -hz), (hx, 0, hz), (-hx, 0, hz)]
    uvs = [(0, 0), (1, 0), (1, 1), (0, 1)]
    return _oriented(vertices, [(0, 1, 0)] * 4, [(0, 1, 2), (0, 2, 3)], uvs)


def sphere(radius: float = 0.5, segments: int = 24) -> Mesh:
    """A UV sphere: ``segments`` around, ``segments // 2`` rings from pole to pole."""
    if segments < 3:
        raise ValueError("sphere needs at least 3 segments")
    rings = max(2, segments // 2)
    vertices, normals, uvs = [], [], []
    for r in range(rings + 1):
        theta = math.pi * r / rings  # 0 at the top pole
        for s in range(segments + 1):
            phi = 2 * math.pi * s / segments
            n = (math.sin(theta) * math.cos(phi), math.cos(theta), math.sin(theta) * math.sin(phi))
            vertices.append(tuple(radius * c for c in n))
            normals.append(n)
            uvs.append((s / segments, 1 - r / rings))
    indices = []
    row = segments + 1
    for r in range(rings):
        for s in range(segments):
            a, b = r * row + s, (r + 1) * row + s
            if r > 0:
                indices.append((a, a + 1, b))
            if r < rings - 1:
                indices.append((a + 1, b + 1, b))
    return _oriented(vertices, normals, indices, uvs)


def cylinder(radius: float = 0.5, height: float = 1.0, segments: int = 24) -> Mesh:
    """A cylinder along y, centred on the origin, with flat caps."""
    if segments < 3:
        raise ValueError("cylinder needs at least 3 segments")
    h = height / 2.0
    vertices, normals, uvs, indices = [], [], [], []
    for s in range(segments + 1):  # side: a column of two vertices per segment edge
        phi = 2 * math.pi * s / segments
        x, z = math.cos(phi), math.sin(phi)
        vertices += [(radius * x, -h, radius * z), (radius * x, h, radius * z)]
        normals += [(x, 0, z), (x, 0, z)]
        uvs += [(s / segments, 0), (s / segments, 1)]
    for s in range(segments):
        a = 2 * s
        indices += [(a, a + 2, a + 3), (a, a + 3, a + 1)]
    for y, ny in ((h, 1.0), (-h, -1.0)):  # caps: a centre vertex and a ring
        centre = len(vertices)
        vertices.append((0, y, 0))
        normals.append((0, ny, 0))
        uvs.append((0.5, 0.5))
        for s in range(segments + 1):
            phi = 2 * math.pi * s / segments
            vertices.append((radius * math.cos(phi), y, radius * math.sin(phi)))
            normals.append((0, ny, 0))
            uvs.append((0.5 + 0.5 * math.cos(phi), 0.5 + 0.5 * math.sin(phi)))
        for s in range(segments):
            indices.append((centre, centre + 1 + s, centre + 2 + s))
    return _oriented(vertices, normals, indices, uvs)


def mesh_from_trimesh(obj) -> Mesh:
    """A trimesh.Trimesh (or a Scene, concatenated) as a Mesh. Coordinates are taken as Unity world numbers
    unchanged (the scene loader has already converted a right-handed file as Unity's importers do, negating x);
    trimesh's outward counter-clockwise faces already have outward numeric cross products."""
    import trimesh

    if isinstance(obj, trimesh.Scene):
        obj = obj.to_geometry() if hasattr(obj, "to_geometry") else obj.dump(concatenate=True)
    if not isinstance(obj, trimesh.Trimesh):
        raise TypeError(f"expected a trimesh.Trimesh or Scene, got {type(obj).__name__}")
    uvs = getattr(obj.visual, "uv", None)
    if uvs is not None and len(uvs) != len(obj.vertices):
        uvs = None
    return Mesh(np.asarray(obj.vertices), np.asarray(obj.vertex_normals), np.asarray(obj.faces),
                None if uvs is None else np.asarray(uvs))
