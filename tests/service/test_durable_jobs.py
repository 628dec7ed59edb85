"""A service that loses no job across restarts: real ``unirender serve`` processes, real SIGKILLs.

Each kill lands in its window deterministically (``UNIRENDER_TEST_KILL_AT``: the service SIGKILLs itself at that
point), then a service without the hook starts on the same data root: the job is taken up with no
resubmission, finishes, and its dataset (frames, webdataset tars, meta files, manifest) equals an uninterrupted
run's byte for byte. Small jobs, tiny frames: 16 frames of 32x24 per run.
"""

from __future__ import annotations

import time

import pytest
import requests
from durable_helpers import Service, assert_no_players_left, dataset_bytes

from unirender.service.jobs import TEST_HOLD_ENV, TEST_HOLD_LINE, TEST_KILL_ENV

ACTIONS = ["MoveAhead", "RotateRight", "MoveAhead", "LookDown", "RotateLeft", "MoveBack", "Pass", "RotateRight",
           "LookUp"]  # 10 frames: the reset frame and one per action
SPEC = {
    "name": "durable",
    "environment": {"width": 32, "height": 24, "platform": "EGL"},
    "render": {"modalities": ["rgb", "depth"]},
    "episodes": [
        {"scene": "FloorPlan1_physics", "actions": ACTIONS},
        {"scene": "FloorPlan201_physics", "generator": {"kind": "random", "count": 6, "seed": 3}},
    ],
    "output": {"directory": "ds", "format": "webdataset", "frames_per_shard": 4},
    "workers": 1,
}
FRAMES = len(ACTIONS) + 1 + 6


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's dataset."""
    root = tmp_path_factory.mktemp("reference")
    service = Service(root)
    try:
        job = service.call("POST", "/v1/jobs", json=SPEC).json()
        done = service.wait_job(job["id"])
        assert done["state"] == "succeeded" and done["progress"]["frames_done"] == FRAMES, done
    finally:
        service.stop()
    files = dataset_bytes(root / "data" / "anonymous" / "ds")
    assert any(k.startswith("meta/") for k in files) and any(k.endswith(".tar") for k in files)
    return files


def _submit_and_die(root, point: str) -> str | None:
    """Start a service that SIGKILLs itself at ``point``; submit the job; return its id if the 202 came back."""
    service = Service(root, env={TEST_KILL_ENV: point})
    job_id = None
    try:
        resp = service.call("POST", "/v1/jobs", json=SPEC)
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
    except requests.ConnectionError:
        assert point in ("queued", "running")  # killed before the response: the record was written first
    rc = service.wait_exit(120)
    assert rc == -9, (rc, service.log()[-2000:])
    assert "SIGKILL now" in service.log()
    return job_id


@pytest.mark.parametrize("point", ["queued", "running", "frame:2", "frame:7", "commit:2", "frame:15", "commit:5"])
def test_a_job_survives_sigkill_at_any_point(tmp_path, reference, point):
    """queued (record written, no response yet), running (before the first frame), frame:2 (first chunk, nothing
    committed), frame:7 (mid-run, mid-chunk), commit:2 (during a commit: the dataset's commit log has the
    chunk, the job's record not yet), frame:15 (inside the pose episode: its resume teleports to the pose
    before its first open chunk), commit:5 (the last chunk committed, the manifest not yet written: the resume
    renders nothing and must still write the manifest an uninterrupted run writes, the player's version, platform
    and device included; found by benchmarks/soak.py --service-restarts)."""
    killed_id = _submit_and_die(tmp_path, point)
    assert_no_players_left(tmp_path / "data")  # the players died with the service
    service = Service(tmp_path)
    try:
        (listed,) = service.jobs()  # taken up, not resubmitted: one job, the same one
        if killed_id is not None:
            assert listed["id"] == killed_id
        assert "taking up 1 job(s)" in service.log()
        done = service.wait_job(listed["id"])
        assert done["state"] == "succeeded", done
        assert done["progress"]["frames_done"] == FRAMES
    finally:
        service.stop()
    assert dataset_bytes(tmp_path / "data" / "anonymous" / "ds") == reference
    assert_no_players_left(tmp_path / "data")


