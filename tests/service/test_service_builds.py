"""The service launches builds by digest: allowed_builds, GET /v1/builds, environment.build in session and render
bodies (pinned to the digest when checked), and the console naming the build a session runs; a real
``unirender serve`` over a build store holding fake AI2-THOR builds."""

from __future__ import annotations

import re

import pytest
import requests

from fixtures.unity_builds import make_build
from unirender.builds import BuildStore

TOKEN = "builds-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENV = {"platform": "Linux64", "width": 32, "height": 24}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("builds")
    store = BuildStore(root / "store")
    kitchen = store.add(make_build(root / "a", family="ai2thor"), name="kitchen:v1")
    other = store.add(make_build(root / "b", family="ai2thor", variant=1, changed=1), name="other:v1")
    store.close()
    return store.root, kitchen, other


@pytest.fixture(scope="module")
def service(make_service, stored):
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_PLAYER_FLAVOUR", "Linux64")
    root, _, _ = stored
    try:
        yield make_service({"tokens": {"trainer": TOKEN}, "build_store": str(root), "allowed_builds": ["kitchen"]})
    finally:
        mp.undo()


def test_get_builds_lists_what_may_be_launched(service, stored):
    _, kitchen, _ = stored
    resp = requests.get(f"{service.url}/v1/builds", headers=AUTH, timeout=10)
    assert resp.status_code == 200
    assert resp.json() == {"builds": [{
        "name": "kitchen:v1", "names": ["kitchen:v1"], "digest": kitchen.digest, "family": "ai2thor",
        "target": "Linux64", "unity_version": "2020.3.25f1", "size": kitchen.size,
    }]}  # fmt: skip
    assert requests.get(f"{service.url}/v1/builds", timeout=10).status_code == 401


def test_a_session_by_build_reference_runs_that_build_and_the_console_says_which(service, stored):
    _, kitchen, other = stored
    body = {"environment": {**ENV, "build": "kitchen:v1"}}
    resp = requests.post(f"{service.url}/v1/sessions", json=body, headers=AUTH, timeout=120)
    assert resp.status_code == 201, resp.text
    session = resp.json()["id"]
    try:
        step = requests.post(f"{service.url}/v1/sessions/{session}/step", json={"action": "MoveAhead"},
                             headers=AUTH, timeout=60)  # fmt: skip
        assert step.status_code == 200, step.text
        http = requests.Session()
        page = http.get(service.url + "/ui/login", timeout=10).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
        http.post(service.url + "/ui/login", data={"token": TOKEN, "csrf": csrf, "next": "/ui/"}, timeout=10)
        console = http.get(f"{service.url}/ui/sessions/{session}", timeout=10).text
        assert f"build <strong>kitchen:v1 ({kitchen.digest[:19]})</strong>" in console
    finally:
        requests.delete(f"{service.url}/v1/sessions/{session}", headers=AUTH, timeout=30)
    for reference, status, code in (("other:v1", 403, "build_not_allowed"), (other.digest, 403, "build_not_allowed"),
                                    ("nope:v1", 404, "build_not_found")):  # fmt: skip
        resp = requests.post(f"{service.url}/v1/sessions", json={"environment": {**ENV, "build": reference}},
                             headers=AUTH, timeout=30)  # fmt: skip
        assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.text
    assert "sha256:" in requests.post(f"{service.url}/v1/sessions", headers=AUTH, timeout=30, json={
        "environment": {**ENV, "build": "other:v1"}}).json()["error"]["message"]  # fmt: skip


def test_a_one_shot_render_by_digest(service, stored):
    _, kitchen, _ = stored
    body = {"environment": {**ENV, "build": kitchen.digest},
            "episode": {"scene": "FloorPlan1_physics", "actions": ["MoveAhead"]}}  # fmt: skip
    resp = requests.post(f"{service.url}/v1/render", json=body, headers={**AUTH, "Accept": "application/json"},
                         timeout=120)  # fmt: skip
    assert resp.status_code == 200, resp.text


def test_a_job_by_build_reference_is_pinned_to_its_digest(service, stored):
    import time

    _, kitchen, _ = stored
    body = {"environment": {**ENV, "build": "kitchen:v1"}, "workers": 1, "output": {"directory": "kitchen-job"},
            "episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead", "RotateRight"]}]}  # fmt: skip
    resp = requests.post(f"{service.url}/v1/jobs", json=body, headers=AUTH, timeout=30)
    assert resp.status_code == 202, resp.text
    job = resp.json()["id"]
    deadline = time.monotonic() + 120
    while (state := requests.get(f"{service.url}/v1/jobs/{job}", headers=AUTH, timeout=10).json()["state"]) in (
        "queued", "running"):  # fmt: skip
        assert time.monotonic() < deadline, "the job did not finish in 120 s"
        time.sleep(0.2)
    assert state == "succeeded"
    manifest = requests.get(f"{service.url}/v1/jobs/{job}/manifest", headers=AUTH, timeout=10).json()
    assert manifest["build"] == {"name": kitchen.digest, "digest": kitchen.digest}  # pinned when checked
    resp = requests.post(f"{service.url}/v1/jobs", headers=AUTH, timeout=30,
                         json={**body, "environment": {**ENV, "build": "other:v1"}})  # fmt: skip
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "build_not_allowed"
