"""The spec schema: loading from every file format, the Controller mapping, and errors with key paths."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from unirender.errors import SpecError
from unirender.spec import JobSpec, check_builtin_scenes, load_environment, load_spec

MINIMAL = {"episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead"]}]}


def job(**parts) -> dict:
    doc = json.loads(json.dumps(MINIMAL))
    for key, value in parts.items():
        doc[key] = value
    return doc


# (document, key path that must be reported, fragment of its message)
BAD_SPECS = [
    (job(environment={"width": 0}), "environment.width", "greater than or equal to 1"),
    (job(environment={"height": -3}), "environment.height", "greater than or equal to 1"),
    (job(environment={"platfrom": "EGL"}), "environment.platfrom", "allowed keys: executable, platform"),
    (job(environment={"platform": "Metal"}), "environment.platform", "'CloudRendering'"),
    (job(environment={"transport": "tcp"}), "environment.transport", "'fifo' or 'wsgi'"),
    (job(environment={"width": "wide"}), "environment.width", "valid integer"),
    (job(environment={"quality": "Best"}), "environment.quality", "'Ultra'"),
    (job(environment={"platform": "EGL", "executable": "/opt/thor/thor"}), "environment.platform", "builtin"),
    (job(environment={"headless": True}), "environment.headless", "renderImage=false"),
    (job(environment={"x_display": "remote:0"}), "environment.x_display", "pattern"),
    (job(environment={"initialize": {"width": 64}}), "environment.initialize", "environment settings"),
    (
        job(environment={"initialize": {"renderDepthImage": True}}),
        "environment.initialize.renderDepthImage",
        "set by render.modalities",
    ),
    (job(render={"modalities": ["rgb", "flow"]}), "render.flow_policy", "previous_step"),
    (job(render={"modalities": ["rgb", "xray"]}), "render.modalities.1", "'semantic_segmentation'"),
    (job(render={"modalities": []}), "render.modalities", "at least 1"),
    (job(render={"modalities": ["rgb", "rgb"]}), "render.modalities", "more than once"),
    (job(render={"depth_format": "Inches"}), "render.depth_format", "'Millimeters'"),
    (
        job(render={"cameras": [{"name": "a", "position": {"x": 1}}, {"name": "a", "position": {}}]}),
        "render.cameras",
        "unique",
    ),
    (job(render={"cameras": [{"name": "top"}]}), "render.cameras.0.position", "missing"),
    (
        job(render={"cameras": [{"name": "top", "position": {}, "field_of_view": 190}]}),
        "render.cameras.0.field_of_view",
        "less than 180",
    ),
    (
        job(
            environment={"executable": "/opt/thor/thor", "platform": "Linux64"},
            render={
                "modalities": ["flow"],
                "flow_policy": "previous_step",
                "cameras": [{"name": "c", "position": {}}],
            },
        ),
        "render.modalities",
        "third-party",
    ),
    (job(episodes=[]), "episodes", "at least 1"),
    ({}, "episodes", "missing"),
    (job(episodes=[{"actions": ["MoveAhead"]}]), "episodes.0.scene", "missing"),
    (
        job(episodes=[{"scene": "s", "actions": ["MoveAhead"], "poses": [{"position": {}}]}]),
        "episodes.0",
        "exactly one of",
    ),
    (job(episodes=[{"scene": "s"}]), "episodes.0", "exactly one of"),
    (job(episodes=[{"scene": "s", "actions": [{"degrees": 30}]}]), "episodes.0.actions", "'action' name"),
    (job(episodes=[{"scene": "s", "actions": ["Reset"]}]), "episodes.0.actions", "issued by the job"),
    (
        job(episodes=[{"scene": "s", "poses": [{"position": {"x": 1}, "horizon": 120}]}]),
        "episodes.0.poses.0.horizon",
        "90",
    ),
    (
        job(episodes=[{"scene": "s", "generator": {"kind": "grid", "rotatons": [0]}}]),
        "episodes.0.generator.rotatons",
        "allowed keys: kind, rotations, horizons, every, max_positions",
    ),
    (
        job(episodes=[{"scene": "s", "generator": {"kind": "spiral"}}]),
        "episodes.0.generator",
        "'grid', 'random'",
    ),
    (
        job(episodes=[{"scene": "s", "generator": {"kind": "random"}}]),
        "episodes.0.generator.count",
        "missing",
    ),
    (
        job(episodes=[{"scene": "s", "actions": ["MoveAhead"], "repeat": 0}]),
        "episodes.0.repeat",
        "greater than",
    ),
    (job(output={"format": "hdf5"}), "output.format", "'webdataset'"),
    (job(output={"format": "npz", "depth_encoding": "png16"}), "output.depth_encoding", "needs format 'png'"),
    (job(output={"frames_per_shard": 0}), "output.frames_per_shard", "greater than"),
    (job(workers=0), "workers", "at least 1"),
    (
        job(workers="many"),
        "workers",
        "valid integer, unable to parse string as an integer (got 'many'); or Input should be 'auto'",
    ),
    (
        job(episodes=[{"scene": "s", "actions": [3]}]),
        "episodes.0.actions.0",
        "valid string (got 3); or Input should be a valid dictionary",
    ),
    (job(colour="blue"), "colour", "allowed keys: version, name, environment"),
]


@pytest.mark.parametrize(("doc", "path", "fragment"), BAD_SPECS, ids=[p for _, p, _ in BAD_SPECS])
def test_bad_spec_names_the_key_and_what_is_allowed(doc, path, fragment):
    with pytest.raises(SpecError) as info:
        load_spec(doc)
    paths = dict(info.value.errors)
    assert path in paths, info.value.errors
    assert fragment in paths[path], paths[path]
    assert path in str(info.value)  # the message a person reads names it too


def test_all_errors_are_reported_at_once():
    with pytest.raises(SpecError) as info:
        load_spec(job(environment={"width": 0, "height": 0, "transport": "tcp"}))
    assert {p for p, _ in info.value.errors} == {
        "environment.width",
        "environment.height",
        "environment.transport",
    }


SPEC_YAML = """
name: kitchen
environment: {width: 64, height: 48, transport: wsgi, initialize: {gridSize: 0.25}}
render:
  modalities: [rgb, depth, flow]
  flow_policy: previous_step
  cameras: [{name: top, position: {x: 0, y: 2.5, z: 0}, rotation: 90, field_of_view: 60}]
