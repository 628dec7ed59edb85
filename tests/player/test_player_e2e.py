"""The reference player for real: launched by the Controller, rendering through EGL (and GLX on Xvfb, and
Vulkan on lavapipe), over both transports. Expected values come from the test scene's geometry and a plain
pinhole model written here, not from the player's own code.

Test scene (a file, loaded with Reset sceneName=<path>): a 6 x 6 m room, walls 0.1 m thick (north wall inner
face at z = 2.95), the agent at the centre facing +z with its camera 1.575 m up, a box and two mugs ahead.
"""

import math
import os
import signal

import numpy as np
import pytest
import yaml

from unirender.controller import Controller
from unirender.errors import PlayerCrashedError
from unirender.player.encode import decode_flow

SIZE = 300
F_PX = (SIZE / 2) / math.tan(math.radians(90 / 2))  # fov 90
CAMERA = np.array([0.0, 1.575, 0.0])
BOX_ID = "Box|+01.00|+00.50|+02.00"
MUG_IDS = ("Mug|-01.00|+00.30|+02.00", "Mug|-00.60|+00.30|+02.00")
SCENE = {
    "name": "PlayerTestRoom",
    "rooms": [{"name": "room", "size": [6, 6], "height": 3.0, "walls": {"thickness": 0.1}}],
    "objects": [
        {
            "objectType": "Box",
            "mesh": "box",
            "position": [1.0, 0.5, 2.0],
            "scale": 0.5,
            "color": [0.8, 0.1, 0.1],
        },
        {"objectType": "Mug", "mesh": "cylinder", "position": [-1.0, 0.3, 2.0], "scale": [0.2, 0.3, 0.2]},
        {"objectType": "Mug", "mesh": "cylinder", "position": [-0.6, 0.3, 2.0], "scale": [0.2, 0.3, 0.2]},
    ],
    "lights": [{"kind": "directional", "direction": [0.3, -1.0, 0.5], "intensity": 0.8}],
    "agents": [{"position": [0, 0], "rotation": 0}],
}
ALL_MODALITIES = {
    "renderDepthImage": True,
    "renderInstanceSegmentation": True,
    "renderSemanticSegmentation": True,
    "renderNormalsImage": True,
    "renderFlowImage": True,
}


@pytest.fixture(scope="module")
def scene_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenes") / "player_test_room.yaml"
    path.write_text(yaml.safe_dump(SCENE))
    return str(path)


def load(controller, path, **init):
    """Reset to a scene file and Initialize: a path is accepted although it is not in GetScenesInBuild."""
    return controller.reset(path, **init)


def start(server, scene_path, tmp_path_factory, **kwargs):
    c = Controller(
        server=server, width=SIZE, height=SIZE, log_dir=str(tmp_path_factory.mktemp("logs")), **kwargs
    )
    try:
        load(c, scene_path, **ALL_MODALITIES)
    except BaseException:
        c.stop()
        raise
    return c


@pytest.fixture(scope="module", params=["fifo", "wsgi"])
def controller(request, scene_path, tmp_path_factory):
    c = start(request.param, scene_path, tmp_path_factory, platform="EGL")
    yield c
    c.stop()
    assert c.process.poll() is not None


@pytest.fixture
def home(controller):
    """The agent back at its start pose, camera unmoved since the previous frame."""
    controller.step(
        "TeleportFull", position={"x": 0, "y": 0.9, "z": 0}, rotation={"y": 0}, horizon=0, standing=True
    )
    return controller.step("Pass")


def project(points):
    """Pinhole projection (camera at CAMERA, looking +z) -> continuous top-down pixel coordinates."""
    p = np.asarray(points, float) - CAMERA
    return SIZE / 2 + F_PX * p[:, 0] / p[:, 2], SIZE / 2 - F_PX * p[:, 1] / p[:, 2]


