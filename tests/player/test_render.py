"""The renderer back-ends, rendering for real: EGL and GLX (Xvfb) through llvmpipe, Vulkan through lavapipe.

Expected values come from a plain pinhole model written here (not from the renderer's own matrices).
Arrays are bottom-up (row 0 = bottom of the image).
"""

import math

import numpy as np
import pytest
from PIL import Image

from unirender.errors import PlatformError
from unirender.player.render import MODALITIES, Camera, Instance, Light, create_renderer, mesh, trs

W, H = 160, 120
FOV = 60.0
F_PX = (H / 2) / math.tan(math.radians(FOV / 2))  # focal length in pixels
BACKENDS = ["egl", "glx", "vulkan"]


@pytest.fixture(scope="module")
def xvfb_display():
    from unirender.platforms.xvfb import ScreenSpec, start_xvfb

    display = start_xvfb([ScreenSpec(640, 480)])
    try:
        yield display.display
    finally:
        display.stop()


@pytest.fixture(scope="module")
def renderers(xvfb_display):
    made = {}
    try:
        made["egl"] = create_renderer("egl", W, H)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DISPLAY", xvfb_display)
            made["glx"] = create_renderer("glx", W, H)
        made["vulkan"] = create_renderer("vulkan", W, H)
        yield made
    finally:
        for r in made.values():
            r.close()


@pytest.fixture(params=BACKENDS)
def renderer(request, renderers):
    r = renderers[request.param]
    if (r.width, r.height) != (W, H):
        r.resize(W, H)
    return r


def camera(**kw):
    return Camera(**{"fov": FOV, "near": 0.1, "far": 20.0, **kw})


LIGHT = Light("directional", direction=(0.2, -1.0, 0.6), intensity=0.7)


def wall_scene(r, z=5.0):
    """A 40 m x 40 m wall whose front face is at z, straight ahead."""
    r.set_scene({"box": mesh.box((40.0, 40.0, 0.2))}, [Instance("box", trs((0, 0, z + 0.1)), (0.8, 0.5, 0.2), 3)],
                [LIGHT], ambient=(0.2, 0.2, 0.2), background=(0.1, 0.2, 0.3))


def cube_scene(r, position=(0.0, 0.0, 5.0), size=1.0, instance_id=7):
    r.set_scene({"cube": mesh.box((size, size, size)), "floor": mesh.plane((20.0, 20.0))},
                [Instance("cube", trs(position), (0.9, 0.1, 0.1), instance_id),
                 Instance("floor", trs((0.0, -1.0, 0.0)), (0.5, 0.5, 0.5), 2)],
                [LIGHT], ambient=(0.25, 0.25, 0.25), background=(0.0, 0.0, 0.0))


def centroid(mask):
    rows, cols = np.nonzero(mask)
    return rows.mean() + 0.5, cols.mean() + 0.5


def test_info_reports_the_software_rasteriser(renderers):
    for name, r in renderers.items():
        assert r.info.backend == name
        assert "llvmpipe" in r.info.renderer
        assert r.info.software is True and r.info.device_type == "CPU"


def test_wall_depth_is_planar_metres(renderer):
    wall_scene(renderer, z=5.0)
    out = renderer.render(camera(), {"depth"})
    depth = out["depth"]
    assert depth.shape == (H, W) and depth.dtype == np.float32
    # the wall covers the whole view at 5 m: planar depth is 5 everywhere, also in the corners where the ray
    # length would be 5 / cos(angle) ~ 6.1
    np.testing.assert_allclose(depth, 5.0, rtol=0.01)
    wall_scene(renderer, z=12.5)
    np.testing.assert_allclose(renderer.render(camera(), {"depth"})["depth"], 12.5, rtol=0.01)