episodes:
  - {scene: FloorPlan1_physics, actions: [MoveAhead, {action: RotateRight, degrees: 30}], repeat: 2}
  - {scene: FloorPlan1_physics, poses: [{position: {x: 0, y: 0.9, z: 0}, rotation: 90}]}
  - {scene: FloorPlan1_physics, generator: {kind: random, count: 5, seed: 3}}
output: {directory: out/kitchen, format: webdataset}
"""

SPEC_TOML = """
name = "kitchen"
[environment]
width = 64
height = 48
transport = "wsgi"
initialize = {gridSize = 0.25}
[render]
modalities = ["rgb", "depth", "flow"]
flow_policy = "previous_step"
cameras = [{name = "top", position = {x = 0, y = 2.5, z = 0}, rotation = 90, field_of_view = 60}]
[[episodes]]
scene = "FloorPlan1_physics"
actions = ["MoveAhead", {action = "RotateRight", degrees = 30}]
repeat = 2
[[episodes]]
scene = "FloorPlan1_physics"
poses = [{position = {x = 0, y = 0.9, z = 0}, rotation = 90}]
[[episodes]]
scene = "FloorPlan1_physics"
generator = {kind = "random", count = 5, seed = 3}
[output]
directory = "out/kitchen"
format = "webdataset"
"""


def test_yaml_json_and_toml_load_the_same_spec(tmp_path):
    import yaml

    (tmp_path / "job.yaml").write_text(SPEC_YAML)
    (tmp_path / "job.toml").write_text(SPEC_TOML)
    (tmp_path / "job.json").write_text(json.dumps(yaml.safe_load(SPEC_YAML)))
    specs = [load_spec(tmp_path / f"job.{ext}") for ext in ("yaml", "json", "toml")]
    assert specs[0] == specs[1] == specs[2]
    spec = specs[0]
    assert spec.render.cameras[0].rotation.y == 90  # a bare number is a rotation about y
    assert [e.known_frame_count for e in spec.episodes] == [3, 1, 5]
    assert spec.episodes[0].action_dicts()[0] == {"action": "MoveAhead"}


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("bad.yaml", "episodes: [unclosed", "not valid YAML"),
        ("bad.json", "{", "not valid JSON"),
        ("bad.toml", "episodes = [", "not valid TOML"),
        ("list.yaml", "- a\n- b\n", "mapping at the top level"),
        ("job.ini", "[x]", "unknown spec file type"),
    ],
)
def test_unreadable_files_are_spec_errors(tmp_path, name, text, fragment):
    (tmp_path / name).write_text(text)
    with pytest.raises(SpecError, match=fragment):
        load_spec(tmp_path / name)


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")


def test_controller_kwargs_fit_the_controller_signature():
    from unirender.controller import Controller

    spec = load_spec(job(render={"modalities": ["rgb", "depth", "normals"], "depth_format": "Millimeters"}))
    kwargs = spec.controller_kwargs()
    inspect.signature(Controller).bind(**kwargs)  # raises TypeError if a name is wrong
    assert kwargs["server"] == "fifo" and kwargs["depth_format"] == "Millimeters"
    assert kwargs["renderDepthImage"] is True and kwargs["renderNormalsImage"] is True
    assert kwargs["renderFlowImage"] is False and kwargs["renderInstanceSegmentation"] is False


def test_initialize_parameters_pass_through_unchanged():
    env = load_environment({"environment": {"initialize": {"gridSize": 0.1, "custom": {"a": [1, 2]}}}})
    kwargs = env.controller_kwargs()
    assert kwargs["gridSize"] == 0.1 and kwargs["custom"] == {"a": [1, 2]}
    assert "renderDepthImage" not in kwargs  # without a render spec no modality flags are set


def test_scenes_the_builtin_player_lacks_are_spec_errors():
    spec = load_spec(
        job(episodes=[MINIMAL["episodes"][0], {"scene": "FloorPlan9", "actions": ["MoveAhead"]}])
    )
    with pytest.raises(SpecError) as info:
        check_builtin_scenes(spec)
    paths = dict(info.value.errors)
    assert list(paths) == ["episodes.1.scene"] and "episodes.1.scene" in str(info.value)
    assert "built-in scenes: FloorPlan1_physics, FloorPlan201_physics" in paths["episodes.1.scene"]
    episodes = [{"scene": s, "actions": ["Pass"]} for s in ("FloorPlan201", "rooms/flat.yaml", "my.json")]
    check_builtin_scenes(load_spec(job(episodes=episodes)))  # an alias and scene files pass
    unity = job(
        environment={"executable": "/opt/thor/thor"}, episodes=[{"scene": "Kitchen_7", "actions": ["Pass"]}]
    )
    check_builtin_scenes(load_spec(unity))  # a Unity build's scenes are its own business


def test_content_hash_follows_content_not_placement():
    base = load_spec(job())
    moved = load_spec(job(output={"directory": "elsewhere"}, workers=3, name="other"))
    bigger = load_spec(job(environment={"width": 301}))
    assert base.content_hash() == moved.content_hash()
    assert base.content_hash() != bigger.content_hash()


def test_schema_command_prints_json_schema_that_forbids_unknown_keys():
    out = subprocess.run(
        [sys.executable, "-m", "unirender.cli", "spec", "schema"], capture_output=True, text=True, check=True
    ).stdout
    schema = json.loads(out)
    assert schema["title"] == "JobSpec" and "episodes" in schema["required"]
    assert schema["additionalProperties"] is False
    env = schema["$defs"]["EnvironmentSpec"]
    assert env["properties"]["transport"]["enum"] == ["fifo", "wsgi"]
    assert schema == JobSpec.model_json_schema()


def test_schema_command_takes_the_family_by_name_and_mlagents_as_a_deprecated_alias():
    from unirender.spec.families import SPEC_FAMILIES

    def schema(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "unirender.cli", "spec", "schema", *args],
                              capture_output=True, text=True, check=True)

    by_name = schema("--family", "mlagents")
    assert json.loads(by_name.stdout) == SPEC_FAMILIES["mlagents"].job_model.model_json_schema()
    assert by_name.stderr == ""
    alias = schema("--mlagents")
    assert alias.stdout == by_name.stdout and "--mlagents is deprecated: use --family mlagents" in alias.stderr
    assert json.loads(schema("--family", "ai2thor", "--environment").stdout)["title"] == "EnvironmentSpec"
    unknown = subprocess.run([sys.executable, "-m", "unirender.cli", "spec", "schema", "--family", "nope"],
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and "choose from 'ai2thor', 'mlagents'" in unknown.stderr


def test_check_command_reports_errors_with_exit_code_2(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "episodes: [{scene: s, actions: [MoveAhead]}]\nenvironment: {width: 0}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "unirender.cli", "spec", "check", str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "environment.width" in proc.stderr and "Traceback" not in proc.stderr


def test_check_command_prints_the_resolved_plan(tmp_path):
    (tmp_path / "job.yaml").write_text(SPEC_YAML)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "unirender.cli",
            "spec",
            "check",
            str(tmp_path / "job.yaml"),
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines()[1:])
    assert lines["players"] == "2"
    assert lines["frames"] == str(3 * 2 + 1 + 5)
    assert lines["platform"].split()[0] in ("EGL", "CloudRendering", "Linux64")


def test_allowed_platforms_and_qualities_are_the_ones_the_code_knows():
    from typing import get_args

    from unirender.controller import QUALITY_SETTINGS
    from unirender.platforms import PLATFORMS
    from unirender.spec.models import PlatformName, Quality

    assert set(get_args(PlatformName)) == {"auto", *PLATFORMS}
    assert set(get_args(Quality)) == set(QUALITY_SETTINGS)


def test_linux_headless_simulation_is_a_platform_for_unity_builds():
    env = load_environment({"executable": "/opt/thor-LinuxHeadlessSimulation-abc/thor-LinuxHeadlessSimulation-abc",
                            "platform": "LinuxHeadlessSimulation"})
    assert env.controller_kwargs()["platform"] == "LinuxHeadlessSimulation"

# -- file, line and column; did you mean; the cap --------------------------------------------------------------
BAD_YAML = """\
name: located
environment:
  widht: 64
