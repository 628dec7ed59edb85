"""Dataset jobs on every family and backend: a small job split over two workers gives the dataset a plain run in
this process gives, a job whose game renders flat cameras fails fast, and a job SIGKILLed after its first
committed chunk resumes (``unirender render`` run again) into the same dataset, on both backends.

Frames are tiny (48x40) and every job has two chunks per unit. Records are compared without the AI2-THOR
player's wall clock (``currentTime``), the only key that differs between two runs.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from fixtures.held_job import start_held
from unirender.jobs import JobError, load_dataset, render
from unirender.simulator import FlatCameraWarning

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 2


def small_job(case, out: Path, *, chunk: int = CHUNK, frames: int = 2 * CHUNK, workers: int = 2) -> dict:
    """Two units of ``frames`` frames each (two chunks), one per worker."""
    job = {"name": f"matrix-{case.family_id}", "environment": case.environment,
           "output": {"directory": str(out), "frames_per_shard": chunk}, "workers": workers}  # fmt: skip
    if case.family == "mlagents":
        job["episodes"] = [{"name": "rand", "steps": frames - 1, "seed": 5, "repeat": 2, "policy": "random"}]
    elif case.family == "webgl":  # the boot's frame, then one per action
        job["episodes"] = [{"name": "walk", "repeat": 2, "actions": ["right", "up", "red", "left"][: frames - 1]}]
    else:
        job["render"] = {"modalities": ["rgb", "depth"]}
        job["episodes"] = [{"scene": "FloorPlan1_physics", "repeat": 2,
                            "generator": {"kind": "random", "count": frames, "seed": 3}}]  # fmt: skip
    return job


def dataset(root: Path) -> tuple[list[dict], list[dict[str, np.ndarray]]]:
    """(records without the player's clock, frames) as read back."""
    ds = load_dataset(root)
    records = ds.records
    for record in records:
        record["metadata"].pop("currentTime", None)
    return records, [ds.images(i) for i in range(len(ds))]


def assert_same_dataset(got: Path, want: Path) -> None:
    got_records, got_frames = dataset(got)
    want_records, want_frames = dataset(want)
    assert got_records == want_records
    assert len(got_frames) == len(want_frames)
    for i, (a, b) in enumerate(zip(got_frames, want_frames, strict=True)):
        assert sorted(a) == sorted(b), i
        for key in b:
            assert np.array_equal(a[key], b[key]), (i, key)


_REFERENCES: dict[str, Path] = {}


def reference(job: dict, tmp_path_factory) -> Path:
    """``job`` run once in this process with one worker and no backend: what every case must give."""
    doc = {**job, "workers": 1, "output": {**job["output"], "directory": ""}}
    key = yaml.safe_dump(doc)
    if key not in _REFERENCES:
        out = tmp_path_factory.mktemp("reference") / "data"
        render({**doc, "output": {**doc["output"], "directory": str(out)}})
        _REFERENCES[key] = out
    return _REFERENCES[key]


def test_a_small_job_split_over_two_workers(case, tmp_path, tmp_path_factory):
    backend = case.backend()
    job = small_job(case, tmp_path / "data")
    result = render(job, backend=backend)
    assert result.workers == 2 and result.units == 2 and result.frames == 4 * CHUNK
    assert [p["frames"] for p in result.players] == [2 * CHUNK, 2 * CHUNK], result.players  # a unit each
    assert all(p.get("node") for p in result.players), result.players  # sessions of the backend ran them
    assert backend.sessions() == []
    manifest = load_dataset(tmp_path / "data").manifest
    assert manifest["platform"] == case.platform and manifest["counts"]["chunks"] == 4
    assert_same_dataset(tmp_path / "data", reference(job, tmp_path_factory))


def test_a_job_whose_game_renders_flat_cameras_fails_fast(mlagents_case, tmp_path):
    """A game started with -nographics renders black cameras (as Unity does): the job stops at the first frame
    with the warning's text, unless the spec allows flat cameras."""
    job = small_job(mlagents_case, tmp_path / "flat", workers=1)
    job["environment"]["args"] = ["-nographics"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlatCameraWarning)  # the backend warns too; the job must fail
        with pytest.raises(JobError) as info:
            render(job, backend=mlagents_case.backend())
        text = str(info.value)
        assert "flat colour" in text and "-nographics" in text and "EGL" in text, text
        assert "record.allow_flat_cameras: true" in text and "fix the spec" in text, text
        assert not (tmp_path / "flat" / "manifest.json").exists()

        job["record"] = {"allow_flat_cameras": True}
        job["output"]["directory"] = str(tmp_path / "allowed")
        result = render(job, backend=mlagents_case.backend())
    assert result.frames == 4 * CHUNK
    frame = load_dataset(tmp_path / "allowed").images(0)["CameraSensor.0"]
    assert (frame == frame[0, 0]).all()  # what was asked for: the flat frames, kept


def test_a_job_killed_after_its_first_chunk_resumes_into_the_same_dataset(
    case, tmp_path, tmp_path_factory, request, killed_job_tmp
):
    """``unirender render --backend local|ray`` SIGKILLed (with its players; a Ray driver's actors go with it)
    after its first committed chunk, then run again: it keeps what was committed, renders the rest, and the
    dataset equals an uninterrupted run's."""
    chunk = CHUNK
    job = small_job(case, tmp_path / "killed", workers=1)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    # a SIGKILLed job leaves its FIFO dir and a WebGL browser's profile: in a folder the test removes
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(killed_job_tmp)}
    command = ["render", str(path), "--quiet", "--backend", case.backend_kind]
    if case.backend_kind == "ray":  # the matrix's Ray node: the job's actors die with their driver
        command += ["--ray-address", request.getfixturevalue("ray_node").address]
    # Held still once its first chunk is committed (tests/fixtures/held_job.py): the kill lands there, whatever
    # the load, instead of racing the job to its end.
    proc = start_held("commits", 1, tmp_path / "ready", command, log=tmp_path / "job.log", env=env,
                      start_new_session=True)
    log = tmp_path / "killed" / ".unirender-job" / "commits.log"
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its players, at once
    finally:
        proc.wait(10)
    committed = log.read_bytes().count(b"\n")
    assert committed == 1
    assert not (tmp_path / "killed" / "manifest.json").exists()

    resumed = render(path, backend=case.backend())
    assert resumed.frames == 4 * chunk
    assert resumed.frames_written == 4 * chunk - committed * chunk
    assert_same_dataset(tmp_path / "killed", reference(job, tmp_path_factory))


def test_the_service_runs_an_mlagents_job_on_its_backend(mlagents_case, tmp_path):
    """``POST /v1/jobs`` with an ML-Agents job on a service whose sessions live on the local or the Ray backend:
    the job's games are that backend's sessions."""
    from werkzeug.test import Client

    from unirender.service import create_app
    from unirender.service.config import ServiceConfig

    app = create_app(ServiceConfig(tokens={}, data_root=tmp_path), backend=mlagents_case.backend())
    try:
        client = Client(app)
        job = small_job(mlagents_case, Path("ml"))
        resp = client.post("/v1/jobs", json=job)
        assert resp.status_code == 202, resp.get_data(as_text=True)
        url = resp.headers["Location"]
        deadline = time.monotonic() + 120
        while (state := client.get(url).json)["state"] in (
            "queued",
            "running",
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert state["state"] == "succeeded", state
        manifest = client.get(f"{url}/manifest").json
        assert manifest["protocol"] == "mlagents" and manifest["counts"]["frames"] == 4 * CHUNK
    finally:
        app.shutdown(timeout=10)
