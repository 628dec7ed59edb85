"""Sessions live when the service died are listed after a restart as ``lost``, with the reason, until deleted or
expired; their players never outlive the service. Real ``unirender serve`` processes, a real SIGKILL."""

from __future__ import annotations

import time

from durable_helpers import Service, assert_no_players_left, players_of
from service_processes import alive

ALICE, BOB = "alice-secret-1", "bob-secret-2"
TOKENS = {"tokens": {"alice": ALICE, "bob": BOB}}
JOB = {
    "environment": {"width": 32, "height": 24, "platform": "EGL"},
    "episodes": [{"scene": "FloorPlan1_physics", "actions": ["RotateRight", "MoveAhead", "LookDown"]}],
    "output": {"directory": "queued-job", "frames_per_shard": 2},
}


def test_a_sigkilled_service_lists_its_sessions_as_lost_and_runs_the_queued_job(tmp_path):
    service = Service(tmp_path, {**TOKENS, "limits": {"total_players": 1}})
    resp = service.call("POST", "/v1/sessions", ALICE, json={"environment": {"width": 32, "height": 24}})
    assert resp.status_code == 201, resp.text
    session = resp.json()
    # the only player slot is the session's: the job waits in the queue (it used to be refused with 503)
    job = service.call("POST", "/v1/jobs", ALICE, json=JOB)
    assert job.status_code == 202 and job.json()["state"] == "queued", job.text
    time.sleep(1.0)  # an absence is tested (it does not start while the slot is taken): a window, not a race
    assert service.call("GET", f"/v1/jobs/{job.json()['id']}", ALICE).json()["state"] == "queued"
    assert session["pid"] in players_of(tmp_path / "data")  # the orphan check below sees players
    service.sigkill()
    deadline = time.monotonic() + 10
    while alive(session["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(session["pid"]), "the session's player outlived the service"
    assert_no_players_left(tmp_path / "data")

    service = Service(tmp_path, {**TOKENS, "limits": {"total_players": 1}})
    try:
        (listed,) = service.call("GET", "/v1/sessions", ALICE).json()["sessions"]
        assert listed["id"] == session["id"] and listed["state"] == "lost"
        assert "stopped unexpectedly" in listed["reason"] and listed["lost_at"] >= listed["created_at"]
        assert listed["environment"] == session["environment"]  # what it was, for the record
        one = service.call("GET", f"/v1/sessions/{session['id']}", ALICE)
        assert one.status_code == 200 and one.json() == listed
        step = service.call("POST", f"/v1/sessions/{session['id']}/step", ALICE, json={"action": "Pass"})
        assert step.status_code == 410 and step.json()["error"]["code"] == "session_ended"
        assert "was lost" in step.json()["error"]["message"]
        # another token: nothing to see, nothing to delete
        assert service.call("GET", "/v1/sessions", BOB).json()["sessions"] == []
        for method in ("GET", "DELETE"):
            resp = service.call(method, f"/v1/sessions/{session['id']}", BOB)
            assert resp.status_code == 404 and resp.json()["error"]["code"] == "session_not_found"
        # the queued job was taken up once the slot was free (the lost session holds none)
        assert service.wait_job(job.json()["id"], ALICE)["state"] == "succeeded"
        assert service.call("DELETE", f"/v1/sessions/{session['id']}", ALICE).status_code == 204
        assert service.call("GET", f"/v1/sessions/{session['id']}", ALICE).status_code == 404
        assert service.call("GET", "/v1/sessions", ALICE).json()["sessions"] == []
    finally:
        service.stop()
    service = Service(tmp_path, TOKENS)  # a deleted record stays deleted
    try:
        assert service.call("GET", "/v1/sessions", ALICE).json()["sessions"] == []
    finally:
        service.stop()


def test_sessions_of_a_stopped_service_are_lost_until_they_expire(tmp_path):
    config = {"lost_session_retention_s": 6.0, "reap_interval_s": 0.5}
    service = Service(tmp_path, config)
    created = service.call("POST", "/v1/sessions", json={"environment": {"width": 32, "height": 24}}).json()
    live = service.call("GET", "/v1/sessions").json()["sessions"]
    assert [s["id"] for s in live] == [created["id"]] and live[0]["state"] != "lost"
    service.stop()  # SIGTERM: a clean stop ends every session too
    assert_no_players_left(tmp_path / "data")
    service = Service(tmp_path, config)
    try:
        (lost,) = service.call("GET", "/v1/sessions").json()["sessions"]
        assert lost["state"] == "lost" and "shut down" in lost["reason"]
        deadline = time.monotonic() + 20
        while service.call("GET", "/v1/sessions").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.25)
        assert service.call("GET", "/v1/sessions").json()["sessions"] == []  # expired
        assert service.call("GET", f"/v1/sessions/{created['id']}").status_code == 404
    finally:
        service.stop()
