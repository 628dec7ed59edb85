"""``POST /v1/steps`` (batched steps, issue 26) attacked and checked on a real ``unirender serve``: ownership of
the whole batch before any step, oversized and duplicate batches, malformed bodies (4xx, never 500), per-session
failures and rate limits, and ``GET /v1/sessions/{id}/event``."""

from __future__ import annotations

import json

import pytest
import requests

from unirender.client import Client, ServiceError
from unirender.errors import ActionError
from unirender.http_format import MSGPACK, decode_document

ALICE, BOB = "alice-batch-token", "bob-batch-token"
ENV = {"width": 32, "height": 24}


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": ALICE, "bob": BOB},
                         "limits": {"sessions_per_token": 3, "total_players": 6, "steps_per_second": 5}})


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as client:
        sessions = [client.session(ENV) for _ in range(2)]
        yield client, sessions
        for s in sessions:
            s.stop()


@pytest.fixture(scope="module")
def bob_session(service):
    with Client(service.url, BOB) as client:
        session = client.session(ENV)
        yield session
        session.stop()


def post(service, body, *, token=ALICE, raw: bytes | None = None, content_type="application/json"):
    data = raw if raw is not None else json.dumps(body).encode()
    return requests.post(f"{service.url}/v1/steps", data=data, timeout=30,
                         headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                                  "Accept": MSGPACK})  # fmt: skip


def steps_of(session) -> int:
    return session.info()["steps"]


def test_a_batch_steps_each_session_and_answers_in_order(service, alice):
    client, sessions = alice
    events = client.step_many([(sessions[0], "RotateRight"), (sessions[1], {"action": "RotateLeft"})])
    assert [e.metadata["lastActionSuccess"] for e in events] == [True, True]
    assert sessions[0].last_event is events[0] and events[0].frame.shape == (24, 32, 3)
    resp = post(service, {"steps": [{"session": sessions[1].id, "action": {"action": "Pass"}}]})
    doc = decode_document(resp.headers["Content-Type"], resp.content)
    assert doc["events"][0]["session"] == sessions[1].id and "frame" in doc["events"][0]["frames"]


def test_another_owners_session_refuses_the_whole_batch_before_any_step(service, alice, bob_session):
    client, sessions = alice
    before = steps_of(sessions[0]), bob_session.info()["steps"]
    with pytest.raises(ServiceError) as info:
        client.step_many([(sessions[0], "RotateRight"), (bob_session, "RotateRight")])
    assert info.value.status == 404 and info.value.code == "session_not_found" and "steps.1" in str(info.value)
    assert (steps_of(sessions[0]), bob_session.info()["steps"]) == before  # nobody stepped


@pytest.mark.parametrize("body, status, code", [
    ({"steps": []}, 400, "invalid_batch"),
    ({"steps": "all"}, 400, "invalid_batch"),
    ({"steps": [{"action": "Pass"}]}, 400, "invalid_batch"),
    ({"steps": [{"session": 7, "action": "Pass"}]}, 400, "invalid_batch"),
    ({"steps": [{"session": "x", "action": "Pass", "extra": 1}]}, 400, "invalid_batch"),
    ({"steps": [], "more": 1}, 400, "invalid_batch"),
    ([1, 2, 3], 400, "malformed_body"),
    ({"steps": [{"session": f"s{i}", "action": "Pass"} for i in range(4)]}, 413, "batch_too_large"),
    ({"steps": [{"session": "nope", "action": "Pass"}]}, 404, "session_not_found"),
])  # fmt: skip
def test_malformed_batches_are_4xx(service, body, status, code):
    resp = post(service, body)
    assert resp.status_code == status and resp.json()["error"]["code"] == code, resp.text


def test_a_duplicate_session_and_garbage_bodies_are_4xx(service, alice):
    _, sessions = alice
    sid = sessions[0].id
    before = steps_of(sessions[0])
    resp = post(service, {"steps": [{"session": sid, "action": "Pass"}, {"session": sid, "action": "Pass"}]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "duplicate_session"
    assert steps_of(sessions[0]) == before
    for raw, ctype in ((b"{not json", "application/json"), (b"\xc1\xc1", "application/msgpack"),
                       (b"x", "text/plain")):  # fmt: skip
        resp = post(service, None, raw=raw, content_type=ctype)
        assert 400 <= resp.status_code < 500, resp.text
    assert post(service, {"steps": [{"session": sid, "action": "Pass"}]}, token="wrong").status_code == 401


def test_a_bad_action_or_a_rate_limit_fails_only_its_own_step(service, alice):
    client, sessions = alice
    results = client.step_many([(sessions[0], {"action": ""}), (sessions[1], "Pass")])
    assert isinstance(results[0], ActionError) and results[0].status == 400  # as a single step raises it
    assert results[1].metadata["lastActionSuccess"]
    limited = []
    for _ in range(8):  # 5 steps per second per session: the bucket runs dry, per session
        limited += [r for r in client.step_many([(sessions[0], "Pass")]) if isinstance(r, Exception)]
    assert limited and all(getattr(r, "code", None) == "rate_limited" for r in limited)


def test_the_last_event_without_a_step(service, alice):
    _, sessions = alice
    before = steps_of(sessions[1])
    assert sessions[1].latest_event().frame.shape == (24, 32, 3)
    assert steps_of(sessions[1]) == before
    assert "/v1/steps" in requests.get(f"{service.url}/openapi.json", timeout=10).json()["paths"]


def test_batches_naming_the_same_sessions_in_any_order_all_finish(make_service):
    """A started step holds its session until its event is taken: batches over the same sessions, in opposite
    orders from two clients at once, neither deadlock nor mix up their events."""
    import threading

    service = make_service({"limits": {"sessions_per_token": 3, "total_players": 3}})
    with Client(service.url) as client:
        sessions = [client.session(ENV) for _ in range(3)]
        outcomes: list = []

        def drive(order: list[int]) -> None:
            for _ in range(8):
                results = client.step_many([(sessions[i], "RotateRight") for i in order])
                outcomes.append([(sessions[i].id, r) for i, r in zip(order, results, strict=True)])

        threads = [threading.Thread(target=drive, args=(order,)) for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "batches over the same sessions deadlocked"
        assert len(outcomes) == 24
        for batch in outcomes:
            for _, event in batch:
                assert not isinstance(event, Exception) and event.metadata["lastActionSuccess"]
        assert [steps_of(s) for s in sessions] == [24, 24, 24]
        for s in sessions:
            s.stop()
