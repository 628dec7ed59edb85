"""PlayerSession rendering in-process through EGL: textures, OBJ and glTF meshes from scene files, the payload's image
order (protocol.md 2.4), per-step modality switches, resolution changes and robustness to a failing renderer."""

import numpy as np
import pytest
import yaml
from PIL import Image

from unirender.player.session import PlayerSession

W, H = 120, 90


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("assets")
    checker = np.zeros((8, 8, 3), np.uint8)
    checker[(np.indices((8, 8)).sum(axis=0) % 2) == 0] = (250, 250, 250)
    Image.fromarray(checker).resize((64, 64), Image.NEAREST).save(d / "checker.png")
    # a tetrahedron 1 m high standing on the floor
    (d / "tetra.obj").write_text(
        "v -0.5 0 -0.5\nv 0.5 0 -0.5\nv 0 0 0.5\nv 0 1 0\nf 1 2 3\nf 1 4 2\nf 2 4 3\nf 3 4 1\n"
    )
    import trimesh

    trimesh.creation.box(extents=(0.4, 0.6, 0.3)).export(d / "crate.glb")  # glTF binary, centred
    # a box whose file coordinates lie at +x of its origin: Unity's importer negates x, so it shows at -x
    trimesh.creation.box(extents=(0.4, 0.4, 0.4)).apply_translation((0.4, 0.2, 0.0)).export(d / "offset.obj")
    scene = {
        "rooms": [{"size": [6, 6], "ceiling": False}],
        "objects": [
            {
                "objectType": "Board",
                "position": [-0.6, 1.5, 2.0],
                "scale": [1.0, 1.0, 0.05],
                "texture": "checker.png",
                "color": [1, 1, 1],
            },
            {
                "objectType": "Tetra",
                "mesh": {"file": "tetra.obj"},
                "position": [0.8, 1.0, 2.0],
                "color": [0.1, 0.7, 0.2],
            },
            {
                "objectType": "Crate",
                "mesh": {"file": "crate.glb"},
                "position": [0.0, 0.3, 1.5],
                "color": [0.8, 0.1, 0.1],
            },
            {
                "objectType": "Offset",
                "mesh": {"file": "offset.obj"},
                "position": [0.0, 0.0, 3.0],
                "color": [0.2, 0.2, 0.9],
            },
        ],  # fmt: skip
        "agents": [{"position": [0, 0]}],
    }
    path = d / "textured.yaml"
    path.write_text(yaml.safe_dump(scene))
    return str(path)


@pytest.fixture(scope="module")
def session(scene_file):
    s = PlayerSession("egl", W, H, scene=scene_file)
    yield s
    s.close()


def frame(emission, name="image", channels=3):
    (data,) = [b for n, b in emission.images if n == name]
    return np.frombuffer(data, np.uint8).reshape(H, W, channels)[::-1]  # wire rows are bottom-up


def test_texture_and_obj_mesh_render(session):
    e = session.step({"action": "Initialize", "renderInstanceSegmentation": True}, patches=False)
    meta = e.metadata["agents"][0]
    ids = {c["name"]: tuple(c["color"]) for c in meta["colors"]}
    inst = np.frombuffer([b for n, b in e.images if n == "image_ids"][0], np.uint8).reshape(H, W, 4)[::-1]
    board = (inst[..., :3] == ids["Board|-00.60|+01.50|+02.00"]).all(axis=-1)
    tetra = (inst[..., :3] == ids["Tetra|+00.80|+01.00|+02.00"]).all(axis=-1)
    assert board.sum() > 200 and tetra.sum() > 100
    rgb = frame(e)
    lum = rgb[board].mean(axis=1)
    assert lum.min() < 40 and lum.max() > 150  # both checker colours show: the texture is sampled
    green = rgb[tetra].astype(int)
    assert (green[:, 1] > green[:, 0] + 20).all()  # the OBJ is drawn with its colour
    crate = (inst[..., :3] == ids["Crate|+00.00|+00.30|+01.50"]).all(axis=-1)
    assert crate.sum() > 100  # the glTF file: ~13 px wide straight ahead, below the horizon
    assert np.flatnonzero(crate.any(axis=0)).mean() == pytest.approx(W / 2 - 0.5, abs=1.5)
    assert np.flatnonzero(crate.any(axis=1)).min() > H / 2
    red = rgb[crate].astype(int)
    assert (red[:, 0] > red[:, 1] + 20).all()


