"""Global and per-session limits on a real server: player capacity, steps per second, idle reaping."""

from __future__ import annotations

import time

import pytest

from unirender.client import Client, ServiceError

ALICE, BOB = "alice-limits-token", "bob-limits-token"


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({
        "tokens": {"alice": ALICE, "bob": BOB},
        "idle_timeout_s": 3.0,
        "reap_interval_s": 0.5,
        "limits": {"total_players": 1, "steps_per_second": 0.2},
    })


def test_capacity_rate_limit_and_idle_reaping(service):
    alice, bob = Client(service.url, ALICE), Client(service.url, BOB)
    session = alice.session({"width": 32, "height": 32})

    # every player slot is taken: another token gets 503 with Retry-After, not a hang
    with pytest.raises(ServiceError) as info:
        bob.session({"width": 32, "height": 32})
    assert info.value.status == 503 and info.value.code == "capacity_exhausted"

    # one step per 5 s: the first passes, the next is refused with 429 and a Retry-After
    session.step("Pass")
    with pytest.raises(ServiceError) as info:
        session.step("Pass")
    assert info.value.status == 429 and info.value.code == "rate_limited"
    assert info.value.details["retry_after_s"] > 0

    # idle for longer than idle_timeout_s: the reaper stops it and frees the slot
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            session.info()
        except ServiceError as exc:
            assert exc.status == 410 and exc.code == "session_ended"
            assert "idle" in str(exc)
            break
        time.sleep(0.25)
    else:
        pytest.fail("the idle session was not reaped")
    assert alice.sessions() == []
    # the slot comes back once the player has stopped (the session is gone from the list before that)
    deadline = time.monotonic() + 30
    while Client(service.url).request("GET", "/readyz").json()["players"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Client(service.url).request("GET", "/readyz").json()["players"] == 0
