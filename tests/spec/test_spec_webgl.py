"""The webgl spec family (issue 48 stage 1): ``environment.protocol: webgl`` loads the WebGL models, maps one to one
onto ``WebGLController``'s arguments, and fails with the same clear, positioned errors as the other families.
No browser starts here (tests/webgl/test_webgl_jobs.py runs the example)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from unirender.errors import SpecError
from unirender.spec import load_environment, load_spec
from unirender.spec.webgl import KEY_NAMES, WebGLEnvironmentSpec, WebGLJobSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "webgl_game.yaml"


def job(**environment) -> dict:
    env = {"protocol": "webgl", "executable": "tests/fixtures/webgl_game", "width": 64, "height": 48,
           "actions": {"left": {"key": "ArrowLeft"}, "poke": {"click": [10, 10], "button": "right"}}}
    env.update(environment)
    return {"environment": env, "episodes": [{"actions": ["left", "poke", "noop"]}]}


def problems(doc) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        load_spec(doc)
    return info.value.errors


def test_the_example_loads_as_a_webgl_job():
    spec = load_spec(EXAMPLE)
    assert isinstance(spec, WebGLJobSpec) and spec.family == "webgl"
    assert spec.environment.action_names == ("noop", "left", "right", "up", "red", "click")
    assert sum(e.known_frame_count * e.repeat for e in spec.episodes) == 14
    assert spec.output.video is not None
    # the dump names only the fields an action sets, and the hash ignores timeouts and restarts
    assert spec.model_dump(mode="json")["environment"]["actions"]["red"] == {"send_message": ["Game", "SetColor",
                                                                                              "1,0,0"]}
    doc = json.loads(spec.model_dump_json())
    doc["environment"]["boot_timeout"] = 5
    doc["workers"] = 3
    assert load_spec(doc).content_hash() == spec.content_hash()
    doc["environment"]["frames_per_step"] = 4
    assert load_spec(doc).content_hash() != spec.content_hash()


def test_controller_kwargs_map_one_to_one_onto_the_controller():
    from unirender.webgl.controller import WebGLController

    kwargs = load_spec(job(reset_message=["Game", "Reset"], host_script="window.x = 1;", wait_for="ready",
                           readback="pixels", fps=30, frames_per_step=2, config={"companyName": "x"},
                           boot_timeout=9, step_timeout=8, max_restarts=1)).controller_kwargs()
    parameters = inspect.signature(WebGLController).parameters
    assert set(kwargs) - {"executable"} <= set(parameters)
    fields = set(WebGLEnvironmentSpec.model_fields) - {"protocol", "executable", "build"}
    assert fields == set(kwargs) - {"executable"}  # every field reaches the controller, and nothing else
    assert kwargs["actions"] == {"left": {"key": "ArrowLeft"}, "poke": {"click": [10, 10], "button": "right"}}
    assert kwargs["reset_message"] == ["Game", "Reset"] and kwargs["wait_for"] == "ready"
    assert kwargs["executable"] == "tests/fixtures/webgl_game"


def test_key_names_are_the_ones_the_family_can_press():
    from unirender.webgl.actions import _NAMED_KEYS

    assert set(KEY_NAMES) == set(_NAMED_KEYS)


@pytest.mark.parametrize(("change", "path", "words"), [
    (lambda d: d["environment"]["actions"].update(jump={"key": "Spcae"}), "environment.actions.jump.key",
     "did you mean 'Space'"),
    (lambda d: d["environment"]["actions"].update(far={"click": [64, 0]}), "environment.actions.far.click",
     "off the 64x48 canvas"),
    (lambda d: d["environment"]["actions"].update(bad={"kye": "a"}), "environment.actions.bad.kye", ""),
    (lambda d: d["environment"]["actions"].update(noop={}), "environment.actions.noop", "always declared"),
    (lambda d: d["environment"].update(build="game:1"), "environment.executable", "exactly one"),
    (lambda d: d["environment"].pop("executable"), "environment.executable", "exactly one"),
    (lambda d: d["environment"].update(readback="jpeg"), "environment.readback", ""),
    (lambda d: d["environment"].update(wait_for="load"), "environment.wait_for", ""),
    (lambda d: d["environment"].update(frames_per_step=0), "environment.frames_per_step", ""),
    (lambda d: d["environment"].update(platform="Linux64"), "environment.platform", ""),
    (lambda d: d["environment"].update(protocol="webgI"), "environment.protocol", "did you mean 'webgl'"),
    (lambda d: d["episodes"][0]["actions"].append("lef"), "episodes.0.actions.3", "did you mean 'left'"),
    (lambda d: d["environment"].update(fpss=30), "environment.fpss", ""),
])  # fmt: skip
def test_clear_errors(change, path, words):
    doc = job()
    change(doc)
    found = problems(doc)
    assert any(p == path and words in message for p, message in found), found


def test_errors_name_the_line_of_a_spec_file(tmp_path):
    text = EXAMPLE.read_text().replace("actions: [red, click, right]", "actions: [red, clik, right]")
    path = tmp_path / "game.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "clik" in t)
    assert f"game.yaml:{line}" in str(info.value) and "did you mean 'click'" in str(info.value)


def test_a_build_reference_instead_of_a_folder():
    spec = load_spec(job(executable=None, build="webgl-game:1"))
    assert spec.environment.build_name == "webgl-game:1"
    assert spec.controller_kwargs()["executable"] == "webgl-game:1"
    assert any(p == "environment.build" for p, _ in problems(job(executable=None, build="some/path")))


def test_load_environment_takes_the_example_file():
    env = load_environment(EXAMPLE)
    assert isinstance(env, WebGLEnvironmentSpec) and env.width == 96
    assert isinstance(load_environment({"executable": "g", "width": 8, "height": 8}, default="webgl"),
                      WebGLEnvironmentSpec)


def test_schema_and_check_on_the_command_line(capsys):
    from unirender.cli import main

    assert main(["spec", "schema", "--family", "webgl"]) == 0
    schema = json.loads(capsys.readouterr().out)
    env = schema["$defs"]["WebGLEnvironmentSpec"]
    assert env["properties"]["protocol"]["const"] == "webgl"
    assert {"actions", "fps", "frames_per_step", "readback", "host_script", "wait_for", "boot_timeout",
            "step_timeout", "build"} <= set(env["properties"])
    assert main(["spec", "check", str(EXAMPLE), "--no-resolve"]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "target         WebGL" in out and "frames       14" in out
