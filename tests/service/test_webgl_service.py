"""The webgl family on the service (issue 48 stage 3): a real ``unirender serve`` boots the repository's WebGL
test game (tests/fixtures/webgl_game) for sessions (create, step by declared names, reset, the session document),
``/v1/render`` and the ``service`` backend, whose build folder on the trainer's machine is uploaded once."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import requests

from fixtures.dependency_skips import require_chromium
from fixtures.webgl import ACTIONS, GAME
from unirender.builds import BuildStore

pytestmark = pytest.mark.slow

TOKEN = "webgl-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def service(make_service, tmp_path_factory):
    require_chromium()
    store = tmp_path_factory.mktemp("service-store")
    return make_service({"tokens": {"t": {"token": TOKEN, "scopes": ["sessions", "jobs", "builds:write"]}},
                         "allowed_executables": [str(GAME)], "build_store": str(store)})  # fmt: skip


def environment(**extra) -> dict:
    return {"protocol": "webgl", "executable": str(GAME), "width": 120, "height": 100, "actions": ACTIONS, **extra}


def test_a_webgl_session_steps_resets_and_describes_itself(service):
    from unirender.client import Client
    from unirender.client.webgl import RemoteWebGLEvent, RemoteWebGLSession

    client = Client(service.url, TOKEN)
    with client.session(environment()) as session:
        assert isinstance(session, RemoteWebGLSession)
        first = session.latest_event()
        assert isinstance(first, RemoteWebGLEvent) and first.messages[-1]["frame"] == 1
        moved = session.step("right")
        assert moved.metadata["position"][0] == 43 and moved.action == "right" and moved.step == 1
        assert moved.frame.shape == (100, 120, 3) and moved.frame.dtype == np.uint8
        assert not np.array_equal(moved.frame, first.frame)
        assert session.step().action == "noop"
        red = session.step("red")
        assert red.frame[50, 60, 0] > 200 > red.frame[50, 60, 1]  # Game.SetColor("1,0,0"): the canvas turns red
        info = session.info()
        assert info["family"] == "webgl"
        assert info["description"]["actions"]["names"][:3] == ["noop", "left", "right"]
        assert info["description"]["observations"][0]["shape"] == [100, 120, 3]
        assert session.reset().metadata["position"][0] == 40
        # Only declared names: a key, a click or a SendMessage the environment did not declare is refused.
        url = f"{service.url}/v1/sessions/{session.id}/step"
        for body in ({"action": "rihgt"}, {"action": {"key": "a"}}, {"send_message": ["Game", "Quit"]}):
            resp = requests.post(url, json=body, headers=HEADERS, timeout=30)
            assert resp.status_code == 422, (body, resp.text)
        resp = requests.post(url, json={"action": "rihgt"}, headers=HEADERS, timeout=30)
        assert "did you mean 'right'" in resp.json()["error"]["message"]
        # JSON carries the canvas only when asked, as the other families' documents
        resp = requests.post(f"{url}?modalities=rgb", json={"action": "left"}, headers=HEADERS, timeout=30)
        doc = resp.json()
        assert resp.status_code == 200 and doc["metadata"]["action"] == "left" and "rgb" in doc["frames"]
        # The console lists the session with its family's transport (its page and live view: tests/matrix)
        status = requests.get(f"{service.url}/ui/status.json", cookies={"unirender_console": TOKEN}, timeout=30)
        assert status.status_code == 200, status.text
        listed = {s["id"]: s for s in status.json()["sessions"]}
        assert listed[session.id]["family"] == "webgl"
        assert listed[session.id]["transport"] == "Chromium DevTools"


def test_a_build_the_service_does_not_allow_is_refused(service, tmp_path):
    other = tmp_path / "game"
    shutil.copytree(GAME, other)
    resp = requests.post(f"{service.url}/v1/sessions", json={"environment": environment(executable=str(other))},
                         headers=HEADERS, timeout=30)  # fmt: skip
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "executable_not_allowed"
    resp = requests.post(f"{service.url}/v1/render", json={"environment": environment(),
                         "episode": {"actions": ["right", "jump"]}}, headers=HEADERS, timeout=30)  # fmt: skip
    assert resp.status_code == 422 and "episode.actions.1" in resp.text


def test_render_gives_the_episodes_frames(service):
    from unirender.client import Client

    events = Client(service.url, TOKEN).render({"actions": ["right", "right", "red"], "repeat": 2},
                                               environment=environment())  # fmt: skip
    assert len(events) == 8  # per repeat: the boot's frame, then one per action
    assert [e.metadata["position"][0] for e in events[:3]] == [40, 43, 46]
    assert [e.action for e in events[:4]] == [None, "right", "right", "red"]
    for a, b in zip(events[:4], events[4:], strict=True):  # a fresh page per repeat: the same frames
        assert np.array_equal(a.frame, b.frame)


def test_the_service_backend_uploads_the_trainers_build_folder_once(service, tmp_path, monkeypatch):
    from unirender.cluster import create_backend

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = tmp_path / "trainer" / "game"
    shutil.copytree(GAME, folder)
    digest = BuildStore(tmp_path / "trainer-store").digest_folder(folder)
    kwargs = {"protocol": "webgl", "executable": str(folder), "width": 120, "height": 100, "actions": ACTIONS}
    backend = create_backend("service", url=service.url, token=TOKEN)
    try:
        sessions = [backend.create_session(dict(kwargs)) for _ in range(2)]
        assert backend.uploads == 1
        assert requests.head(f"{service.url}/v1/builds/{digest}", headers=HEADERS, timeout=30).status_code == 200
        for session in sessions:
            assert session.family == "webgl" and session.last_event.messages[-1]["frame"] == 1
            moved = session.step("right")
            assert moved.metadata["position"][0] == 43 and moved.frame.shape == (100, 120, 3)
            assert session.describe().actions.names[:2] == ("noop", "left")
            assert session.reset().metadata["position"][0] == 40
        for session in sessions:
            session.stop()
    finally:
        backend.close()


def test_batched_steps_and_a_job_on_the_service(service, tmp_path):
    from unirender.client import Client

    client = Client(service.url, TOKEN)
    with client.session(environment()) as a, client.session(environment()) as b:
        moved, other = client.step_many([(a, "right"), (b, "left")])
        assert moved.metadata["position"][0] == 43 and other.metadata["position"][0] == 37
        assert a.last_event is moved
    job = client.submit_job({"environment": environment(), "episodes": [{"actions": ["right", "red"]}],
                             "output": {"directory": "webgl-job"}})  # fmt: skip
    status = job.wait(timeout=120)
    assert status["state"] == "succeeded", status
    assert job.manifest()["protocol"] == "webgl"
