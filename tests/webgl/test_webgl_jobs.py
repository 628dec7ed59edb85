"""WebGL datasets (issue 48 stage 2): ``unirender render`` on a webgl spec (examples/webgl_game.yaml, the test
game): episodes of declared actions, the canvas as ``rgb``, what the game emits as metadata, videos, a resume after
SIGKILL byte-identical to an uninterrupted run (held, not raced), a build from the store, and the gym envs taking
the spec file. Every test boots Chromium."""

from __future__ import annotations

import filecmp
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fixtures.held_job import start_held
from fixtures.webgl import GAME
from unirender.jobs import load_dataset, render
from unirender.spec import load_spec, read_document

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "webgl_game.yaml"


def example(out: Path, **environment) -> dict:
    doc = read_document(EXAMPLE)
    doc["environment"].update(executable=str(GAME), **environment)
    doc["output"]["directory"] = str(out)
    return doc


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and ".unirender-job" not in p.parts and p.name != "manifest.json")  # fmt: skip


def test_the_example_renders_frames_metadata_and_videos(browser_binary, tmp_path):
    result = render(example(tmp_path / "out"))
    assert result.frames == 14 and result.platform == "WebGL"
    dataset = load_dataset(tmp_path / "out")
    frames = list(dataset)
    assert len(frames) == 14
    first, second = frames[0], frames[1]
    assert sorted(first.frames()) == ["rgb"] and first.frame.shape == (96, 96, 3) and first.frame.dtype == np.uint8
    assert first.metadata["step"] == 0 and first.metadata["action"] is None
    # what the game emitted during the step: one message per frame (3 frames per step), their merged mapping
    assert second.metadata["action"] == "right" and len(second.metadata["messages"]) == 3
    assert second.metadata["emitted"]["position"][0] > first.metadata["emitted"]["position"][0]
    assert second.metadata["reward"] == sum(m["reward"] for m in second.metadata["messages"])
    assert not np.array_equal(first.frame, second.frame)
    # the two repeats of "paint" boot fresh pages: the same frames
    paint = [f for f in frames if f.metadata["action"] == "red"]
    assert len(paint) == 2 and np.array_equal(paint[0].frame, paint[1].frame)
    import json

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["protocol"] == "webgl"
    videos = manifest["videos"]
    assert [v["file"] for v in videos] == [f"videos/{u}/canvas.rgb.mp4" for u in
                                           ("e0000-walk-r000", "e0001-paint-r000", "e0001-paint-r001")]
    assert [v["frames"] for v in videos] == [6, 4, 4]
    assert all((tmp_path / "out" / v["file"]).stat().st_size > 0 for v in videos)


def test_sigkill_and_resume_give_identical_bytes(browser_binary, tmp_path, killed_job_tmp):
    doc = example(tmp_path / "killed", frames_per_step=1)
    doc["episodes"] = [{"name": "long", "actions": ["right", "up", "red", "left", "click", "noop"] * 4}]
    doc["output"].update(frames_per_shard=5, format="png")
    doc["output"].pop("video")
    doc["workers"] = 1
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    # the killed job's browser profile lands in a folder the test removes (a SIGKILLed process cannot)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(killed_job_tmp)}
    # Held still once 2 chunks are committed (tests/fixtures/held_job.py): the kill lands mid-job whatever the load.
    proc = start_held("commits", 2, tmp_path / "ready", ["render", str(path)], log=tmp_path / "job.log", env=env,
                      start_new_session=True)
    log = tmp_path / "killed" / ".unirender-job" / "commits.log"
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI; its browser dies with it (PR_SET_PDEATHSIG)
    finally:
        proc.wait(10)
    assert len(log.read_bytes().splitlines()) == 2
    assert not (tmp_path / "killed" / "manifest.json").exists()

    resumed = render(path)
    assert resumed.frames == 25 and resumed.frames_written == 25 - 2 * 5
    clean = render({**doc, "output": {**doc["output"], "directory": str(tmp_path / "clean")}})
    assert clean.frames == 25
    names = _files(tmp_path / "clean")
    assert names == _files(tmp_path / "killed") and len(names) > 25
    _match, mismatch, errors = filecmp.cmpfiles(tmp_path / "clean", tmp_path / "killed", names, shallow=False)
    assert not mismatch and not errors


def test_a_build_from_the_store(browser_binary, tmp_path, monkeypatch):
    from unirender.builds.store import BuildStore

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "store"))
    stored = BuildStore().add(GAME, name="webgl-game:1")
    doc = example(tmp_path / "out")
    doc["environment"].pop("executable")
    doc["environment"]["build"] = "webgl-game:1"
    doc["episodes"] = [{"actions": ["right"]}]
    doc["output"].pop("video")
    result = render(doc)
    assert result.frames == 2
    import json

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert stored.digest in json.dumps(manifest)


def test_the_cli_renders_the_example_from_the_repository_root(browser_binary, tmp_path):
    import subprocess

    cli = "import sys; from unirender.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", cli, "render", str(EXAMPLE), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "14 frames in 3 episodes" in proc.stdout + proc.stderr


def test_gym_envs_take_the_spec_file(browser_binary, tmp_path, monkeypatch):
    pytest.importorskip("gymnasium")
    from unirender.gym.families import make_env
    from unirender.gym.webgl_env import WebGLEnv

    monkeypatch.chdir(ROOT)  # the example names the test game relative to the repository root
    env = WebGLEnv(environment=str(EXAMPLE))
    try:
        assert env.action_names == load_spec(EXAMPLE).environment.action_names
        assert env.observation_space.shape == (96, 96, 3)
        obs, info = env.reset()
        obs2, reward, terminated, truncated, info = env.step(env.action_names.index("right"))
        assert obs2.shape == (96, 96, 3) and len(info["messages"]) == 3  # frames_per_step: 3
    finally:
        env.close()
    env = make_env(environment=str(EXAMPLE))
    try:
        assert type(env).__name__ == "WebGLEnv"
    finally:
        env.close()
    with pytest.raises(ValueError, match="either environment or controller_kwargs"):
        WebGLEnv()