def test_file_meshes_are_imported_as_unity_does_x_negated(session):
    e = session.step({"action": "Initialize", "renderInstanceSegmentation": True}, patches=False)
    meta = e.metadata["agents"][0]
    ids = {c["name"]: tuple(c["color"]) for c in meta["colors"]}
    inst = np.frombuffer([b for n, b in e.images if n == "image_ids"][0], np.uint8).reshape(H, W, 4)[::-1]
    offset = (inst[..., :3] == ids["Offset|+00.00|+00.00|+03.00"]).all(axis=-1)
    assert offset.sum() > 30
    assert np.flatnonzero(offset.any(axis=0)).max() < W / 2  # entirely left of the centre: x was negated
    (obj,) = [o for o in meta["objects"] if o["objectType"] == "Offset"]
    box = obj["axisAlignedBoundingBox"]
    assert box["center"]["x"] == pytest.approx(-0.4, abs=1e-3)
    (key,) = [k for k in session.world.meshes.loaded if k.endswith("offset.obj")]
    assert session.world.meshes.trimesh(key).volume > 0  # the reflection kept the faces outward


def test_payload_order_and_per_step_modalities(session):
    session.step({"action": "Initialize", "renderInstanceSegmentation": False}, patches=False)
    session.step(
        {"action": "AddThirdPartyCamera", "position": [0, 2, 0], "rotation": [30, 0, 0]}, patches=False
    )
    e = session.step({"action": "Pass", "renderDepthImage": True, "renderClassImage": True}, patches=False)
    assert [n for n, _ in e.images] == [
        "image-thirdParty-camera",
        "image_thirdParty_depth",
        "image_thirdParty_image_ids",  # Unity sends ids with either segmentation
        "image_thirdParty_classes",
        "image",
        "image_depth",
        "image_ids",
        "image_classes",
    ]
    assert e.metadata["agents"][0]["colors"] is not None
    # the switches last one step only
    e = session.step({"action": "Pass"}, patches=False)
    assert [n for n, _ in e.images] == ["image-thirdParty-camera", "image"]
    assert e.metadata["agents"][0]["colors"] is None
    e = session.step({"action": "Pass", "renderImage": False}, patches=False)
    assert e.images == [] and e.metadata["agents"][0]["thirdPartyCameras"] is None


def test_change_resolution_resizes_every_image(session):
    e = session.step({"action": "ChangeResolution", "x": 64, "y": 32}, patches=False)
    meta = e.metadata["agents"][0]
    assert (meta["screenWidth"], meta["screenHeight"]) == (64, 32)
    assert all(len(b) == 64 * 32 * 3 for _, b in e.images)
    session.step({"action": "ChangeResolution", "x": W, "y": H}, patches=False)


def test_a_failing_render_is_reported_not_fatal(session, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("GL_OUT_OF_MEMORY")

    monkeypatch.setattr(session.renderer, "render", broken)
    e = session.step({"action": "MoveAhead"}, patches=False)
    meta = e.metadata["agents"][0]
    assert not meta["lastActionSuccess"] and "GL_OUT_OF_MEMORY" in meta["errorMessage"]
    assert e.images == []
    monkeypatch.undo()
    assert session.step({"action": "Pass"}, patches=False).images


def test_the_scene_is_uploaded_once_per_scene_load(session, monkeypatch):
    """Steps only move cameras (no action moves an object): the renderer keeps the uploaded scene; only a
    Reset (a new scene) uploads again."""
    session.step({"action": "Pass"}, patches=False)
    uploads = []
    real_set_scene = session.renderer.set_scene
    monkeypatch.setattr(
        session.renderer, "set_scene", lambda *a, **k: (uploads.append(1), real_set_scene(*a, **k))
    )
    for action in (
        {"action": "MoveBack"},
        {"action": "RotateRight", "degrees": 10},
        {"action": "AddThirdPartyCamera", "position": [0, 2, 0], "rotation": [90, 0, 0]},
        {"action": "Initialize", "agentCount": 2, "renderFlowImage": True},
        {"action": "ChangeResolution", "x": 40, "y": 30},
        {"action": "Pass", "agentId": 1},
    ):
        e = session.step(action, patches=False)
        assert e.metadata["agents"][0]["lastActionSuccess"], action
    assert uploads == []
    e = session.step({"action": "Reset"}, patches=False)
    assert uploads == [1] and e.images
    session.step({"action": "ChangeResolution", "x": W, "y": H}, patches=False)
