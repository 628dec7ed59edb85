"""``environment.build`` in specs, and what ``unirender spec check`` says about a spec's build."""

from __future__ import annotations

import pytest
import yaml

from fixtures.unity_builds import make_build
from unirender.builds import BuildStore
from unirender.cli import main
from unirender.errors import SpecError
from unirender.spec import load_spec

EPISODES = [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead"]}]


def check(tmp_path, capsys, environment: dict) -> tuple[int, str, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"environment": environment, "episodes": EPISODES}))
    rc = main(["spec", "check", str(path), "--no-resolve"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_spec_check_prints_the_build_and_warns_on_an_impossible_platform(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "store"))
    build = BuildStore().add(make_build(tmp_path, family="ai2thor", platform="Linux64"), name="kitchen:v1")
    rc, out, err = check(tmp_path, capsys, {"build": "kitchen:v1", "platform": "Linux64"})
    assert rc == 0 and not err
    for text in ("build          kitchen:v1", f"digest         {build.digest}", "family         ai2thor",
                 "unity version  2020.3.25f1", "target         Linux64"):  # fmt: skip
        assert text in out, out
    rc, out, err = check(tmp_path, capsys, {"build": "kitchen:v1", "platform": "CloudRendering"})
    assert rc == 0 and "warning: environment.platform 'CloudRendering'" in err and "Linux64 build" in err
    exe = build.executable
    rc, out, _ = check(tmp_path, capsys, {"executable": str(exe), "platform": "Linux64"})
    assert rc == 0 and f"digest         {build.digest}" in out  # a path: the same bytes, the same digest
    rc, _, err = check(tmp_path, capsys, {"build": "kitchen:v2"})
    assert rc == 1 and "no build named kitchen:v2" in err


@pytest.mark.parametrize(("environment", "message"), [
    ({"build": "/opt/game/Game.x86_64"}, "is a path: give it as 'executable'"),
    ({"build": "sha256:xyz"}, "a digest is 'sha256:'"),
    ({"build": "Kitchen:v1"}, "lower-case"),
    ({"build": "kitchen:v1", "executable": "/opt/game/Game.x86_64"}, "either 'build'"),
    ({"build": "kitchen:v1", "platform": "EGL"}, "'EGL' only runs the builtin"),
])  # fmt: skip
def test_bad_build_references(environment, message):
    with pytest.raises(SpecError, match=message):
        load_spec({"environment": environment, "episodes": EPISODES})


def test_mlagents_specs_take_a_build_too(tmp_path):
    spec = load_spec({"environment": {"protocol": "mlagents", "build": "reach:v1"},
                      "episodes": [{"steps": 5}]})  # fmt: skip
    assert spec.environment.build_name == "reach:v1" and spec.controller_kwargs()["executable"] == "reach:v1"
    assert spec.content_hash("sha256:" + "a" * 64) != spec.content_hash("sha256:" + "b" * 64)
