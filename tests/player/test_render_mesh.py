"""Primitive meshes: outward winding (the renderer's culling relies on it), unit normals, sizes."""

import numpy as np
import pytest
import trimesh

from unirender.player.render import Mesh, mesh


@pytest.mark.parametrize(
    "make, extent",
    [(lambda: mesh.box((1.0, 2.0, 3.0)), (1.0, 2.0, 3.0)), (lambda: mesh.sphere(0.5, 16), (1.0, 1.0, 1.0)),
     (lambda: mesh.cylinder(0.5, 2.0, 12), (1.0, 2.0, 1.0))],
    ids=["box", "sphere", "cylinder"],
)
def test_convex_primitives_wind_outward_with_unit_normals(make, extent):
    m = make()
    assert m.vertices.dtype == np.float32 and m.indices.dtype == np.uint32 and m.uvs.shape == (len(m.vertices), 2)
    np.testing.assert_allclose(m.vertices.max(0) - m.vertices.min(0), extent, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(m.normals, axis=1), 1.0, atol=1e-5)
    a, b, c = (m.vertices[m.indices[:, k]] for k in range(3))
    face = np.cross(b - a, c - a)
    centroid = (a + b + c) / 3  # the shapes are convex and centred: outward = away from the origin
    assert (np.einsum("ij,ij->i", face, centroid) > 0).all()


def test_plane_is_horizontal_facing_up():
    m = mesh.plane((4.0, 2.0))
    assert np.ptp(m.vertices[:, 1]) == 0
    np.testing.assert_allclose(np.ptp(m.vertices, axis=0), (4.0, 0.0, 2.0))
    a, b, c = (m.vertices[m.indices[:, k]] for k in range(3))
    assert (np.cross(b - a, c - a)[:, 1] > 0).all()


def test_mesh_from_trimesh_keeps_geometry():
    m = mesh.mesh_from_trimesh(trimesh.creation.icosphere(subdivisions=1, radius=2.0))
    np.testing.assert_allclose(np.linalg.norm(m.vertices, axis=1), 2.0, rtol=1e-5)
    a, b, c = (m.vertices[m.indices[:, k]] for k in range(3))
    assert (np.einsum("ij,ij->i", np.cross(b - a, c - a), a + b + c) > 0).all()
    with pytest.raises(TypeError):
        mesh.mesh_from_trimesh("not a mesh")


def test_mesh_rejects_inconsistent_arrays():
    with pytest.raises(ValueError, match="normals"):
        Mesh(np.zeros((3, 3)), np.zeros((2, 3)), [[0, 1, 2]])
    with pytest.raises(ValueError, match="out of range"):
        Mesh(np.zeros((3, 3)), np.zeros((3, 3)), [[0, 1, 3]])
