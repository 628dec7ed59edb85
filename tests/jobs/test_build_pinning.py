"""Datasets pinned to the bytes of their build: the digest in job.json and the manifest, a resume with other
bytes refused naming both digests (and allowed with --allow-build-change), old job.json files upgraded."""

from __future__ import annotations

import json

import pytest
import yaml

from fixtures import no_leaks  # noqa: F401
from fixtures.unity_builds import make_build
from unirender.builds import BuildChangedError, BuildStore
from unirender.cli import main
from unirender.jobs.runner import render
from unirender.spec import load_spec


@pytest.fixture(autouse=True)
def _env(no_leaks, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "store"))
    monkeypatch.setenv("FAKE_PLAYER_FLAVOUR", "CloudRendering")
    yield


def job(out, **environment) -> dict:
    return {
        "name": "pinned",
        "environment": {"platform": "CloudRendering", "width": 32, "height": 32, "server_start_timeout": 60,
                        **environment},  # fmt: skip
        "episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead", "RotateRight"]}],
        "output": {"directory": str(out)},
        "workers": 1,
    }


def saved(out) -> dict:
    return json.loads((out / ".unirender-job" / "job.json").read_text())


def test_the_manifest_carries_the_digest_and_swapped_bytes_are_refused(tmp_path):
    folder = make_build(tmp_path / "build", family="ai2thor")
    exe = str(folder / folder.name)
    digest = BuildStore().digest_folder(folder)
    out = tmp_path / "out"
    spec = job(out, executable=exe)
    assert render(spec).frames == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["build"] == {"name": exe, "digest": digest}
    assert manifest["spec_hash"] == load_spec(spec).content_hash(digest) == saved(out)["spec_hash"]
    assert saved(out)["build_digest"] == digest
    # Someone rebuilds the game into the same path.
    asset = folder / f"{folder.name}_Data" / "sharedassets0.assets"
    asset.write_bytes(b"a rebuilt game")
    other = BuildStore().digest_folder(folder)
    with pytest.raises(BuildChangedError) as caught:
        render(spec)
    assert digest in str(caught.value) and other in str(caught.value) and "--allow-build-change" in str(caught.value)
    assert render(spec, allow_build_change=True).frames == 3
    assert json.loads((out / "manifest.json").read_text())["build"]["digest"] == other
    changes = (out / ".unirender-job" / "build_changes.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in changes] == [{"from": digest, "to": other}]


def test_a_job_json_from_before_build_digests_is_upgraded_on_resume(tmp_path):
    folder = make_build(tmp_path / "build", family="ai2thor")
    out = tmp_path / "out"
    spec = job(out, executable=str(folder / folder.name))
    render(spec)
    legacy = {"spec_hash": load_spec(spec).content_hash(), "spec": saved(out)["spec"]}  # as written before
    (out / ".unirender-job" / "job.json").write_text(json.dumps(legacy))
    assert render(spec).frames == 3
    assert saved(out)["build_digest"] == BuildStore().digest_folder(folder)
    spec["environment"]["width"] = 48  # another job is still another job
    with pytest.raises(Exception, match="holds a different job"):
        render(spec)


def test_a_reference_moved_to_other_bytes_is_refused_from_the_cli(tmp_path, capsys):
    store = BuildStore()
    first = store.add(make_build(tmp_path / "a", family="ai2thor"), name="kitchen:v1")
    second = store.add(make_build(tmp_path / "b", family="ai2thor", variant=1, changed=1))
    out = tmp_path / "out"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(out, build="kitchen:v1")))
    assert main(["render", str(path), "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["build"] == {"name": "kitchen:v1", "digest": first.digest}
    store.tag(second.digest, "kitchen:v1")
    capsys.readouterr()
    assert main(["render", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert first.digest in err and second.digest in err
    assert main(["render", str(path), "--quiet", "--allow-build-change"]) == 0


def test_builtin_jobs_hash_as_before(tmp_path):
    spec = load_spec({**job(tmp_path), "environment": {"executable": "builtin", "platform": "EGL"}})
    assert "build" not in spec.model_dump(mode="json")["environment"]
    assert spec.content_hash() == spec.content_hash(None)