def test_background_depth_is_far_and_instance_zero(renderer):
    wall_scene(renderer)
    out = renderer.render(camera(rotation=(0, 180, 0)), {"depth", "instance", "rgb"})
    assert (out["depth"] == 20.0).all()
    assert (out["instance"] == 0).all()
    assert (out["rgb"] == np.round(np.array([0.1, 0.2, 0.3]) * 255).astype(np.uint8)).all()


def test_instance_mask_matches_projected_bounds(renderer):
    cube_scene(renderer, position=(1.0, 0.5, 6.0), size=1.0, instance_id=7)
    ids = renderer.render(camera(), {"instance"})["instance"]
    assert ids.dtype == np.uint32 and set(np.unique(ids)) <= {0, 2, 7}
    rows, cols = np.nonzero(ids == 7)
    # a convex box in front of the camera: its silhouette's bounds are those of its projected corners
    corners = np.array([(x, y, z) for x in (0.5, 1.5) for y in (0.0, 1.0) for z in (5.5, 6.5)])
    proj_cols = W / 2 + F_PX * corners[:, 0] / corners[:, 2]
    proj_rows = H / 2 + F_PX * corners[:, 1] / corners[:, 2]  # bottom-up: +y = higher row index
    assert abs(cols.min() - proj_cols.min()) <= 1 and abs(cols.max() + 1 - proj_cols.max()) <= 1
    assert abs(rows.min() - proj_rows.min()) <= 1 and abs(rows.max() + 1 - proj_rows.max()) <= 1


def test_floor_normals_point_up_and_wall_faces_camera(renderer):
    cube_scene(renderer, position=(0.0, 0.0, 5.0))
    out = renderer.render(camera(rotation=(20, 0, 0)), {"normals", "instance"})
    normals, ids = out["normals"], out["instance"]
    assert normals.shape == (H, W, 3) and normals.dtype == np.float32
    floor = ids == 2
    assert floor.sum() > 1000
    np.testing.assert_allclose(normals[floor], np.broadcast_to([0, 1, 0], normals[floor].shape), atol=1e-3)
    assert (normals[ids == 0] == 0).all()
    # the cube's face towards the camera has normal -z (it faces the camera looking down +z)
    cube_normals = normals[ids == 7]
    assert (np.abs(cube_normals - [0, 0, -1]).max(axis=1) < 1e-3).sum() > 100


def test_yaw_plus_90_looks_down_plus_x_and_right_is_right(renderer):
    cube_scene(renderer, position=(6.0, 0.0, 0.0))
    assert not (renderer.render(camera(), {"instance"})["instance"] == 7).any()
    ids = renderer.render(camera(rotation=(0, 90, 0)), {"instance"})["instance"]
    row, col = centroid(ids == 7)
    assert abs(col - W / 2) < 1 and abs(row - H / 2) < 1
    # yaw +80: the object (at +x) is 10 degrees to the right of the view direction -> image's right half
    ids = renderer.render(camera(rotation=(0, 80, 0)), {"instance"})["instance"]
    assert abs(centroid(ids == 7)[1] - (W / 2 + F_PX * math.tan(math.radians(10)))) < 1.5
    # unrotated: +x is on the right, +y at the top (higher bottom-up rows)
    cube_scene(renderer, position=(1.5, 1.0, 6.0))
    row, col = centroid(renderer.render(camera(), {"instance"})["instance"] == 7)
    assert col > W / 2 + 10 and row > H / 2 + 5


def test_pitch_plus_looks_down(renderer):
    renderer.set_scene({"ball": mesh.sphere(0.2, 24)}, [Instance("ball", trs((0.0, -1.0, 5.0)), (1, 1, 1), 7)],
                       [LIGHT])  # a sphere on the optical axis projects to a disc centred on the image
    row, _ = centroid(renderer.render(camera(), {"instance"})["instance"] == 7)
    assert row < H / 2 - 10  # below the centre (bottom-up rows)
    pitch = math.degrees(math.atan2(1.0, 5.0))
    row, col = centroid(renderer.render(camera(rotation=(pitch, 0, 0)), {"instance"})["instance"] == 7)
    assert abs(row - H / 2) < 1 and abs(col - W / 2) < 1


