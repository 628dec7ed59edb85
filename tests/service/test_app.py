"""App-level tests through werkzeug's test Client: auth, limits, errors, negotiation, OpenAPI, paths.

The app has a real LocalBackend; nothing here launches a player (every request is refused before that), so
the module is fast. Sessions with players are in test_server.py.
"""

from __future__ import annotations

import json
import os

import msgpack
import pytest
from werkzeug.test import Client

from unirender.errors import SpecError
from unirender.service import create_app
from unirender.service.config import ServiceConfig, load_config, parse_tokens
from unirender.service.limits import PlayerSlots, TokenBucket
from unirender.service.paths import resolve_output_dir

ALICE, BOB = "alice-token-123", "bob-token-456"
AUTH_A = {"Authorization": f"Bearer {ALICE}"}
AUTH_B = {"Authorization": f"Bearer {BOB}"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    config = ServiceConfig(
        tokens={"alice": ALICE, "bob": BOB},
        data_root=tmp_path_factory.mktemp("data"),
        limits={"body_bytes": 4096, "pixels": 640 * 480},
    )
    app = create_app(config)
    yield app
    app.shutdown(timeout=5)


@pytest.fixture(scope="module")
def client(app):
    return Client(app)


def error_of(resp, status: int) -> dict:
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/json"
    err = resp.get_json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    return err


# -- public endpoints ----------------------------------------------------------------------------------------


def test_health_and_readiness_need_no_token(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}
    ready = client.get("/readyz").get_json()
    assert ready["status"] == "ready" and ready["player_slots"] == 8


def test_openapi_lists_every_client_route_and_validates(client):
    import schemathesis

    doc = client.get("/openapi.json").get_json()
    operations = schemathesis.openapi.from_dict(doc).get_all_operations()
    labels = {result.ok().label for result in operations}  # ok() raises on an operation it cannot load
    assert "POST /v1/sessions/{session_id}/step" in labels and "POST /v1/steps" in labels and len(labels) == 29  # GET /v1/builds (issue 33), session video (issue 36), /v1/builds/{digest}, its manifest, blobs and POST blobs (issue 46)
    assert {"/v1/sessions", "/v1/sessions/{session_id}/step", "/v1/render", "/v1/jobs"} <= set(doc["paths"])
    assert "/train" not in doc["paths"]  # the players' route is not part of the client API
    builds = doc["paths"]["/v1/builds/{digest}"]
    assert {m: op["x-scope"] for m, op in builds.items()} == {"head": "sessions", "get": "sessions",
                                                              "put": "builds:write", "delete": "admin"}
    assert "build_store_full" in builds["put"]["responses"]["413"]["description"]
    assert doc["security"] == [{"bearer": []}]
    page = client.get("/docs")
    assert page.status_code == 200 and b"/v1/sessions/{session_id}/step" in page.data


def test_metrics_exposition(client):
    client.get("/v1/sessions", headers=AUTH_A)
    text = client.get("/metrics").get_data(as_text=True)
    for name in ("unirender_sessions", "unirender_step_seconds_bucket", "unirender_player_restarts_total",
                 "unirender_http_requests_total"):
        assert name in text
    assert 'unirender_http_requests_total{route="list_sessions",status="200"}' in text


# -- auth ------------------------------------------------------------------------------------------------------


def test_missing_token_is_401(client):
    err = error_of(client.get("/v1/sessions"), 401)
    assert err["code"] == "missing_token"


@pytest.mark.parametrize("header", ["Bearer nope", "Basic YWxpY2U6eA==", "Bearer ", ALICE])
def test_wrong_token_is_401(client, header):
    resp = client.get("/v1/sessions", headers={"Authorization": header})
    assert error_of(resp, 401)["code"] == "invalid_token"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_each_token_sees_only_its_own(client):
    assert client.get("/v1/sessions", headers=AUTH_A).get_json() == {"sessions": []}
    assert error_of(client.get("/v1/sessions/s1-deadbeef", headers=AUTH_B), 404)["code"] == "session_not_found"
    assert error_of(client.get("/v1/jobs/jdeadbeef", headers=AUTH_B), 404)["code"] == "job_not_found"


def test_no_tokens_means_anonymous_access(tmp_path):
    app = create_app(ServiceConfig(data_root=tmp_path), start=False)
    try:
        assert Client(app).get("/v1/sessions").get_json() == {"sessions": []}
    finally:
        app.shutdown(timeout=5)


# -- errors ----------------------------------------------------------------------------------------------------


def test_unknown_route_and_method_are_json(client):
    assert error_of(client.get("/v2/nothing", headers=AUTH_A), 404)["code"] == "not_found"
    resp = client.put("/v1/sessions", headers=AUTH_A)
    assert error_of(resp, 405)["code"] == "method_not_allowed"
    assert "POST" in resp.headers["Allow"]


@pytest.mark.parametrize(
    ("content_type", "body", "status", "code"),
    [
        ("application/json", b"{not json", 400, "malformed_body"),
        ("application/json", b"[1, 2]", 400, "malformed_body"),
        ("application/json", b"\xff\xfe", 400, "malformed_body"),
        ("application/x-msgpack", b"\xc1\xc1\xc1", 400, "malformed_body"),
        ("application/x-msgpack", msgpack.packb([1, 2]), 400, "malformed_body"),
        ("text/plain", b"hello", 415, "unsupported_media_type"),
        ("application/json", b"[" * 4000, 400, "malformed_body"),  # beyond Python's recursion limit
        ("application/json", b'{"a": ' * 100 + b"1" + b"}" * 100, 400, "malformed_body"),
        ("application/x-msgpack", b"\x81\xa1a" * 100 + b"\x01", 400, "malformed_body"),
    ],
)
def test_malformed_bodies(client, content_type, body, status, code):
    resp = client.post("/v1/sessions", data=body, headers={**AUTH_A, "Content-Type": content_type})
    assert error_of(resp, status)["code"] == code


def test_oversized_body_is_413(client):
    body = json.dumps({"environment": {"initialize": {"pad": "x" * 5000}}})
    resp = client.post("/v1/sessions", data=body, headers={**AUTH_A, "Content-Type": "application/json"})
    assert error_of(resp, 413)["code"] == "body_too_large"


def test_invalid_spec_reports_key_paths(client):
    resp = client.post("/v1/sessions", json={"environment": {"width": -3, "bogus": 1}}, headers=AUTH_A)
    err = error_of(resp, 422)
    assert err["code"] == "invalid_spec"
    paths = {e["path"] for e in err["errors"]}
    assert {"environment.width", "environment.bogus"} <= paths


def test_validation_messages_are_the_clis(client):
    """The API words a bad body as `unirender spec check` words a bad file: a misspelt key gets a guess."""
    resp = client.post("/v1/sessions", json={"environment": {"widht": 64}}, headers=AUTH_A)
    err = error_of(resp, 422)
    assert err["message"].startswith("invalid request body (1 problem):")
    assert "environment.widht: unknown key; did you mean 'width'?" in err["message"]
    assert [e["path"] for e in err["errors"]] == ["environment.widht"]
    assert err["errors"][0]["message"].startswith("unknown key; did you mean 'width'? (allowed keys: ")


def test_msgpack_request_bodies_are_accepted(client):
    body = msgpack.packb({"environment": {"width": 5000, "height": 5000}})
    resp = client.post("/v1/sessions", data=body, headers={**AUTH_A, "Content-Type": "application/x-msgpack"})
    assert error_of(resp, 422)["code"] == "resolution_too_large"


def test_executable_must_be_allowed(client):
    resp = client.post("/v1/sessions", json={"environment": {"executable": "/bin/sh"}}, headers=AUTH_A)
    assert error_of(resp, 403)["code"] == "executable_not_allowed"


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/render", "/v1/jobs"])
def test_an_unknown_protocol_is_named(client, path):
    body = {"environment": {"protocol": "godot"}, "episode": {"scene": "FloorPlan1"}, "episodes": []}
    err = error_of(client.post(path, json=body, headers=AUTH_A), 422)
    assert err["code"] == "invalid_spec" and err["errors"][0]["path"] == "environment.protocol"
    assert "'godot'" in err["message"] and "mlagents" in err["message"]


@pytest.mark.parametrize("path, body", [
    ("/v1/sessions", {"environment": {"protocol": "mlagents", "executable": "/bin/true", "platform": "auto"}}),
    ("/v1/render", {"environment": {"protocol": "mlagents", "executable": "/bin/true", "platform": "auto"},
                    "episode": {"steps": 1, "policy": "zeros"}}),
])
def test_mlagents_games_are_held_to_the_allowed_executables(client, path, body):
    assert error_of(client.post(path, json=body, headers=AUTH_A), 403)["code"] == "executable_not_allowed"


def test_an_mlagents_render_too_large_is_refused_before_a_game_starts(client):
    body = {"environment": {"protocol": "mlagents"}, "episode": {"steps": 100, "policy": "zeros", "repeat": 3}}
    err = error_of(client.post("/v1/render", json=body, headers=AUTH_A), 422)
    assert err["code"] == "render_too_large" and "303 frames" in err["message"]


def test_unacceptable_accept_header_is_406(client):
    resp = client.post("/v1/sessions/s1-x/step", json={"action": "Pass"},
                       headers={**AUTH_A, "Accept": "text/html"})
    assert error_of(resp, 406)["code"] == "not_acceptable"


def test_step_needs_an_action_name(client):
    resp = client.post("/v1/sessions/s1-x/step", json={"degrees": 90}, headers=AUTH_A)
    assert error_of(resp, 400)["code"] == "invalid_action"


# -- jobs: paths cannot escape the data root ---------------------------------------------------------------


def _job(directory: str) -> dict:
    return {"episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]}], "output": {"directory": directory}}


@pytest.mark.parametrize("directory", ["../escape", "/etc/unirender", "a/../../b", "~root/x", "a\\..\\b"])
def test_job_output_cannot_escape_data_root(client, directory):
    resp = client.post("/v1/jobs", json=_job(directory), headers=AUTH_A)
    assert error_of(resp, 422)["code"] in ("path_outside_data_root", "invalid_spec")


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/sessions", {"scene": "/etc/unirender/service.yaml"}),
    ("/v1/sessions/s1-x/reset", {"scene": "../service.json"}),
    ("/v1/sessions/s1-x/step", {"action": "Reset", "sceneName": "~/secrets.yml"}),
    ("/v1/render", {"episode": {"scene": "tokens.yaml", "actions": ["Pass"]}}),
    ("/v1/jobs", {**_job("runs/x"), "episodes": [{"scene": "FloorPlan1", "actions": ["Pass"]},
                                                  {"scene": "/srv/a.json", "actions": ["Pass"]}]}),
])
def test_scene_files_by_path_are_refused(client, path, body):
    """The reference player loads scene files by path: a client must not make it read the server's files."""
    err = error_of(client.post(path, json=body, headers=AUTH_A), 422)
    assert err["code"] == "scene_path_not_allowed"


