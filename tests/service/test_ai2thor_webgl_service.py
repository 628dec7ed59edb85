"""AI2-THOR WebGL builds on the service (issue 48 stage 6): an AI2-THOR environment naming a WebGL build (the
contract-exact fake, tests/fixtures/ai2thor_webgl.framework.js) is an AI2-THOR session like any other, launched
through the AI2-THOR family's WebGL launcher on a real ``unirender serve``: stepped with AI2-THOR action dicts,
reset into a scene, rendered by ``/v1/render``, and placed by the ``service`` backend (the trainer's build folder
uploaded once)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import requests

from fixtures.dependency_skips import require_chromium
from fixtures.webgl import ai2thor_webgl_build

pytestmark = pytest.mark.slow

TOKEN = "thor-webgl-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def thor(tmp_path_factory):
    return ai2thor_webgl_build(tmp_path_factory.mktemp("thor") / "thor")


@pytest.fixture(scope="module")
def service(make_service, thor, tmp_path_factory):
    require_chromium()
    store = tmp_path_factory.mktemp("service-store")
    return make_service({"tokens": {"t": {"token": TOKEN, "scopes": ["sessions", "builds:write"]}},
                         "allowed_executables": [str(thor)], "build_store": str(store)})  # fmt: skip


def test_an_ai2thor_session_on_a_webgl_build(service, thor):
    from unirender import Event
    from unirender.client import Client
    from unirender.client.ai2thor import RemoteSession

    environment = {"executable": str(thor), "width": 96, "height": 64, "platform": "WebGL"}
    with Client(service.url, TOKEN).session(environment, scene="FloorPlan4") as session:
        assert isinstance(session, RemoteSession)
        first = session.latest_event()
        assert first.metadata["sceneName"] == "FloorPlan4" and first.metadata["lastAction"] == "Initialize"
        url = f"{service.url}/v1/sessions/{session.id}/step?modalities=rgb"
        resp = requests.post(url, json={"action": "MoveAhead"}, headers=HEADERS, timeout=60)
        assert resp.status_code == 200, resp.text
        assert resp.json()["metadata"]["agent"]["position"]["z"] == 0.25
        turned = session.step(dict(action="RotateRight"))
        assert isinstance(turned, Event) and turned.metadata["agent"]["rotation"]["y"] == 90
        assert turned.frame.shape == (64, 96, 3) and not np.array_equal(turned.frame, first.frame)
        assert (turned.frame[:4, :4] == [255, 0, 0]).all()  # the right way up across the wire too
        assert session.info()["family"] == "ai2thor"
        again = session.reset("FloorPlan6")
        assert again.metadata["sceneName"] == "FloorPlan6" and again.metadata["agent"]["position"]["z"] == 0
        # an AI2-THOR action is an object with a name, as for every AI2-THOR session
        resp = requests.post(url, json={"degrees": 30}, headers=HEADERS, timeout=60)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_action"


def test_render_and_an_unlisted_build(service, thor, tmp_path):
    from unirender.client import Client

    environment = {"executable": str(thor), "width": 96, "height": 64}
    events = Client(service.url, TOKEN).render({"scene": "FloorPlan8", "actions": ["MoveAhead", "MoveAhead"]},
                                               environment=environment)  # fmt: skip
    assert [e.metadata["agent"]["position"]["z"] for e in events] == [0, 0.25, 0.5]
    other = ai2thor_webgl_build(tmp_path / "other")
    resp = requests.post(f"{service.url}/v1/sessions", json={"environment": {**environment, "executable": str(other)}},
                         headers=HEADERS, timeout=30)  # fmt: skip
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "executable_not_allowed"


def test_the_service_backend_uploads_the_trainers_webgl_folder_once(service, thor, tmp_path, monkeypatch):
    from unirender.builds import BuildStore
    from unirender.cluster import create_backend

    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "trainer-store"))
    folder = tmp_path / "trainer" / "thor"
    shutil.copytree(thor, folder)
    digest = BuildStore(tmp_path / "trainer-store").digest_folder(folder)
    backend = create_backend("service", url=service.url, token=TOKEN)
    try:
        sessions = [backend.create_session({"executable": str(folder), "width": 96, "height": 64,
                                            "scene": "FloorPlan9"}) for _ in range(2)]  # fmt: skip
        assert backend.uploads == 1
        assert requests.head(f"{service.url}/v1/builds/{digest}", headers=HEADERS, timeout=30).status_code == 200
        for session in sessions:
            assert session.family == "ai2thor" and session.last_event.metadata["sceneName"] == "FloorPlan9"
            moved = session.step({"action": "MoveAhead"})
            assert moved.metadata["agent"]["position"]["z"] == 0.25 and moved.frame.shape == (64, 96, 3)
        for session in sessions:
            session.stop()
    finally:
        backend.close()
