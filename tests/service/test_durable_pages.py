"""The job list read back from the records: pages (newest first, each job once), bad page arguments, owners kept
apart, retention. In-process, on a real database; no player starts."""

from __future__ import annotations

import time

import pytest
from werkzeug.test import Client

from unirender.service import create_app
from unirender.service.config import ServiceConfig
from unirender.service.store import DATABASE, ServiceStore

ALICE, BOB = "alice-token-123", "bob-token-456"
SPEC = {"name": "old", "version": 1, "environment": {"width": 32, "height": 24},
        "episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]}], "output": {"directory": "runs/x"}}


def _fill(data_root, owners: dict[str, int], finished_at: float) -> None:
    data_root.mkdir(parents=True, exist_ok=True)
    store = ServiceStore(data_root / DATABASE)
    seq = 0
    for owner, n in owners.items():
        for _ in range(n):
            seq += 1
            store.insert_job({
                "id": f"j{seq:012x}", "seq": seq, "owner": owner, "name": "old", "kind": "ai2thor",
                "spec": {**SPEC, "output": {"directory": f"runs/{seq}"}}, "output": f"runs/{seq}", "workers": 1,
                "state": "succeeded", "progress": {"frames_done": 2}, "errors": [], "cancel_requested": 0,
                "created_at": finished_at - 1, "started_at": finished_at - 1, "finished_at": finished_at,
                "updated_at": finished_at,
            })
    store.close()


@pytest.fixture()
def app(tmp_path):
    _fill(tmp_path, {"alice": 250, "bob": 3}, time.time())
    app = create_app(ServiceConfig(tokens={"alice": ALICE, "bob": BOB}, data_root=tmp_path, port=0))
    yield app
    app.shutdown(timeout=5)


def _get(http, url, token):
    return http.get(url, headers={"Authorization": f"Bearer {token}"})


def test_pages_walk_every_job_once_newest_first(app):
    http = Client(app)
    seen, cursor, pages = [], None, 0
    while True:
        resp = _get(http, "/v1/jobs?limit=100" + (f"&before={cursor}" if cursor else ""), ALICE)
        assert resp.status_code == 200
        doc = resp.get_json()
        seen += [j["id"] for j in doc["jobs"]]
        pages += 1
        cursor = doc["next"]
        if cursor is None:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 250
    assert seen == sorted(seen, reverse=True)  # ids here follow the submission order
    first = _get(http, "/v1/jobs", ALICE).get_json()
    assert len(first["jobs"]) == 100 and first["jobs"][0]["id"] == seen[0]
    assert first["jobs"][0]["state"] == "succeeded" and first["jobs"][0]["name"] == "old"
    assert [j["id"] for j in _get(http, "/v1/jobs", BOB).get_json()["jobs"]] == ["j0000000000fd", "j0000000000fc",
                                                                                "j0000000000fb"]


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=abc", "limit=-5", "limit=1e3",
                                   "before=nope", "before=' OR 1=1 --", "before=j0000000000fd"])
def test_bad_page_arguments_are_400(app, query):
    """``before`` must be one of the caller's own jobs: j…fd is bob's, and alice cannot page from it."""
    resp = _get(Client(app), f"/v1/jobs?{query}", ALICE)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    assert resp.get_json()["error"]["code"] == "invalid_parameter"


def test_finished_jobs_older_than_the_retention_are_dropped_at_start(tmp_path):
    _fill(tmp_path, {"anonymous": 5}, time.time() - 3 * 86400)
    app = create_app(ServiceConfig(data_root=tmp_path, port=0, job_retention_days=2))
    try:
        assert Client(app).get("/v1/jobs").get_json() == {"jobs": [], "next": None}
    finally:
        app.shutdown(timeout=5)
    store = ServiceStore(tmp_path / DATABASE)
    try:
        assert store.jobs() == []  # gone from the database too
    finally:
        store.close()
    _fill(tmp_path, {"anonymous": 2}, time.time() - 3 * 86400)
    app = create_app(ServiceConfig(data_root=tmp_path, port=0, job_retention_days=7))
    try:
        assert len(Client(app).get("/v1/jobs").get_json()["jobs"]) == 2  # within a longer retention: kept
    finally:
        app.shutdown(timeout=5)