def _cameras(n: int) -> dict:
    return {"cameras": [{"name": f"c{i}", "position": {"x": 0, "y": 1.5, "z": i}} for i in range(n)]}


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/render", "/v1/jobs"])
def test_cameras_per_session_are_limited(client, path):
    body = {"/v1/sessions": {}, "/v1/render": {"episode": {"scene": "FloorPlan1", "actions": ["Pass"]}},
            "/v1/jobs": _job("runs/cams")}[path]
    resp = client.post(path, json={**body, "render": _cameras(9)}, headers=AUTH_A)  # default limit: 8
    assert error_of(resp, 422)["code"] == "too_many_cameras"


def test_change_resolution_is_held_to_the_pixel_limit(client):
    resp = client.post("/v1/sessions/s1-x/step", json={"action": "ChangeResolution", "x": 4096, "y": 4096},
                       headers=AUTH_A)
    assert error_of(resp, 422)["code"] == "resolution_too_large"


def test_job_output_symlink_out_of_data_root_is_refused(app, client, tmp_path):
    owner = app.owner_data_dir("alice")
    owner.mkdir(parents=True, exist_ok=True)
    link = owner / "sneaky"
    if not link.exists():
        os.symlink(tmp_path, link)
    resp = client.post("/v1/jobs", json=_job("sneaky/out"), headers=AUTH_A)
    assert error_of(resp, 422)["code"] == "path_outside_data_root"