def test_a_sigterm_is_no_cancel_either(tmp_path, reference):
    """A graceful stop (a redeploy) mid-job: the job's record says queued, and the next service resumes it."""
    service = Service(tmp_path, env={TEST_HOLD_ENV: f"{SPEC['name']}:3"})  # held at 3 frames until the SIGTERM
    try:
        job = service.call("POST", "/v1/jobs", json=SPEC).json()
        service.wait_for_log(f"job {job['id']} at 3 frames {TEST_HOLD_LINE}")
    finally:
        service.stop()
    service = Service(tmp_path)
    try:
        (listed,) = service.jobs()
        assert listed["id"] == job["id"]
        assert "taking up 1 job(s)" in service.log()  # it had not finished: the SIGTERM stopped it mid-job
        done = service.wait_job(job["id"])
        assert done["state"] == "succeeded", done
    finally:
        service.stop()
    assert dataset_bytes(tmp_path / "data" / "anonymous" / "ds") == reference


def test_a_restart_during_a_cancel_keeps_it_cancelled(tmp_path):
    """The service dies right after recording the cancel, before the job stopped: the next one does not resume
    it (a crash is not a cancel, and a cancel is not undone by a crash)."""
    long = {**SPEC, "episodes": [{"scene": "FloorPlan1_physics", "actions": ["RotateRight"] * 400}],
            "output": {**SPEC["output"], "directory": "long"}}
    service = Service(tmp_path, env={TEST_KILL_ENV: "cancel", TEST_HOLD_ENV: f"{long['name']}:2"})
    job = service.call("POST", "/v1/jobs", json=long).json()
    service.wait_for_log(f"job {job['id']} at 2 frames {TEST_HOLD_LINE}")  # running, and it stays so
    with pytest.raises(requests.ConnectionError):
        service.call("DELETE", f"/v1/jobs/{job['id']}")
    assert service.wait_exit(60) is not None
    assert_no_players_left(tmp_path / "data")
    service = Service(tmp_path)
    try:
        doc = service.call("GET", f"/v1/jobs/{job['id']}").json()
        assert doc["state"] == "cancelled", doc
        assert any("restarted before the job had stopped" in str(e) for e in doc["errors"]), doc
        frames = doc["progress"].get("frames_done", 0)
        time.sleep(1.0)  # what is tested is an absence (nothing runs it): a window to see frames move, not a race
        again = service.call("GET", f"/v1/jobs/{job['id']}").json()
        assert again["state"] == "cancelled" and again["progress"].get("frames_done", 0) == frames
        assert again["workers"] == {}  # nothing runs it
        assert not (tmp_path / "data" / "anonymous" / "long" / "manifest.json").exists()
    finally:
        service.stop()


def test_another_token_never_sees_or_cancels_a_job_after_a_restart(tmp_path):
    tokens = {"tokens": {"alice": "alice-secret-1", "bob": "bob-secret-2"}}
    service = Service(tmp_path, tokens, env={TEST_KILL_ENV: "frame:3"})
    job = service.call("POST", "/v1/jobs", "alice-secret-1", json=SPEC).json()
    assert service.wait_exit(120) is not None
    service = Service(tmp_path, tokens)
    try:
        assert service.jobs("bob-secret-2") == []
        for method in ("GET", "DELETE"):
            resp = service.call(method, f"/v1/jobs/{job['id']}", "bob-secret-2")
            assert resp.status_code == 404 and resp.json()["error"]["code"] == "job_not_found"
        resp = service.call("GET", f"/v1/jobs?before={job['id']}", "bob-secret-2")  # nor page through it
        assert resp.status_code == 400
        assert service.call("GET", f"/v1/jobs/{job['id']}/manifest", "bob-secret-2").status_code == 404
        assert service.call("GET", "/v1/jobs").status_code == 401
        (mine,) = service.jobs("alice-secret-1")
        assert mine["id"] == job["id"]
        assert service.wait_job(job["id"], "alice-secret-1")["state"] == "succeeded"
        assert (tmp_path / "data" / "alice" / "ds" / "manifest.json").is_file()
        assert not (tmp_path / "data" / "bob").exists()
    finally:
        service.stop()