episodes:
  - scene: FloorPlan1_physics
    generator: {kind: grid, rotatons: [0, 90]}
output:
  format: npzz
"""

BAD_TOML = """\
name = "located"

[environment]
widht = 64

[[episodes]]
scene = "FloorPlan1_physics"
generator = {kind = "grid", rotatons = [0, 90]}

[output]
format = "npzz"
"""

BAD_JSON = """{
  "name": "located",
  "environment": {"widht": 64},
  "episodes": [
    {"scene": "FloorPlan1_physics",
     "generator": {"kind": "grid", "rotatons": [0, 90]}}
  ],
  "output": {"format": "npzz"}
}
"""


@pytest.mark.parametrize(
    "suffix, text, lines",
    [
        ("yaml", BAD_YAML, {"environment.widht": "3:3", "rotatons": "6:29", "output.format": "8:3"}),
        ("toml", BAD_TOML, {"environment.widht": "4:1", "rotatons": "8:29", "output.format": "11:1"}),
        ("json", BAD_JSON, {"environment.widht": "3:19", "rotatons": "6:36", "output.format": "8:14"}),
    ],
)
def test_spec_errors_name_file_line_and_column_and_guess_the_key(tmp_path, suffix, text, lines):
    path = tmp_path / f"job.{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"invalid spec {path} (3 problems):"), message
    for key, where in lines.items():
        line = next(x for x in message.splitlines() if key in x)
        assert line.strip().startswith(f"{path}:{where}: "), (key, line)
    assert "unknown key; did you mean 'width'?" in message
    assert "did you mean 'rotations'?" in message
    assert "did you mean 'npz'?" in message
    assert [p for p, _ in info.value.errors] == [
        "environment.widht",
        "episodes.0.generator.rotatons",
        "output.format",
    ]


@pytest.mark.parametrize(
    "suffix, text, where",
    [
        ("yaml", "a: [1, 2\nb: 3\n", ":2:"),
        ("json", '{"a": 1,\n  "b": }', ":2:8"),
        ("toml", 'a = 1\nb = "x\n', ":2:"),
    ],
)
def test_syntax_errors_carry_the_position(tmp_path, suffix, text, where):
    path = tmp_path / f"bad.{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}{where}"), str(info.value)
    assert f"not valid {suffix.upper()}" in str(info.value)


def test_format_errors_caps_the_list_and_is_reusable():
    from unirender.spec import format_errors

    problems = [(f"episodes.{i}.scene", "required key is missing") for i in range(30)]
    text = format_errors(problems, max_problems=5)
    assert text.splitlines()[0] == "invalid spec (30 problems):"
    assert len(text.splitlines()) == 1 + 5 + 1 and text.endswith("... and 25 more")


def test_action_names_are_checked_against_the_builtin_player(tmp_path):
    from unirender.spec import check_actions

    path = tmp_path / "walk.yaml"
    path.write_text("episodes:\n  - scene: FloorPlan1_physics\n    actions: [MoveAhead, MoveAhaed]\n")
    spec = load_spec(path)
    with pytest.raises(SpecError) as info:
        check_actions(spec)
    assert f"{path}:3:26: episodes.0.actions.1: 'MoveAhaed' is not an action" in str(info.value)
    assert "did you mean 'MoveAhead'?" in str(info.value)
    unity = load_spec(
        {
            "environment": {"executable": "/opt/thor/thor-Linux64"},
            "episodes": [{"scene": "FloorPlan1", "actions": ["MoveAhead", "ReleaseTheKraken"]}],
        }
    )
    warnings = check_actions(unity)  # a Unity build's actions cannot be known: warn, don't refuse
    assert warnings == [
        (
            "episodes.0.actions.1",
            "'ReleaseTheKraken' is not an action of the builtin player (a Unity build may have it)",
        )
    ]


@pytest.mark.parametrize(
    ("doc", "section"),
    [
        ({"episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]}]}, "render"),
        ({"environment": {"protocol": "mlagents"}, "episodes": [{"steps": 2}]}, "record"),
    ],
    ids=["ai2thor", "mlagents"],
)
def test_allow_flat_cameras_changes_neither_the_dump_nor_the_hash_of_specs_without_it(doc, section):
    """A spec that does not set it dumps (manifest "spec") and hashes (resume) as before the field existed; one
    that sets it shows it, and still resumes a run made without it (it decides whether a job goes on, not what
    it writes)."""
    plain = load_spec(doc)
    assert "allow_flat_cameras" not in plain.model_dump(mode="json")[section]
    assert getattr(plain, section).allow_flat_cameras is False
    explicit_false = load_spec({**doc, section: {"allow_flat_cameras": False}})
    allowed = load_spec({**doc, section: {"allow_flat_cameras": True}})
    assert allowed.model_dump(mode="json")[section]["allow_flat_cameras"] is True
    assert plain.content_hash() == explicit_false.content_hash() == allowed.content_hash()
    assert load_spec(allowed.model_dump(mode="json")) == allowed  # a manifest's spec loads back
    with pytest.raises(SpecError, match=f"{section}.allow_flat_cameras"):
        load_spec({**doc, section: {"allow_flat_cameras": "maybe"}})


def test_the_loader_picks_the_model_by_protocol_from_the_family_table():
    from unirender.spec.families import SPEC_FAMILIES, spec_family

    for name, family in SPEC_FAMILIES.items():
        assert family.job_model.family == name and spec_family(name) is family
    assert type(load_spec({"environment": {"protocol": "mlagents"}, "episodes": [{"steps": 1}]})) is (
        SPEC_FAMILIES["mlagents"].job_model
    )
    with pytest.raises(SpecError, match=r"allowed: ai2thor, mlagents"):
        load_spec({"environment": {"protocol": "http"}, "episodes": [{"steps": 1}]})