def test_resolve_output_dir_stays_inside(tmp_path):
    out = resolve_output_dir(tmp_path, "alice", "runs/one")
    assert out == (tmp_path / "alice" / "runs" / "one").resolve()
    assert resolve_output_dir(tmp_path, "../../x", "a").is_relative_to(tmp_path.resolve())


# -- limiters and config ---------------------------------------------------------------------------------------


def test_token_bucket_limits_rate():
    now = [0.0]
    bucket = TokenBucket(2.0, clock=lambda: now[0])
    assert bucket.take() == 0.0 and bucket.take() == 0.0
    wait = bucket.take()
    assert wait == pytest.approx(0.5)
    now[0] += 0.5
    assert bucket.take() == 0.0


def test_player_slots():
    slots = PlayerSlots(2)
    slots.acquire(2)
    with pytest.raises(Exception) as info:
        slots.acquire()
    assert info.value.status == 503 and info.value.code == "capacity_exhausted"
    slots.release()
    slots.acquire()


def test_load_config_file_and_env(tmp_path, monkeypatch):
    path = tmp_path / "service.yaml"
    path.write_text("port: 9000\ntokens: [abc]\nlimits:\n  sessions_per_token: 2\n")
    monkeypatch.setenv("UNIRENDER_TOKENS", "carol=xyz")
    config = load_config(path)
    assert config.port == 9000 and config.limits.sessions_per_token == 2
    assert config.tokens == {"token0": "abc", "carol": "xyz"}
    assert parse_tokens("a=1, 2") == {"a": "1", "env1": "2"}
    path.write_text("limits: {sessions_per_token: 0}\n")
    with pytest.raises(ValueError, match="sessions_per_token"):
        load_config(path)