def test_depth_of_the_wall_straight_ahead(home):
    assert home.metadata["depthFormat"] == "Meters"
    depth = home.depth_frame
    assert depth.shape == (SIZE, SIZE) and depth.dtype == np.float32
    assert depth[SIZE // 2, SIZE // 2] == pytest.approx(2.95, rel=0.01)
    # planar depth: the same wall is at the same depth off-centre (a ray length would grow)
    assert depth[SIZE // 2, SIZE // 2 + 60] == pytest.approx(2.95, rel=0.01)


def test_instance_mask_matches_projected_bounds(home):
    corners = np.array([[x, y, z] for x in (0.75, 1.25) for y in (0.25, 0.75) for z in (1.75, 2.25)])
    u, v = project(corners)
    expected = (
        math.ceil(u.min() - 0.5),
        math.ceil(v.min() - 0.5),
        math.floor(u.max() - 0.5),
        math.floor(v.max() - 0.5),
    )
    got = home.instance_detections2D[BOX_ID]
    assert np.abs(np.array(got) - np.array(expected)).max() <= 1, (got, expected)
    mask = home.instance_masks[BOX_ID]
    assert mask.sum() > 0.9 * (got[2] - got[0] + 1) * (got[3] - got[1] + 1) * 0.5  # a solid blob
    colors = {c["name"]: c["color"] for c in home.metadata["colors"]}
    assert len({tuple(c) for c in colors.values()}) == len(colors)  # one colour per instance / class


def test_class_masks_group_objects_of_one_type(home):
    mug = home.class_masks["Mug"]
    union = home.instance_masks[MUG_IDS[0]] | home.instance_masks[MUG_IDS[1]]
    assert union.sum() > 100
    assert np.array_equal(mug, union)
    assert not (mug & home.instance_masks[BOX_ID]).any()
    assert "Box" in home.class_masks and "Wall" in home.class_masks


def test_floor_normals_point_up(controller, home):
    event = controller.step("LookDown", degrees=60)
    floor = event.instance_masks["Floor|room"]
    assert floor.sum() > 1000
    normals = event.normals_frame[..., :3].astype(np.float64) / 255 * 2 - 1
    up = normals[floor]
    assert up[:, 1].min() > 0.98 and np.abs(up[:, [0, 2]]).max() < 0.02
    wall = event.instance_masks["Wall|room|north|0"]
    assert normals[wall][:, 2].mean() < -0.98  # the north wall faces the agent (-z)


def test_flow_is_zero_for_pass_and_leftward_for_rotate_right(controller, home):
    still = decode_flow(home.flow_frame)
    assert not still.any()
    turned = controller.step("RotateRight", degrees=5)
    flow = decode_flow(turned.flow_frame)
    # turning right moves the scene left in the image: dx < 0 everywhere; ~ f * tan(5 deg) = 13 px at the centre
    centre = flow[SIZE // 2 - 20 : SIZE // 2 + 20, SIZE // 2 - 20 : SIZE // 2 + 20]
    assert (centre[..., 0] < 0).all()
    assert np.median(centre[..., 0]) == pytest.approx(-F_PX * math.tan(math.radians(5)), abs=2.5)
    assert np.abs(np.median(centre[..., 1])) < 1.5


def test_third_party_camera_sees_what_its_pose_implies(controller, home):
    if not home.metadata["thirdPartyCameras"]:
        controller.step("AddThirdPartyCamera", position={"x": 1.0, "y": 2.5, "z": 2.0}, rotation={"x": 90, "y": 0, "z": 0},
                        fieldOfView=60)  # fmt: skip
    event = controller.step("Pass")
    cams = event.metadata["thirdPartyCameras"]
    assert cams[0]["position"] == {"x": 1.0, "y": 2.5, "z": 2.0} and cams[0]["fieldOfView"] == 60.0
    mask = event.third_party_instance_masks[0][BOX_ID]
    # straight down onto the box: its 0.5 m top face at 1.75 m fills about 2 * atan(0.25/1.75) / 60 deg of the view
    assert mask[SIZE // 2, SIZE // 2]
    rows = np.flatnonzero(mask.any(axis=1))
    expected_px = 2 * (SIZE / 2) * 0.25 / 1.75 / math.tan(math.radians(30))
    assert rows.size == pytest.approx(expected_px, abs=3)
    assert event.third_party_depth_frames[0][SIZE // 2, SIZE // 2] == pytest.approx(1.75, rel=0.01)
    for frames in (
        event.third_party_camera_frames,
        event.third_party_normals_frames,
        event.third_party_flow_frames,
    ):
        assert len(frames) == 1 and frames[0].shape[:2] == (SIZE, SIZE)


def test_update_third_party_camera_moves_its_view(controller, home):
    if not home.metadata["thirdPartyCameras"]:
        controller.step("AddThirdPartyCamera", position={"x": 1.0, "y": 2.5, "z": 2.0}, rotation={"x": 90, "y": 0, "z": 0},
                        fieldOfView=60)  # fmt: skip
        controller.step("Pass")
    try:
        # 1.8 m to the left, over the gap between the two mugs; rotation and field of view stay
        event = controller.step(
            "UpdateThirdPartyCamera", thirdPartyCameraId=0, position={"x": -0.8, "y": 2.5, "z": 2.0}
        )
        assert event.metadata["lastActionSuccess"], event.metadata["errorMessage"]
        cam = event.metadata["thirdPartyCameras"][0]
        assert cam["position"] == {"x": -0.8, "y": 2.5, "z": 2.0}
        assert cam["rotation"]["x"] == 90.0 and cam["fieldOfView"] == 60.0
        masks = event.third_party_instance_masks[0]
        assert BOX_ID not in masks  # 1.8 m to the side now: out of a 60 degree view from 1.5 m above it
        left, right = (np.flatnonzero(masks[mug].any(axis=0)) for mug in MUG_IDS)
        # the mugs' top rims (y 0.45), 2.05 m below, reach 0.3 m either side: f * 0.3 / 2.05 = 38 px off centre
        outer = (SIZE / 2) / math.tan(math.radians(30)) * 0.3 / 2.05
        assert left.min() == pytest.approx(SIZE / 2 - outer, abs=1.5)
        assert right.max() + 1 == pytest.approx(SIZE / 2 + outer, abs=1.5)
        assert left.max() < SIZE // 2 <= right.min()
        floor_depth = event.third_party_depth_frames[0][SIZE // 2, SIZE // 2]
        assert floor_depth == pytest.approx(2.5, rel=0.01)  # the floor between the mugs
        # the camera moved left since its previous frame: the floor it sees moved right in the image
        flow = decode_flow(event.third_party_flow_frames[0])
        assert np.median(flow[..., 0]) > 10 and np.abs(np.median(flow[..., 1])) < 1.5
        still = controller.step("Pass")
        assert not decode_flow(still.third_party_flow_frames[0]).any()
    finally:
        controller.step(
            "UpdateThirdPartyCamera", thirdPartyCameraId=0, position={"x": 1.0, "y": 2.5, "z": 2.0}
        )


def test_collisions_fail_the_move(controller, home):
    event = controller.step("Teleport", position={"x": 0, "y": 0.9, "z": 2.6})
    assert event.metadata["lastActionSuccess"], event.metadata["errorMessage"]
    event = controller.step("MoveAhead")
    assert not event.metadata["lastActionSuccess"]
    assert "Wall|room|north" in event.metadata["errorMessage"]
    assert event.metadata["agent"]["position"]["z"] == pytest.approx(2.6)


def test_same_actions_give_bit_identical_frames(controller, scene_path):
    def episode():
        load(controller, scene_path, **ALL_MODALITIES)
        out = []
        for action in (
            {"action": "MoveAhead"},
            {"action": "RotateRight", "degrees": 30},
            {"action": "LookDown"},
        ):
            e = controller.step(action)
            out.append({k: np.array(v) for k, v in e.frames().items()})
        return out

    first, second = episode(), episode()
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys() and {"frame", "depth_frame", "instance_segmentation_frame"} <= a.keys()
        for key in a:
            assert np.array_equal(a[key], b[key]), key


def test_multi_agent_events(controller, scene_path):
    try:
        load(controller, scene_path, agentCount=2)
        event = controller.step("RotateLeft", agentId=1)
        assert len(event.events) == 2 and event.metadata["agentId"] == 1
        assert event.events[1].metadata["agent"]["rotation"]["y"] == 270.0
        assert event.events[0].metadata["agent"]["rotation"]["y"] == 0.0
        assert not np.array_equal(event.events[0].frame, event.events[1].frame)
    finally:
        load(controller, scene_path, **ALL_MODALITIES)


def test_fifo_query_actions_are_patches_reusing_the_last_frame(controller, home):
    event = controller.step("GetReachablePositions")
    assert {"x": 0.0, "y": 0.9, "z": 0.0} in event.metadata["actionReturn"]
    assert np.array_equal(event.frame, home.frame)


def test_backends_agree_egl_glx_vulkan(scene_path, tmp_path_factory):
    frames = {}
    for platform in ("EGL", "Linux64", "CloudRendering"):
        c = Controller(
            platform=platform, width=SIZE, height=SIZE, log_dir=str(tmp_path_factory.mktemp("logs"))
        )
        try:
            event = load(c, scene_path, renderDepthImage=True, renderInstanceSegmentation=True)
            event = c.step("LookDown", degrees=30)
            assert (
                event.metadata["screenWidth"] == SIZE
            )  # CloudRendering started at its own size, then resized
            frames[platform] = (
                np.array(event.frame),
                np.array(event.depth_frame),
                event.instance_masks[BOX_ID],
            )
        finally:
            c.stop()
    ref_rgb, ref_depth, ref_box = frames["EGL"]
    for platform in ("Linux64", "CloudRendering"):
        rgb, depth, box = frames[platform]
        diff = np.abs(rgb.astype(int) - ref_rgb.astype(int))
        assert diff.mean() < 1.0 and (diff > 8).mean() < 0.01, platform
        assert np.median(np.abs(depth - ref_depth)) < 1e-3, platform
        assert (box != ref_box).sum() < 0.02 * box.sum(), platform


def test_player_killed_mid_episode_is_detected(scene_path, tmp_path_factory):
    c = Controller(
        platform="EGL", headless=True, max_restarts=0, log_dir=str(tmp_path_factory.mktemp("logs"))
    )
    try:
        event = c.step("MoveAhead")  # metadata only (-nographics): the urlencoded branch
        assert event.frame is None and event.metadata["lastActionSuccess"]
        os.kill(c.process.pid, signal.SIGKILL)
        with pytest.raises(PlayerCrashedError) as info:
            c.step("MoveAhead")
        assert info.value.signal_name == "SIGKILL"
    finally:
        c.stop()


@pytest.mark.parametrize("server", ["fifo", "wsgi"])
def test_player_killed_while_a_step_is_in_flight_is_detected(server, tmp_path_factory):
    import threading

    c = Controller(server=server, platform="EGL", width=64, height=64, max_restarts=0,
                   log_dir=str(tmp_path_factory.mktemp("logs")))  # fmt: skip
    try:
        c.step("Pass")
        os.kill(c.process.pid, signal.SIGSTOP)  # frozen: the next action is sent but never answered
        outcome = {}

        def step():
            try:
                outcome["event"] = c.step("MoveAhead")
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=step)
        thread.start()
        while thread.is_alive() and (c.last_action or {}).get("action") != "MoveAhead":
            thread.join(0.01)  # until the action is on its way
        os.kill(c.process.pid, signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive(), "the controller did not notice the dead player"
        assert isinstance(outcome.get("error"), PlayerCrashedError), outcome
        assert outcome["error"].signal_name == "SIGKILL"
        assert outcome["error"].last_action["action"] == "MoveAhead"
    finally:
        c.stop()
