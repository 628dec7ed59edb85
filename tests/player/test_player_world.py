"""World and actions without rendering: collisions, reachability, visibility, argument errors, metadata."""

import numpy as np
import pytest

from unirender.player import actions
from unirender.player.scene import parse_scene
from unirender.player.session import PlayerSession
from unirender.player.world import AGENT_RADIUS, World

# A 4 x 4 m room, agent at the centre facing +z (north wall inner face at z = 1.95), a table at x = +1.
ROOM = {
    "name": "TestRoom",
    "rooms": [{"size": [4, 4], "walls": {"thickness": 0.1}}],
    "objects": [
        {"objectType": "Table", "position": [1.0, 0.4, 0.0], "scale": [0.6, 0.8, 0.6]},
        {"objectType": "Apple", "mesh": "sphere", "position": [0.5, 1.5, 1.0], "scale": 0.1},
        {"objectType": "Apple", "mesh": "sphere", "position": [0.5, 1.5, -1.0], "scale": 0.1},
    ],
    "agents": [{"position": [0, 0], "rotation": 0}],
}


@pytest.fixture
def session(tmp_path):
    import yaml

    path = tmp_path / "room.yaml"
    path.write_text(yaml.safe_dump(ROOM))
    s = PlayerSession(None, 300, 300, scene=str(path))  # metadata only: no renderer
    return s


def run(session, **action):
    emission = session.step(action, patches=False)
    return emission.metadata["agents"][emission.metadata["activeAgentId"]]


def test_moves_until_the_wall_blocks(session):
    for _ in range(7):  # 0 -> 1.75: the agent edge reaches z = 1.95 exactly at 1.75
        assert run(session, action="MoveAhead")["lastActionSuccess"]
    meta = run(session, action="MoveAhead")
    assert not meta["lastActionSuccess"]
    assert "Wall|room0|north" in meta["errorMessage"]
    assert meta["collided"] and meta["collidedObjects"][0].startswith("Wall|room0|north")
    assert meta["agent"]["position"]["z"] == pytest.approx(1.75)


def test_objects_block_and_thin_walls_cannot_be_tunnelled(session):
    meta = run(session, action="MoveRight", moveMagnitude=0.6)  # edge at 0.8 > table edge 0.7
    assert not meta["lastActionSuccess"] and meta["errorMessage"].startswith("Table|")
    assert meta["agent"]["position"]["x"] == 0.0
    run(session, action="Teleport", position={"x": -1.7, "y": 0.9, "z": 0})
    meta = run(session, action="MoveLeft", moveMagnitude=1.0)  # would jump across the west wall
    assert not meta["lastActionSuccess"]


def test_rotation_look_limits_and_teleport(session):
    assert run(session, action="RotateRight")["agent"]["rotation"]["y"] == 90.0
    assert run(session, action="RotateLeft", degrees=135)["agent"]["rotation"]["y"] == 315.0
    assert run(session, action="LookDown", degrees=60)["agent"]["cameraHorizon"] == 60.0
    meta = run(session, action="LookDown")
    assert not meta["lastActionSuccess"] and "beyond 60" in meta["errorMessage"]
    assert run(session, action="LookUp", degrees=60)["agent"]["cameraHorizon"] == 0.0
    assert run(session, action="LookUp")["agent"]["cameraHorizon"] == -30.0  # 30 degrees by default
    meta = run(session, action="LookUp", degrees=1)
    assert not meta["lastActionSuccess"] and "beyond 30" in meta["errorMessage"]
    assert meta["agent"]["cameraHorizon"] == -30.0
    meta = run(session, action="TeleportFull", position={"x": -1, "y": 0.9, "z": -1}, rotation={"y": 180},
               horizon=-30, standing=False)  # fmt: skip
    assert meta["lastActionSuccess"], meta["errorMessage"]
    assert meta["agent"]["position"] == {"x": -1.0, "y": 0.9, "z": -1.0}
    assert meta["agent"]["isStanding"] is False and meta["cameraPosition"]["y"] < 0.9 + 0.675
    meta = run(session, action="Teleport", position={"x": 1.0, "y": 0.9, "z": 0.0})  # inside the table
    assert not meta["lastActionSuccess"] and "Table" in meta["errorMessage"]
    meta = run(session, action="Teleport", position={"x": 5.0, "y": 0.9, "z": 0.0})
    assert not meta["lastActionSuccess"] and "outside" in meta["errorMessage"]