def test_platforms_report(client):
    report = client.get("/v1/platforms?width=64&height=48", headers=AUTH_A).get_json()
    assert report["request"]["width"] == 64
    assert any(row["status"] == "usable" for row in report["platforms"])
    resp = client.get("/v1/platforms?width=100000&height=100000", headers=AUTH_A)
    assert error_of(resp, 400)["code"] == "invalid_parameter"


def test_player_routes_without_a_hub_are_json_404(tmp_path):
    app = create_app(ServiceConfig(data_root=tmp_path, port=0), start=False)  # port 0: no hub yet
    try:
        resp = Client(app).post("/train", data=b"x")
        assert error_of(resp, 404)["code"] == "not_found"
    finally:
        app.shutdown(timeout=5)


def test_player_routes_reach_the_hub(client):
    assert client.get("/ping").get_data() == b"pong"
    resp = client.post("/train", data=b"metadata=%7B%7D&token=nobody",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status_code == 403  # unknown player token: the hub refuses it


def test_open_service_refuses_a_non_loopback_host_unless_allowed():
    from unirender.service.server import refuse_open_non_loopback

    with pytest.raises(SpecError, match="refusing to serve 0.0.0.0"):
        refuse_open_non_loopback(ServiceConfig(host="0.0.0.0"))
    assert refuse_open_non_loopback(ServiceConfig(host="0.0.0.0", tokens=["t"])).host == "0.0.0.0"
    assert refuse_open_non_loopback(ServiceConfig(host="0.0.0.0", allow_open=True)).host == "0.0.0.0"
    assert refuse_open_non_loopback(ServiceConfig(host="::1")).host == "::1"


def test_serve_cli_refuses_an_open_non_loopback_host(capsys, monkeypatch):
    from unirender.cli import main

    monkeypatch.delenv("UNIRENDER_TOKENS", raising=False)
    monkeypatch.delenv("UNIRENDER_CONFIG", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert "--allow-open" in out + err


def test_backend_and_its_options_come_from_the_config(tmp_path):
    path = tmp_path / "service.yaml"
    path.write_text("backend: local\nbackend_options: {max_sessions: 3, gpus: [0, 1]}\n")
    app = create_app(load_config(path, data_root=str(tmp_path)), start=False)
    try:
        assert app.backend.name == "local" and app.jobs.backend is app.backend
        assert app.backend.placement.max_sessions == 3 and app.backend.placement.gpus == [0, 1]
    finally:
        app.shutdown(timeout=5)
    path.write_text("backend: kubernetes\n")
    with pytest.raises(ValueError, match="backend"):
        load_config(path)
    with pytest.raises(ValueError, match="backend_options for 'local'.*bogus"):
        create_app(ServiceConfig(data_root=tmp_path, backend_options={"bogus": 1}), start=False)


def test_client_raises_requests_errors_on_its_direct_path():
    """Loopback HTTP skips requests' per-call machinery but keeps its exceptions for callers."""
    import socket

    import requests

    from unirender.client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        client = Client(f"http://127.0.0.1:{s.getsockname()[1]}", timeout=5)
        assert client._direct
        with pytest.raises(requests.ConnectionError):
            client.health()
        client.close()


def test_client_path_choice_follows_proxies(monkeypatch):
    from unirender.client import Client

    monkeypatch.setenv("HTTP_PROXY", "http://10.255.255.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert Client("http://127.0.0.1:8200")._direct  # loopback is never proxied
    assert not Client("http://render.example:8200")._direct  # proxied: requests does it
    assert not Client("https://127.0.0.1:8200")._direct
    monkeypatch.setenv("NO_PROXY", "render.example")
    assert Client("http://render.example:8200")._direct