def test_flow_zero_for_unchanged_camera(renderer):
    cube_scene(renderer)
    cam = camera(position=(0.2, 0.3, -0.5), rotation=(10, 15, 0))
    flow = renderer.render(cam, {"flow"}, previous_camera=cam)["flow"]
    assert flow.shape == (H, W, 2) and flow.dtype == np.float32
    assert (flow == 0).all()
    assert (renderer.render(cam, {"flow"})["flow"] == 0).all()


def test_flow_yaw_right_moves_the_scene_left(renderer):
    wall_scene(renderer)
    yaw = 4.0
    flow = renderer.render(camera(rotation=(0, yaw, 0)), {"flow"}, previous_camera=camera())["flow"]
    centre = flow[H // 2 - 2: H // 2 + 2, W // 2 - 2: W // 2 + 2]
    # the point now at the centre was f*tan(yaw) pixels to the right before
    np.testing.assert_allclose(centre[..., 0], -F_PX * math.tan(math.radians(yaw)), rtol=0.03)
    assert np.abs(centre[..., 1]).max() < 0.2
    # pitching down moves the scene up the image: +y in the bottom-up convention
    flow = renderer.render(camera(rotation=(3, 0, 0)), {"flow"}, previous_camera=camera())["flow"]
    assert (flow[H // 2 - 2: H // 2 + 2, W // 2 - 2: W // 2 + 2, 1] > 2).all()


def test_flow_follows_moved_instances(renderer):
    cube_scene(renderer, position=(0.0, 0.0, 5.0))
    renderer.render(camera(), {"rgb"})
    moved = [Instance("cube", trs((0.25, 0.0, 5.0)), (0.9, 0.1, 0.1), 7),
             Instance("floor", trs((0.0, -1.0, 0.0)), (0.5, 0.5, 0.5), 2)]
    renderer.update_instances(moved)
    out = renderer.render(camera(), {"flow", "instance"}, previous_camera=camera())
    cube = out["instance"] == 7
    # the cube's front face (z = 4.5) moved 0.25 m right
    np.testing.assert_allclose(out["flow"][cube][:, 0], F_PX * 0.25 / 4.5, rtol=0.05)
    assert (out["flow"][out["instance"] == 2] == 0).all()
    # the next step without motion: flow back to zero
    renderer.update_instances(moved)
    assert (renderer.render(camera(), {"flow"}, previous_camera=camera())["flow"] == 0).all()
    # no previous camera = no previous frame: zero flow even though objects moved
    renderer.update_instances([Instance("cube", trs((-0.25, 0.0, 5.0)), (0.9, 0.1, 0.1), 7)])
    assert (renderer.render(camera(), {"flow", "rgb"})["flow"] == 0).all()


def test_lambert_and_ambient(renderer):
    r = renderer
    r.set_scene({"box": mesh.box((40.0, 40.0, 0.2))}, [Instance("box", trs((0, 0, 5.1)), (0.5, 0.25, 0.1), 1)],
                [Light("directional", direction=(0, 0, 1), intensity=0.5)], ambient=(0.2, 0.2, 0.2))
    rgb = r.render(camera(), {"rgb"})["rgb"]
    expect = np.round(np.array([0.5, 0.25, 0.1]) * 0.7 * 255)
    assert np.abs(rgb.reshape(-1, 3).astype(int) - expect).max() <= 1
    # a point light 1 m in front of the wall's centre: brightest in the middle, falling off towards the edges
    r.set_scene({"box": mesh.box((40.0, 40.0, 0.2))}, [Instance("box", trs((0, 0, 5.1)), (1.0, 1.0, 1.0), 1)],
                [Light("point", position=(0, 0, 4.0), intensity=1.0)], ambient=(0.0, 0.0, 0.0))
    grey = r.render(camera(), {"rgb"})["rgb"][..., 0].astype(int)
    assert grey[H // 2, W // 2] >= 250 and grey[H // 2, 2] < grey[H // 2, W // 4] < grey[H // 2, W // 2]


def test_back_faces_are_culled(renderer):
    cube_scene(renderer, position=(0.0, 0.0, 0.0), size=4.0)  # camera inside the cube: only back faces
    ids = renderer.render(camera(), {"instance"})["instance"]
    assert not (ids == 7).any()


def test_rgb_channels_and_large_instance_ids(renderer):
    cube_scene(renderer, instance_id=2**31 + 12345)
    three = renderer.render(camera(), {"rgb", "instance"})
    rgb3, ids = three["rgb"].copy(), three["instance"].copy()
    rgb4 = renderer.render(camera(), {"rgb"}, rgb_channels=4)["rgb"]
    assert rgb3.shape == (H, W, 3) and rgb4.shape == (H, W, 4)
    assert (rgb4[..., :3] == rgb3).all() and (rgb4[..., 3] == 255).all()
    assert (ids == 2**31 + 12345).sum() > 100


def test_texture_uv_origin_is_the_images_bottom_left(renderer, tmp_path):
    image = np.zeros((64, 64, 3), np.uint8)  # file rows are top-down: top-left red, top-right green,
    image[:32, :32] = (255, 0, 0)  # bottom-left blue, bottom-right white
    image[:32, 32:] = (0, 255, 0)
    image[32:, :32] = (0, 0, 255)
    image[32:, 32:] = (255, 255, 255)
    path = tmp_path / "quadrants.png"
    Image.fromarray(image).save(path)
    # the plane turned to face the camera (normal -z), filling the view at 2 m
    renderer.set_scene({"quad": mesh.plane((8.0, 8.0))},
                       [Instance("quad", trs((0, 0, 2.0), rotation=(-90, 0, 0)), (1, 1, 1), 1, str(path))],
                       [], ambient=(1.0, 1.0, 1.0))
    rgb = renderer.render(camera(fov=90.0), {"rgb"})["rgb"]
    top_down = rgb[::-1]
    assert tuple(top_down[10, 10]) == (255, 0, 0) and tuple(top_down[10, W - 10]) == (0, 255, 0)
    assert tuple(top_down[H - 10, 10]) == (0, 0, 255) and tuple(top_down[H - 10, W - 10]) == (255, 255, 255)


def test_deterministic_and_reused_buffers(renderer):
    cube_scene(renderer)
    cam, prev = camera(rotation=(10, 5, 0)), camera()
    first = {k: v.copy() for k, v in renderer.render(cam, set(MODALITIES), previous_camera=prev).items()}
    renderer.render(camera(rotation=(0, 40, 0)), {"rgb", "depth"})
    second = renderer.render(cam, set(MODALITIES), previous_camera=prev)
    for name in MODALITIES:
        assert np.array_equal(first[name], second[name]), name


def test_resize(renderer):
    try:
        renderer.resize(90, 200)
        wall_scene(renderer)
        out = renderer.render(camera(), {"rgb", "depth", "instance", "normals", "flow"})
        assert out["rgb"].shape == (200, 90, 3) and out["depth"].shape == (200, 90)
        assert out["flow"].shape == (200, 90, 2) and out["normals"].shape == (200, 90, 3)
        np.testing.assert_allclose(out["depth"], 5.0, rtol=0.01)
        with pytest.raises(ValueError):
            renderer.resize(0, 10)
    finally:
        renderer.resize(W, H)


def test_bad_input_is_rejected(renderer):
    cube_scene(renderer)
    with pytest.raises(ValueError, match="modalities"):
        renderer.render(camera(), {"rgb", "segmentation"})
    with pytest.raises(ValueError, match="rgb_channels"):
        renderer.render(camera(), {"rgb"}, rgb_channels=2)
    with pytest.raises(ValueError, match="unknown mesh"):
        renderer.update_instances([Instance("nope", np.eye(4), (1, 1, 1), 1)])
    with pytest.raises(ValueError, match="duplicate"):
        renderer.update_instances([Instance("cube", np.eye(4), (1, 1, 1), 1),
                                   Instance("cube", np.eye(4), (1, 1, 1), 1)])
    with pytest.raises(ValueError, match="texture"):
        renderer.update_instances([Instance("cube", np.eye(4), (1, 1, 1), 1, "/nonexistent.png")])
        renderer.render(camera(), {"rgb"})
    cube_scene(renderer)
    with pytest.raises(ValueError):
        Camera(fov=0)


def test_backends_agree(renderers, tmp_path):
    texture = tmp_path / "stripes.png"
    Image.fromarray(np.tile(np.array([[250, 40, 40], [40, 40, 250]], np.uint8).repeat(8, 0)[:, None], (4, 16, 1))
                    ).save(texture)
    outputs = {}
    for name, r in renderers.items():
        r.set_scene({"cube": mesh.box(), "ball": mesh.sphere(0.6, 20), "floor": mesh.plane((20.0, 20.0))},
                    [Instance("cube", trs((0.3, 0.2, 4.0), (0, 30, 0)), (0.9, 0.1, 0.1), 7),
                     Instance("ball", trs((-1.2, 0.0, 5.0)), (1, 1, 1), 8, str(texture)),
                     Instance("floor", trs((0.0, -1.0, 0.0)), (0.5, 0.5, 0.5), 2)],
                    [LIGHT, Light("point", position=(0.0, 1.5, 3.0), color=(1.0, 0.9, 0.8), intensity=0.4)],
                    ambient=(0.2, 0.2, 0.25), background=(0.1, 0.1, 0.1))
        out = r.render(camera(position=(0.1, 0.5, 0.0), rotation=(8, 6, 0)), set(MODALITIES),
                       previous_camera=camera(rotation=(5, 3, 0)))
        outputs[name] = {k: v.copy() for k, v in out.items()}
    ref = outputs["egl"]
    assert set(np.unique(ref["instance"])) == {0, 2, 7, 8}
    for name in ("glx", "vulkan"):
        other = outputs[name]
        assert (np.abs(ref["rgb"].astype(int) - other["rgb"]) <= 1).mean() > 0.995, name
        assert (ref["instance"] == other["instance"]).mean() > 0.995, name
        same = ref["instance"] == other["instance"]
        np.testing.assert_allclose(other["depth"][same], ref["depth"][same], rtol=1e-4)
        np.testing.assert_allclose(other["normals"][same], ref["normals"][same], atol=1e-4)
        np.testing.assert_allclose(other["flow"][same], ref["flow"][same], atol=1e-2)


def test_unknown_backend_and_missing_display(monkeypatch):
    with pytest.raises(ValueError, match="unknown render back-end"):
        create_renderer("metal", W, H)
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(PlatformError, match="DISPLAY"):
        create_renderer("glx", W, H)
    with pytest.raises(PlatformError, match="out of range"):
        create_renderer("vulkan", W, H, device_index=99)


@pytest.mark.parametrize("backend", ["egl", "vulkan"])
def test_empty_scenes_render_background_and_closed_renderer_refuses(backend):
    r = create_renderer(backend, 32, 24)
    try:
        out = r.render(camera(), {"rgb", "depth", "instance"})  # no set_scene yet
        assert (out["rgb"] == 0).all() and (out["depth"] == 20.0).all() and (out["instance"] == 0).all()
        empty = mesh.Mesh(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)))
        r.set_scene({"empty": empty}, [Instance("empty", np.eye(4), (1, 1, 1), 1)], [], background=(1, 1, 1))
        assert (r.render(camera(), {"rgb"})["rgb"] == 255).all()
    finally:
        r.close()
    r.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        r.render(camera(), {"rgb"})