@pytest.mark.parametrize(
    ("action", "code", "text"),
    [
        ({"action": "Fly"}, "InvalidAction", "Fly"),
        ({"action": 7}, "InvalidAction", "7"),
        ({"action": "MoveAhead", "speed": 2}, "InvalidArgument", "speed"),
        ({"action": "MoveAhead", "moveMagnitude": "far"}, "InvalidArgument", "moveMagnitude"),
        ({"action": "MoveAhead", "moveMagnitude": -1}, "InvalidArgument", "moveMagnitude"),
        ({"action": "TeleportFull", "position": {"x": 0, "y": 0.9, "z": 0}}, "MissingArguments", "rotation"),
        ({"action": "ChangeResolution", "x": 0, "y": 10}, "InvalidArgument", "resolution"),
        ({"action": "ChangeQuality", "quality": "Epic"}, "InvalidArgument", "Epic"),
        (
            {"action": "Initialize", "cameraNearPlane": 5, "cameraFarPlane": 1},
            "InvalidArgument",
            "cameraNearPlane",
        ),
        ({"action": "Initialize", "agentMode": "arm"}, "InvalidArgument", "agentMode"),
        ({"action": "Pass", "agentId": 3}, "InvalidArgument", "agentId"),
        ({"action": "Pass", "agentId": float("inf")}, "InvalidArgument", "agentId"),  # JSON's Infinity
        (
            {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": float("nan")},
            "InvalidArgument",
            "integer",
        ),
        ({"action": "Reset", "sceneName": "/no/such/scene.yaml"}, "InvalidArgument", "unknown scene"),
        ({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0}, "InvalidArgument", "does not exist"),
    ],
)
def test_bad_actions_fail_with_ai2thor_error_codes(session, action, code, text):
    meta = run(session, **action)
    assert meta["lastActionSuccess"] is False
    assert meta["errorCode"] == code
    assert text in meta["errorMessage"]


def test_a_crashing_handler_becomes_an_error_result(session, monkeypatch):
    def boom(session, agent):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(actions.ACTIONS, "Pass", actions.ActionSpec("Pass", boom, {}))
    meta = run(session, action="Pass")
    assert not meta["lastActionSuccess"] and "ZeroDivisionError" in meta["errorMessage"]
    assert run(session, action="RotateRight")["lastActionSuccess"]  # still alive


def test_change_quality_accepts_unity_quality_names(session):
    for name in ("Very Low", "MediumCloseFitShadows", "High WebGL", "Ultra"):
        assert run(session, action="ChangeQuality", quality=name)["lastActionSuccess"], name
        assert session.quality == name


def test_initialize_returns_planes_and_settings_reset_on_reset(session):
    meta = run(
        session, action="Initialize", gridSize=0.5, cameraNearPlane=0.2, cameraFarPlane=30.0, fieldOfView=60
    )
    assert meta["actionReturn"] == {"cameraNearPlane": 0.2, "cameraFarPlane": 30.0}
    assert meta["fov"] == 60.0
    assert run(session, action="MoveBack")["agent"]["position"]["z"] == -0.5
    meta = run(session, action="Reset")
    assert meta["fov"] == 90.0 and meta["agent"]["position"]["z"] == 0.0 and meta["lastAction"] == "Reset"


def test_metadata_minimum_and_objects(session):
    meta = run(session, action="Pass")
    for key in ("screenWidth", "screenHeight", "thirdPartyCameras", "colors", "lastActionSuccess", "errorCode",
                "errorMessage", "actionReturn", "lastAction", "sceneName", "agent", "objects", "isSceneAtRest",
                "depthFormat", "fov", "agentId"):  # fmt: skip
        assert key in meta, key
    assert meta["sceneName"] == "TestRoom" and meta["depthFormat"] == "Meters"
    assert meta["colors"] is None  # no ids image sent
    objs = {o["objectId"]: o for o in meta["objects"]}
    front, back = objs["Apple|+00.50|+01.50|+01.00"], objs["Apple|+00.50|+01.50|-01.00"]
    assert front["visible"] and not back["visible"]  # in front within 1.5 m vs behind the camera
    assert front["distance"] == pytest.approx(np.linalg.norm([0.5, 1.5 - 1.575, 1.0]), abs=1e-3)
    table = objs["Table|+01.00|+00.40|+00.00"]
    assert table["axisAlignedBoundingBox"]["size"] == pytest.approx({"x": 0.6, "y": 0.8, "z": 0.6})
    assert len(table["axisAlignedBoundingBox"]["cornerPoints"]) == 8


def test_query_actions_use_metadata_patches_only_over_fifo(session):
    full = session.step({"action": "GetScenesInBuild", "sequenceId": 1}, patches=False)
    assert full.patch is None and "FloorPlan1_physics" in full.metadata["agents"][0]["actionReturn"]
    patch = session.step({"action": "GetReachablePositions", "sequenceId": 2}, patches=True).patch
    assert set(patch) == {
        "lastAction",
        "errorMessage",
        "errorCode",
        "lastActionSuccess",
        "agentId",
        "actionReturn",
    }
    positions = patch["actionReturn"]
    assert {"x": 0.0, "y": 0.9, "z": 0.0} in positions
    world = session.world
    pts = np.array([[p["x"], p["z"]] for p in positions])
    assert not world.blocking_at(pts, agents=False)
    assert pts[:, 0].max() <= 2 - 0.05 - AGENT_RADIUS + 1e-9
    session.step({"action": "Initialize", "fastActionEmit": False}, patches=True)
    assert session.step({"action": "GetReachablePositions"}, patches=True).patch is None


def test_multi_agent_spawn_and_agent_collisions(session):
    meta = run(session, action="Initialize", agentCount=3)
    assert meta["lastActionSuccess"]
    agents = session.world.agents
    assert len(agents) == 3
    for a in agents:
        assert not session.world.blocking_at([a.position[[0, 2]]], ignore_agent=a.agent_id)
    # agent 1 walks into agent 0
    a0, a1 = agents[0], agents[1]
    assert session.world.place_agent(a0, np.array([-1.0, 0.9, -1.0])).success
    assert session.world.place_agent(a1, np.array([-1.0, 0.9, -1.5])).success
    a1.rotation = 0.0
    emission = session.step({"action": "MoveAhead", "agentId": 1}, patches=False)
    assert emission.metadata["activeAgentId"] == 1
    meta = emission.metadata["agents"][1]
    assert not meta["lastActionSuccess"] and "Agent 0" in meta["errorMessage"]
    assert emission.metadata["agents"][0]["lastAction"] == "Initialize"  # unchanged for the other agent


def test_sequence_id_is_echoed(session):
    assert session.step({"action": "Pass", "sequenceId": 41}, patches=False).metadata["sequenceId"] == 41
    assert session.step({"action": "Pass"}, patches=False).metadata["sequenceId"] == 0


def test_world_visibility_respects_distance_and_frustum():
    world = World(parse_scene(ROOM))
    agent = world.agents[0]
    cam = agent.camera_position()
    vis, _ = world.visibility(cam, (0, 0, 0), 90, 1.0, 0.1, 1.5)
    ids = [o.object_id for o, v in zip(world.objects, vis, strict=True) if v]
    assert "Apple|+00.50|+01.50|+01.00" in ids and "Apple|+00.50|+01.50|-01.00" not in ids
    vis, _ = world.visibility(cam, (0, 180, 0), 90, 1.0, 0.1, 1.5)
    ids = [o.object_id for o, v in zip(world.objects, vis, strict=True) if v]
    assert "Apple|+00.50|+01.50|-01.00" in ids and "Apple|+00.50|+01.50|+01.00" not in ids
