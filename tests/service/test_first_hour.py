"""What a new user meets first: the root page, /health, and where ``unirender serve`` keeps its data."""

from __future__ import annotations

import pytest
from werkzeug.test import Client

from unirender.service import create_app
from unirender.service.config import ServiceConfig, load_config


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(ServiceConfig(tokens={"alice": "alice-token-123"}, data_root=tmp_path_factory.mktemp("d")))
    yield Client(app)
    app.shutdown()


def test_root_page_says_what_this_is_and_links_the_docs(client):
    resp = client.get("/")  # no token: a browser pointed at the port
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    page = resp.get_data(as_text=True)
    assert "unirender render service" in page and "AI2-THOR" in page
    for href in ("/docs", "/openapi.json", "/healthz", "/metrics"):
        assert f"href='{href}'" in page
        assert client.get(href).status_code == 200


def test_health_is_an_alias_of_healthz(client):
    assert client.get("/health").get_json() == client.get("/healthz").get_json() == {"status": "ok"}
    assert client.post("/health").status_code == 405


def test_default_data_root_is_under_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert load_config().data_root == tmp_path / "xdg" / "unirender"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ServiceConfig().data_root == tmp_path / "home" / ".local" / "share" / "unirender"


def test_a_linux_headless_simulation_session_renders_through_vulkan(client):
    """Unity 2022+'s platform name is accepted by the service and runs like CloudRendering (builtin: Vulkan)."""
    auth = {"Authorization": "Bearer alice-token-123"}
    body = {"environment": {"platform": "LinuxHeadlessSimulation", "width": 32, "height": 24}}
    resp = client.post("/v1/sessions", json=body, headers=auth)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    info = resp.get_json()
    try:
        assert info["platform"] == "LinuxHeadlessSimulation"
        step = client.post(f"/v1/sessions/{info['id']}/step", json={"action": "RotateRight"},
                           headers={**auth, "Accept": "application/x-msgpack"})
        assert step.status_code == 200
        from unirender import http_format

        doc = http_format.decode_document(step.content_type, step.get_data())
        assert doc["frames"]["frame"].shape == (24, 32, 3)
    finally:
        assert client.delete(f"/v1/sessions/{info['id']}", headers=auth).status_code in (200, 204)
