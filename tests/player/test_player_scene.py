"""Scene files: built-in scenes, validation errors with key paths, rooms expanded into structure."""

import json

import pytest

from unirender.player.scene import (
    SceneError,
    builtin_scene_names,
    find_scene,
    format_object_id,
    load_scene_file,
    parse_scene,
)
from unirender.player.world import World

MINIMAL = {
    "rooms": [{"size": [4, 3]}],
    "objects": [{"objectType": "Apple", "mesh": "sphere", "position": [1, 0.5, 1]}],
}


def test_builtin_scenes_have_distinct_layouts_and_10_to_60_objects():
    names = builtin_scene_names()
    assert len(names) >= 3
    layouts = set()
    for name in names:
        scene = find_scene(name)
        assert scene.name == name
        furniture = [o for o in scene.objects if not o.structural]
        assert 10 <= len(furniture) <= 60, (name, len(furniture))
        layouts.add(tuple((f.x0, f.z0, f.x1, f.z1) for f in scene.floors))
        world = World(scene, agent_count=len(scene.agents))
        for agent, pose in zip(world.agents, scene.agents, strict=True):
            # start poses are free as written (not relocated by the spawn search)
            assert tuple(agent.position) == pytest.approx(pose.position)
            assert not world.blocking_at([agent.position[[0, 2]]], ignore_agent=agent.agent_id)
    assert len(layouts) == len(names)


def test_floorplan_alias_and_unknown_scene():
    assert find_scene("FloorPlan1").name == "FloorPlan1_physics"
    with pytest.raises(SceneError, match="unknown scene 'Nowhere'.*FloorPlan1_physics"):
        find_scene("Nowhere")


def test_generated_object_ids_follow_ai2thor_form():
    scene = parse_scene(MINIMAL)
    apple = [o for o in scene.objects if o.object_type == "Apple"][0]
    assert apple.object_id == "Apple|+01.00|+00.50|+01.00" == format_object_id("Apple", (1, 0.5, 1))


def test_room_expands_to_floor_walls_and_ceiling_with_door_gap():
    scene = parse_scene(
        {
            "rooms": [
                {"name": "r", "size": [4, 3], "walls": {"openings": {"north": [{"offset": 0.5, "width": 1}]}}}
            ]
        }
    )
    types = sorted(o.object_type for o in scene.objects)
    assert types.count("Floor") == 1 and types.count("Ceiling") == 1
    north = [o for o in scene.objects if o.object_id.startswith("Wall|r|north")]
    assert len(north) == 2  # split around the door
    # the gap is x in [0, 1] at z = +1.5
    world = World(scene)
    assert not world.blocking_at([[0.5, 1.5]], agents=False)
    assert world.blocking_at([[-1.0, 1.5]], agents=False)


def test_validation_reports_every_error_with_its_key_path(tmp_path):
    bad = {
        "rooms": [{"size": [4, -1], "colour": 1}],
        "objects": [
            {"objectType": "Mug", "mesh": "teapot", "position": [0, 0]},
            {"objectType": "Cup", "color": [2, 0, 0], "scale": [1, 0, 1], "position": [0, 1, 0]},
            {"objectType": "A|B", "position": [1, 1, 1]},
            {
                "objectType": "Box",
                "mesh": {"file": "missing.obj"},
                "position": [0, 1, 0],
                "objectId": "nobar",
            },
        ],
        "lights": [{"kind": "spot", "direction": [0, -1, 0]}],
        "wat": True,
    }
    with pytest.raises(SceneError) as info:
        parse_scene(bad, base_dir=tmp_path)
    paths = {p for p, _ in info.value.errors}
    for expected in (
        "rooms[0].size[1]",
        "rooms[0].colour",
        "objects[0].mesh",
        "objects[0].position",
        "objects[1].color",
        "objects[1].scale[1]",
        "objects[2].objectType",
        "objects[3].mesh.file",
        "objects[3].objectId",
        "lights[0].kind",
        "wat",
    ):
        assert expected in paths, (expected, sorted(paths))
    assert "missing.obj" in str(info.value)


def test_duplicate_object_ids_and_missing_rooms_are_errors():
    with pytest.raises(SceneError, match="not unique"):
        parse_scene(
            {"rooms": [{"size": [3, 3]}], "objects": [{"objectType": "A", "position": [0, 1, 0]}] * 2}
        )
    with pytest.raises(SceneError, match="at least one room"):
        parse_scene({"objects": []})


def test_scene_files_yaml_json_and_syntax_errors(tmp_path):
    j = tmp_path / "room.json"
    j.write_text(json.dumps(MINIMAL))
    assert load_scene_file(j).name == "room"
    y = tmp_path / "broken.yaml"
    y.write_text("rooms: [\n")
    with pytest.raises(SceneError, match="not valid YAML"):
        load_scene_file(y)
    with pytest.raises(SceneError, match="must end in"):
        load_scene_file(tmp_path / "room.txt")
    with pytest.raises(SceneError, match="cannot read"):
        load_scene_file(tmp_path / "absent.yaml")


def test_file_mesh_and_texture_resolve_relative_to_the_scene(tmp_path):
    (tmp_path / "tri.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 2 1\nf 1 2 3\n")
    data = dict(
        MINIMAL, objects=[{"objectType": "Thing", "mesh": {"file": "tri.obj"}, "position": [0, 0, 0]}]
    )
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    scene = load_scene_file(path)
    thing = [o for o in scene.objects if o.object_type == "Thing"][0]
    assert thing.mesh == f"file:{tmp_path / 'tri.obj'}"
    world = World(scene)
    obj = world.by_id[thing.object_id]
    # x is negated on import, as Unity's OBJ/glTF importers do (right-handed file -> left-handed world)
    assert tuple(obj.lo) == pytest.approx((-1, 0, 0)) and tuple(obj.hi) == pytest.approx((0, 2, 1))


def test_gltf_mesh_bounds(tmp_path):
    import trimesh

    trimesh.creation.box(extents=(0.4, 1.0, 0.2)).export(tmp_path / "crate.glb")
    data = dict(
        MINIMAL, objects=[{"objectType": "Crate", "mesh": {"file": "crate.glb"}, "position": [0, 0.5, 0]}]
    )
    world = World(parse_scene(data, base_dir=tmp_path))
    crate = [o for o in world.objects if o.spec.object_type == "Crate"][0]
    assert tuple(crate.hi - crate.lo) == pytest.approx((0.4, 1.0, 0.2))


def test_rooms_joined_by_a_door_are_both_reachable():
    world = World(find_scene("FloorPlan301_physics"))
    positions = world.reachable_positions(world.agents[0], 0.25)
    bedroom = [p for p in positions if p["x"] < 2.4]
    bathroom = [p for p in positions if p["x"] > 2.6]
    assert bedroom and bathroom  # the agent starts in the bedroom and reaches the bathroom through the door
    door = [p for p in positions if 2.4 <= p["x"] <= 2.6]
    assert door and all(-1.5 < p["z"] < -0.5 for p in door)  # only through the 1 m opening


def test_scene_check_command(tmp_path, capsys):
    from unirender.player.scene import main

    good = tmp_path / "good.json"
    good.write_text(json.dumps(MINIMAL))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rooms": [{"size": [0, 3]}]}))
    assert main([str(good)]) == 0
    assert "ok: scene 'good', 1 room(s), 1 objects" in capsys.readouterr().out
    assert main([str(good), str(bad)]) == 1
    assert "rooms[0].size[0]: must be > 0" in capsys.readouterr().out
