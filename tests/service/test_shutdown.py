"""SIGTERM while clients step: in-flight requests end cleanly (a result or a JSON error), every player and
display is stopped, and the server exits 0 with no process left behind."""

from __future__ import annotations

import os
import threading
import time

import pytest
import requests
from service_processes import alive, descendants

from unirender.client import Client, ServiceError


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode(errors="replace"))
    except OSError:
        return ""


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({})  # no tokens: loopback only, anonymous


def test_sigterm_drains_and_leaves_no_orphans(service):
    client = Client(service.url, timeout=60)
    sessions = [client.session({"width": 32, "height": 32}),
                client.session({"width": 32, "height": 32, "transport": "wsgi"}),
                client.session({"width": 32, "height": 32, "platform": "Linux64"})]  # on its own Xvfb
    players = {s.info()["pid"] for s in sessions}
    assert all(alive(pid) for pid in players)
    family = descendants(service.process.pid)
    assert players <= family
    displays = [pid for pid in family if _command(pid).startswith("Xvfb")]
    # A Linux64 session uses an X server already running when one fits (on a developer's machine, maybe a
    # foreign one); only when it started its own virtual display must that be the service's descendant.
    if "on Xvfb" in (sessions[2].info().get("device") or ""):
        assert displays, "the Linux64 session's virtual display should be the service's descendant"

    outcomes: list[str] = []

    def stepper(session):
        while True:
            try:
                session.step("RotateRight")
                outcomes.append("ok")
            except ServiceError as exc:  # a JSON error from the service: clean
                outcomes.append(exc.code)
            except (PermissionError, RuntimeError) as exc:  # the library's own errors (crashed player)
                outcomes.append(type(exc).__name__)
            except requests.ConnectionError:
                outcomes.append("closed")
                return
            except Exception as exc:  # noqa: BLE001 - anything else is a failure, recorded for the assert
                outcomes.append(f"UNEXPECTED {type(exc).__name__}: {exc}")
                return

    threads = [threading.Thread(target=stepper, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while outcomes.count("ok") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.sigterm(timeout=60) == 0
    for t in threads:
        t.join(60)
        assert not t.is_alive()

    assert outcomes.count("ok") >= 4
    assert not [o for o in outcomes if o.startswith("UNEXPECTED")], outcomes
    assert set(outcomes) <= {"ok", "closed", "shutting_down", "session_ended", "player_crashed", "player_error",
                             "PlayerCrashedError"}, set(outcomes)
    left = [pid for pid in family if alive(pid)]
    assert left == [], f"still running after shutdown: {left}"
    log = service.log()
    assert "draining" in log and "unirender service stopped" in log and "Traceback" not in log
