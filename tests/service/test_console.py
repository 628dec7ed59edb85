"""The web console over plain HTTP against a real ``unirender serve``: a slow viewer gets the latest frames only
(dropped, never queued) while the owner's steps all complete, viewer caps, the end of a stream, login, CSRF,
security headers, and the open (no token) service's loopback-only console."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
import requests

from unirender.client import Client
from unirender.service.jobs import TEST_HOLD_ENV, TEST_HOLD_LINE

ALICE, BOB = "alice-console-http", "bob-console-http"
COOKIE = "unirender_console"
HELD = "held-for-the-console"  # its first run holds at its 42nd frame (the 2nd episode's first) until cancelled


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": ALICE, "bob": BOB},
                         "limits": {"sessions_per_token": 3, "total_players": 4}}, env={TEST_HOLD_ENV: f"{HELD}:42"})


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as client:
        yield client


def logged_in(service, token: str) -> tuple[requests.Session, str]:
    """A requests session holding the console cookie, and the CSRF token of its pages."""
    http = requests.Session()
    page = http.get(service.url + "/ui/login", timeout=10).text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    resp = http.post(service.url + "/ui/login", data={"token": token, "csrf": csrf, "next": "/ui/"}, timeout=10)
    assert resp.status_code == 200 and resp.url.endswith("/ui/"), resp.text
    csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', resp.text).group(1)
    return http, csrf


class SlowViewer:
    """A live-view stream read over a raw socket with a small receive buffer, one frame per ``interval``."""

    def __init__(self, url: str, path: str, token: str, interval: float = 1.0):
        parts = urlsplit(url)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        self.sock.connect((parts.hostname, parts.port))
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nCookie: {COOKIE}={token}\r\n"
                          "Accept: text/event-stream\r\n\r\n".encode())
        self.interval = interval
        self.buffer = b""
        self.frames: list[dict] = []

    def _read_until_frame(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        while b"\nevent: frame\n" not in self.buffer or not self._complete():
            try:
                chunk = self.sock.recv(4096)
            except TimeoutError:
                return False
            if not chunk:
                return False
            self.buffer += chunk
        return True

    def _complete(self) -> bool:
        start = self.buffer.index(b"\nevent: frame\n")
        return b"\n\n" in self.buffer[start + 1:]

    def read_one(self, timeout: float = 10.0) -> dict | None:
        if not self._read_until_frame(timeout):
            return None
        start = self.buffer.index(b"\nevent: frame\n")
        end = self.buffer.index(b"\n\n", start + 1)
        data = self.buffer[start:end].split(b"data: ", 1)[1]
        self.buffer = self.buffer[end + 2:]
        frame = json.loads(data)
        self.frames.append(frame)
        return frame

    def drain(self) -> None:
        """Everything the server has sent (and the socket buffers hold) now."""
        while self.read_one(timeout=0.5) is not None:
            pass

    def close(self) -> None:
        self.sock.close()


def test_a_slow_viewer_gets_the_latest_frames_only_and_the_owner_keeps_stepping(service, alice):
    steps = 250
    with alice.session({"width": 128, "height": 128}, scene="FloorPlan1") as session:
        viewer = SlowViewer(service.url, f"/ui/sessions/{session.id}/stream", ALICE)
        try:
            assert viewer.read_one() is not None  # the current frame at once
            done: list = []

            def owner():
                for i in range(steps):
                    done.append(session.step("RotateRight" if i % 2 else "RotateLeft"))

            thread = threading.Thread(target=owner)
            thread.start()
            while thread.is_alive():
                time.sleep(viewer.interval)  # one frame per second
                viewer.read_one(timeout=0.1)
            thread.join()
            assert len(done) == steps  # every one of the owner's steps completed
            viewer.drain()  # what was in flight: the socket buffers' worth, no more
            got = len(viewer.frames)
            published = session.info()["steps"] + 1
            assert got < published / 3, f"the slow viewer got {got} of {published} frames: they were queued"
            seqs = [f["seq"] for f in viewer.frames]
            assert seqs == sorted(seqs) and max(seqs) - min(seqs) > got  # frames skipped, in order
            status = requests.get(f"{service.url}/ui/sessions/{session.id}/status.json",
                                  cookies={COOKIE: ALICE}, timeout=10).json()
            assert status["viewers"] and status["viewers"][0]["skipped"] > 0, status
            assert status["viewers"][0]["sent"] < status["frames_published"]
        finally:
            viewer.close()


def test_viewer_cap_and_stream_end(service, alice):
    http, _csrf = logged_in(service, ALICE)
    session = alice.session({"width": 64, "height": 64}, scene="FloorPlan1")
    streams = []
    try:
        url = f"{service.url}/ui/sessions/{session.id}/stream"
        for _ in range(4):
            streams.append(http.get(url, stream=True, timeout=10))
            assert streams[-1].status_code == 200
            assert streams[-1].headers["Content-Type"] == "text/event-stream"
        fifth = http.get(url, stream=True, timeout=10)
        assert fifth.status_code == 429 and fifth.json()["error"]["code"] == "too_many_viewers"
        bad = http.get(url + "?view=nonsense", timeout=10)
        assert bad.status_code in (400, 429)
        first = streams[0].iter_lines()
        assert any(line.startswith(b"event: frame") for line, _ in zip(first, range(20), strict=False))
        session.stop()  # the viewers' streams end when the session does
        lines = []
        for line in first:
            lines.append(line)
            if line == b"event: end":
                break
        assert b"event: end" in lines
    finally:
        for s in streams:
            s.close()
        session.stop()
    # Their slots are free again: a new session's stream opens.
    with alice.session({"width": 64, "height": 64}, scene="FloorPlan1") as other:
        resp = http.get(f"{service.url}/ui/sessions/{other.id}/stream?view=nonsense", timeout=10)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_parameter"


def test_login_csrf_and_security_headers(service, alice):
    resp = requests.get(service.url + "/ui/", allow_redirects=False, timeout=10)
    assert resp.status_code == 302 and "/ui/login" in resp.headers["Location"]
    assert requests.get(service.url + "/ui/status.json", timeout=10).status_code == 401
    page = requests.get(service.url + "/ui/login", timeout=10)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    index = requests.get(service.url + "/ui/", cookies={COOKIE: ALICE}, timeout=10).text
    for html in (page.text, index):  # scripts only as files, no inline handlers
        assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [] and not re.search(r"<[^>]+\son[a-z]+=", html)

    # A wrong token: 401 and no cookie; the login form itself needs its CSRF token.
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)
    bad = requests.post(service.url + "/ui/login", data={"token": "nope", "csrf": csrf}, timeout=10)
    assert bad.status_code == 401 and COOKIE not in bad.cookies
    forged = requests.post(service.url + "/ui/login", data={"token": ALICE}, allow_redirects=False, timeout=10)
    assert forged.status_code == 403
    huge = requests.post(service.url + "/ui/login", data={"token": "x" * (5 * 2**20), "csrf": csrf}, timeout=30)
    assert huge.status_code == 413  # forms are held to the API's body limit
    # A good one: an HttpOnly, SameSite=Strict cookie; never a redirect off the console.
    good = requests.post(service.url + "/ui/login", allow_redirects=False, timeout=10,
                         data={"token": ALICE, "csrf": csrf, "next": "https://evil.example/"})
    assert good.status_code == 303 and good.headers["Location"] == "/ui/"
    cookie = good.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie

    # Each token's CSRF token is its own: alice's page token does not work for bob.
    http, alice_csrf = logged_in(service, ALICE)
    with alice.session({"width": 64, "height": 64}, scene="FloorPlan1") as session:
        url = f"{service.url}/ui/sessions/{session.id}/action"
        bob_http, _bob_csrf = logged_in(service, BOB)
        assert bob_http.post(url, json={"action": "MoveAhead"}, headers={"X-CSRF-Token": alice_csrf},
                             timeout=10).status_code == 403
        other_origin = http.post(url, json={"action": "MoveAhead"}, timeout=10,
                                 headers={"X-CSRF-Token": alice_csrf, "Origin": "http://evil.example"})
        assert other_origin.status_code == 403
        assert session.info()["steps"] == 0
        ok = http.post(url, json={"action": "MoveAhead"}, headers={"X-CSRF-Token": alice_csrf}, timeout=10)
        assert ok.status_code == 200 and ok.json()["steps"] == 1
        # Bob cannot see, watch or drive it, even with his own valid CSRF token.
        assert bob_http.get(f"{service.url}/ui/sessions/{session.id}/status.json", timeout=10).status_code == 404
        assert bob_http.get(f"{service.url}/ui/sessions/{session.id}/stream", timeout=10).status_code == 404
        assert session.id not in bob_http.get(service.url + "/ui/status.json", timeout=10).text


def test_an_open_service_serves_its_console_to_loopback_names_only(make_service):
    service = make_service({})  # no tokens: like the API, loopback only
    ok = requests.get(service.url + "/ui/", timeout=10)
    assert ok.status_code == 200 and "Sessions and jobs" in ok.text  # no login needed
    port = urlsplit(service.url).port
    rebound = requests.get(service.url + "/ui/", headers={"Host": f"evil.example:{port}"}, timeout=10)
    assert rebound.status_code == 403 and "loopback" in rebound.text


def test_cancel_and_resume_a_job_from_the_console(service, alice):
    http, csrf = logged_in(service, ALICE)
    job = alice.submit_job({
        "name": HELD,
        "environment": {"width": 32, "height": 24},
        "episodes": [{"scene": "FloorPlan1", "name": f"turn-{i}", "actions": ["RotateRight"] * 40} for i in range(5)],
        "output": {"directory": "runs/console-resume"},
        "workers": 1,
    })
    service.wait_for_log(f"job {job.id} at 42 frames {TEST_HOLD_LINE}")  # held mid-job whatever the load
    held = job.status()
    assert held["state"] == "running" and held["progress"]["episodes_done"] >= 1, held  # one finished: kept
    assert http.post(f"{service.url}/ui/jobs/{job.id}/cancel", timeout=10).status_code == 403  # no CSRF token
    resp = http.post(f"{service.url}/ui/jobs/{job.id}/cancel", data={"csrf": csrf}, timeout=10)
    assert resp.status_code == 200 and resp.url.endswith(f"/ui/jobs/{job.id}")
    status = job.wait(timeout=60, poll=0.1)
    assert status["state"] == "cancelled" and status["workers"], status
    page = http.get(f"{service.url}/ui/jobs/{job.id}", timeout=10).text
    assert "Resume job" in page and "cancelled" in page

    resp = http.post(f"{service.url}/ui/jobs/{job.id}/resume", data={"csrf": csrf}, timeout=10)
    new_id = resp.url.rsplit("/", 1)[-1]
    assert resp.status_code == 200 and new_id != job.id
    resumed = alice.request("GET", f"/v1/jobs/{new_id}").json()
    deadline = time.monotonic() + 90
    while resumed["state"] not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        time.sleep(0.2)
        resumed = alice.request("GET", f"/v1/jobs/{new_id}").json()
    assert resumed["state"] == "succeeded", resumed
    assert resumed["progress"]["frames_done"] == resumed["progress"]["frames_total"] == 205
    assert resumed["progress"].get("episodes_resumed", 0) >= 1  # finished episodes were kept, not redone
    again = http.post(f"{service.url}/ui/jobs/{new_id}/resume", data={"csrf": csrf}, timeout=10)
    assert again.status_code == 409  # a finished job is not resumed
