"""Token scopes (docs/service.md, "Tokens"): what each token may do, checked from the request's head (before a
body byte is read) on a real ``unirender serve``, in the API and in the console."""

from __future__ import annotations

import re
import socket

import pytest
import requests

from unirender.errors import SpecError
from unirender.service import app as service_app
from unirender.service.config import load_config
from unirender.service.scopes import CONSOLE_SCOPES, DEFAULT_SCOPES, ENDPOINT_SCOPES, SCOPES, Grant, needed
from unirender.service.ui import console

ALICE, CAROL, ROOT = "alice-bare-token", "carol-jobs-only-token", "root-admin-token"


def test_bare_tokens_keep_what_they_could_do_and_scoped_ones_get_what_they_say(tmp_path, monkeypatch):
    monkeypatch.delenv("UNIRENDER_TOKENS", raising=False)
    path = tmp_path / "service.yaml"
    path.write_text("tokens:\n  alice: a1\n  carol: {token: c1, scopes: [jobs]}\n"
                    "  up: {token: u1, scopes: [sessions, 'builds:write']}\n")  # fmt: skip
    grants = load_config(path).grants()
    assert grants["a1"] == Grant("alice", DEFAULT_SCOPES) and DEFAULT_SCOPES == {"sessions", "jobs"}
    assert grants["c1"] == Grant("carol", frozenset({"jobs"}))
    assert grants["u1"].scopes == {"sessions", "builds:write"}
    monkeypatch.setenv("UNIRENDER_TOKENS", "env=e1")  # the environment's tokens are bare, beside the file's
    grants = load_config(path).grants()
    assert grants["e1"] == Grant("env", DEFAULT_SCOPES) and grants["c1"].scopes == {"jobs"}


@pytest.mark.parametrize("text, message", [
    ("tokens: {carol: {token: c1, scopes: [jobz]}}", "unknown scope(s) 'jobz'; valid scopes: sessions, jobs"),
    ("tokens: {carol: {token: c1, scope: [jobs]}}", "a scoped token is {token: ..., scopes: [...]}"),
    ("tokens: {alice: a1}\ntoken_scopes: {bob: [jobs]}", "token_scopes names no configured token: bob"),
])  # fmt: skip
def test_bad_scopes_are_clear_config_errors(tmp_path, monkeypatch, text, message):
    monkeypatch.delenv("UNIRENDER_TOKENS", raising=False)
    path = tmp_path / "service.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=re.escape(message)):
        load_config(path)


def test_every_endpoint_and_page_declares_its_scope():
    """A new endpoint must say what it needs; one the table forgets is admin-only, never open to every token."""
    api = {rule.endpoint for rule in service_app.URLS.iter_rules()} - service_app.PUBLIC
    assert api <= set(ENDPOINT_SCOPES), api - set(ENDPOINT_SCOPES)
    pages = {rule.endpoint for rule in console.URLS.iter_rules()} - console.PUBLIC
    assert pages <= set(CONSOLE_SCOPES), pages - set(CONSOLE_SCOPES)
    assert needed("some_new_endpoint") == "admin"
    assert Grant("root", frozenset({"admin"})).allows("builds:write")
    assert not Grant("alice", DEFAULT_SCOPES).allows("builds:write") and set(SCOPES) > DEFAULT_SCOPES


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": ALICE, "carol": {"token": CAROL, "scopes": ["jobs"]},
                                    "root": {"token": ROOT, "scopes": ["admin"]}}})  # fmt: skip


def call(service, method, path, token, **kwargs):
    return requests.request(method, service.url + path, headers={"Authorization": f"Bearer {token}"},
                            timeout=30, **kwargs)  # fmt: skip


def test_a_token_without_the_scope_gets_403_naming_it(service):
    resp = call(service, "GET", "/v1/sessions", CAROL)
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "insufficient_scope"
    assert "lacks the scope 'sessions'" in resp.json()["error"]["message"]
    assert 'scope="sessions"' in resp.headers["WWW-Authenticate"]
    assert call(service, "GET", "/v1/jobs", CAROL).status_code == 200
    assert call(service, "GET", "/v1/platforms", CAROL).status_code == 200  # any valid token
    for token in (ALICE, ROOT):  # a bare token and admin
        assert call(service, "GET", "/v1/sessions", token).status_code == 200
        assert call(service, "GET", "/v1/jobs", token).status_code == 200
    assert call(service, "GET", "/v1/sessions", "no-such-token").status_code == 401


def test_the_refusal_comes_from_the_head_before_any_body_byte(service):
    """A body the token may not send is not even received: the head alone gets the 403."""
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {CAROL}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n".encode())  # fmt: skip
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, f"connection closed without an answer: {head!r}"
            head += chunk
    assert head.startswith(b"HTTP/1.1 403"), head[:200]
    # With the scope the same head is let through to wait for its body (the app then answers it): alice's
    # malformed body is a 400 from the app, not a refusal from the head.
    resp = requests.post(service.url + "/v1/sessions", data=b"{not json", timeout=30,
                         headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text


def logged_in(service, token):
    http = requests.Session()
    page = http.get(service.url + "/ui/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    resp = http.post(service.url + "/ui/login", data={"token": token, "csrf": csrf, "next": "/ui/"}, timeout=10)
    assert resp.status_code == 200, resp.text
    return http


def test_the_console_checks_the_same_scopes(service):
    carol = logged_in(service, CAROL)
    assert carol.get(service.url + "/ui/", timeout=10).status_code == 200  # the index: what the token may see
    resp = carol.get(service.url + "/ui/sessions/s1-nope/status.json", timeout=10)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "insufficient_scope"
    assert carol.get(service.url + "/ui/jobs/j-nope", timeout=10).status_code == 404  # allowed; no such job
    alice = logged_in(service, ALICE)
    assert alice.get(service.url + "/ui/sessions/s1-nope/status.json", timeout=10).status_code == 404
