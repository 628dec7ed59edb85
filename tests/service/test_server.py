"""A real ``unirender serve`` process with the reference player: sessions over FIFO and WSGI, the three response
formats against a local Controller, ownership, one-shot renders, jobs, and a player killed mid-session."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import requests
from service_processes import unread_action_bytes

from unirender.client import Client, RemoteSession, ServiceError
from unirender.controller import Controller
from unirender.errors import ActionError, PlayerCrashedError, RestartError
from unirender.service.jobs import TEST_HOLD_ENV, TEST_HOLD_LINE
from unirender.spec import EnvironmentSpec, RenderSpec

ALICE, BOB = "alice-secret-token", "bob-secret-token"
W, H = 96, 72
HELD = "held-for-cancel"  # the job of that name holds after its first frame until cancelled (test_job_cancel)
MODALITIES = ["rgb", "depth", "instance_segmentation"]
ACTIONS = [{"action": "RotateRight"}, {"action": "MoveAhead"}, {"action": "LookDown", "degrees": 15}]


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({
        "tokens": {"alice": ALICE, "bob": BOB},
        "limits": {"sessions_per_token": 2, "total_players": 6},
    }, env={TEST_HOLD_ENV: f"{HELD}:1"})

@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as client:
        yield client


@pytest.fixture(scope="module")
def bob(service):
    with Client(service.url, BOB) as client:
        yield client


@pytest.fixture(scope="module")
def local():
    env = EnvironmentSpec(width=W, height=H)
    controller = Controller(**env.controller_kwargs(RenderSpec(modalities=MODALITIES)), scene="FloorPlan1")
    yield controller
    controller.stop()


@pytest.fixture(scope="module")
def fifo_session(alice):
    session = alice.session({"width": W, "height": H}, render={"modalities": MODALITIES}, scene="FloorPlan1")
    yield session
    session.stop()


def assert_same_event(remote, local_event, frame_names=("frame", "depth_frame", "instance_segmentation_frame")):
    for key in ("lastActionSuccess", "lastAction"):
        assert remote.metadata[key] == local_event.metadata[key]
    assert remote.metadata["agent"]["position"] == local_event.metadata["agent"]["position"]
    assert remote.metadata["agent"]["rotation"] == local_event.metadata["agent"]["rotation"]
    for name in frame_names:
        mine, theirs = getattr(remote, name), getattr(local_event, name)
        assert mine is not None and mine.shape == theirs.shape and mine.dtype == theirs.dtype, name
        assert np.array_equal(mine, theirs), name


def test_fifo_session_matches_local_controller_in_every_format(service, fifo_session, local):
    info = fifo_session.info()
    assert info["state"] == "ready" and info["platform"] and info["server_type"].lower() == "fifo"
    views = {
        fmt: RemoteSession(Client(service.url, ALICE, format=fmt), fifo_session.info_at_start,
                           modalities=MODALITIES if fmt == "json" else None)
        for fmt in ("msgpack", "json", "multipart")
    }
    for action in ACTIONS:
        for view in views.values():
            # each format gets its own step, matched by a local step of the same action
            assert_same_event(view.step(action), local.step(action))
    # JSON without ?modalities= is metadata only
    resp = Client(service.url, ALICE, format="json").request(
        "POST", f"/v1/sessions/{fifo_session.id}/step", {"action": "Pass"}, accept="application/json"
    )
    plain = resp.json()
    assert plain["frames"] == {} and plain["metadata"]["lastAction"] == "Pass"
    assert int(resp.headers["Content-Length"]) == len(resp.content)
    assert resp.headers["Server-Timing"].startswith("step;dur=") and "encode;dur=" in resp.headers["Server-Timing"]
    local.step("Pass")
    for view in views.values():
        view.client.close()


def test_bodies_sent_straight_to_the_socket_match_a_local_controller(alice):
    """At 200x150 a msgpack step is ~360 KB, above the channel's direct-send threshold (test_channel.py): the
    frames still decode to a local Controller's, step after step on one keep-alive connection."""
    env = EnvironmentSpec(width=200, height=150)
    controller = Controller(**env.controller_kwargs(RenderSpec(modalities=MODALITIES)), scene="FloorPlan1")
    try:
        with alice.session(env, render={"modalities": MODALITIES}, scene="FloorPlan1") as session:
            for action in ACTIONS * 2:
                assert_same_event(session.step(action), controller.step(action))
            resp = alice.request("POST", f"/v1/sessions/{session.id}/step", {"action": "Pass"},
                                 accept="application/x-msgpack")
            assert int(resp.headers["Content-Length"]) == len(resp.content) > 64 * 1024
    finally:
        controller.stop()


def test_wsgi_session_serves_its_player_on_the_service_port(alice, local):
    with alice.session({"width": W, "height": H, "transport": "wsgi"}, render={"modalities": MODALITIES},
                       scene="FloorPlan1") as session:
        assert session.info()["server_type"].lower() == "wsgi"
        first = session.reset("FloorPlan1")
        assert_same_event(first, local.reset("FloorPlan1"))
        for action in ACTIONS:
            assert_same_event(session.step(action), local.step(action))


@pytest.mark.parametrize("transport", ["fifo", "wsgi"])
def test_msgpack_clients_get_the_players_metadata_forwarded_and_decode_it_lazily(alice, transport):
    """The service forwards the player's metadata (FIFO: its msgpack bytes; WSGI: its JSON converted once) and
    the client decodes it on first read: frames and step keys cost no metadata decode, every key is still there."""
    from unirender.protocol.metadata import RawMetadata

    with alice.session({"width": W, "height": H, "transport": transport}, render={"modalities": MODALITIES},
                       scene="FloorPlan1") as session:
        event = session.step("RotateRight")
        document = event.metadata_document
        assert isinstance(document, RawMetadata) and not document.decoded
        assert event.frame.shape == (H, W, 3) and event and event.screen_width == W
        assert not document.decoded
        resp = alice.request("POST", f"/v1/sessions/{session.id}/step", {"action": "Pass"}, accept="application/json")
        eager = resp.json()["metadata"]  # the service's own JSON encoding of the decoded dict
        lazy = session.step("Pass").metadata
        assert set(lazy) == set(eager) and lazy["agent"] == eager["agent"] and lazy["objects"] == eager["objects"]



def test_a_wsgi_players_json_metadata_is_forwarded_as_sent_only_when_asked(service, alice):
    """``Unirender-Metadata: as-sent`` (the client sends it): a WSGI player's JSON text goes out as
    ``metadata_json``, unconverted; without it, msgpack clients get a ``metadata`` map as before. Both decode to
    the same metadata; a FIFO player's metadata is msgpack either way."""
    import msgpack

    def raw_step(session_id: str, as_sent: bool) -> dict:
        headers = {"Authorization": f"Bearer {ALICE}", "Accept": "application/x-msgpack",
                   "Content-Type": "application/json"}
        if as_sent:
            headers["Unirender-Metadata"] = "as-sent"
        resp = requests.post(f"{service.url}/v1/sessions/{session_id}/step", data=b'{"action": "Pass"}',
                             headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        return msgpack.unpackb(resp.content, raw=False)

    with alice.session({"width": 32, "height": 32}, scene="FloorPlan1") as fifo:
        assert set(raw_step(fifo.id, as_sent=True)) == {"metadata", "step", "frames"}
    with alice.session({"width": 32, "height": 32, "transport": "wsgi"}, scene="FloorPlan1") as wsgi:
        raw_step(wsgi.id, as_sent=True)  # after the session's start, whose metadata the service read (so the
        # Controller decodes the next document on arrival, expecting it to be read too: protocol/state.py)
        sent = raw_step(wsgi.id, as_sent=True)
        assert set(sent) == {"metadata_json", "step", "frames"} and sent["metadata_json"][:1] == b"{"
        converted = raw_step(wsgi.id, as_sent=False)
        assert set(converted) == {"metadata", "step", "frames"}
        as_json = json.loads(sent["metadata_json"])  # the player's own document: one agent, its sequence id
        assert len(as_json["agents"]) == 1 and isinstance(as_json["sequenceId"], int)
        agent = as_json["agents"][0]
        assert set(agent) == set(converted["metadata"]) and agent["objects"] == converted["metadata"]["objects"]
        assert sent["step"] == {k: agent[k] for k in ("lastActionSuccess", "errorMessage", "errorCode",
                                                      "screenWidth", "screenHeight", "depthFormat") if k in agent}
        assert sent["step"]["screenWidth"] == 32
        event = wsgi.step("Pass")  # the client asks for it and decodes it lazily, like msgpack metadata
        assert not event.metadata_document.decoded and event.screen_width == 32
        assert event.metadata_document._fields is None  # not even scanned: the service's step keys stood in
        assert event.metadata["objects"] == agent["objects"]


def test_player_and_client_tokens_do_not_cross(service, alice):
    """The token a WSGI player got (read from its own environment) opens nothing on /v1; a client token
    posted to /train as a player would is refused."""
    from unirender.protocol.unity import encode_wsgi_emission

    with alice.session({"width": 32, "height": 32, "transport": "wsgi"}) as session:
        with open(f"/proc/{session.info()['pid']}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        player_token = env[b"AI2THOR_CLIENT_TOKEN"].decode()
        assert env[b"AI2THOR_PORT"].decode() == service.url.rsplit(":", 1)[1]  # players use the service's port
        resp = requests.get(service.url + "/v1/sessions", headers={"Authorization": f"Bearer {player_token}"},
                            timeout=10)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_token"
        content_type, body = encode_wsgi_emission({"agents": [], "sequenceId": 1}, [], ALICE)
        resp = requests.post(service.url + "/train", data=body, headers={"Content-Type": content_type},
                             timeout=10)
        assert resp.status_code == 403
        assert session.step("Pass").metadata["lastActionSuccess"]  # the real player is unaffected


def test_requests_path_of_the_client(service, fifo_session):
    """https or proxied URLs go through requests (loopback HTTP goes straight to urllib3): same results."""
    with Client(service.url, ALICE) as client:
        client._direct = False
        view = RemoteSession(client, fifo_session.info_at_start)
        assert view.step("Pass").frame.shape == (H, W, 3)
        with pytest.raises(ServiceError) as info:
            client.request("GET", "/v1/sessions/s1-nothing")
        assert info.value.status == 404 and info.value.code == "session_not_found"
        assert client._http_sessions  # it did use requests


def test_the_client_gets_the_413_for_a_body_over_the_limit(service, alice):
    """The service refuses an oversized body from its head and closes; the client still reports that answer (a
    ServiceError 413), not the broken pipe of its unsent body, and its next call opens a new connection."""
    with pytest.raises(ServiceError) as info:
        alice.request("POST", "/v1/sessions", {"pad": "x" * (5 * 2**20)})
    assert info.value.status == 413 and info.value.code == "body_too_large"
    assert alice.health()["status"] == "ok"


def test_client_close_closes_every_threads_connection_and_later_calls_reopen(service):
    """One keep-alive connection per thread; ``close()`` closes them all, and a call after it opens (and tracks)
    a new one, so a second ``close()`` closes that too."""
    client = Client(service.url, ALICE)
    client.health()
    threads = [threading.Thread(target=client.health) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = list(client._connections)
    assert len(first) == 4 and all(c.connected for c in first)
    client.close()
    assert not any(c.connected for c in first)
    assert client.health()["status"] == "ok"
    (second,) = client._connections
    assert second not in first and second.connected
    client.close()
    assert not second.connected


def test_other_tokens_cannot_see_a_session(service, bob, fifo_session):
    for method, path in [("GET", ""), ("DELETE", ""), ("POST", "/step"), ("POST", "/reset")]:
        with pytest.raises(ServiceError) as info:
            bob.request(method, f"/v1/sessions/{fifo_session.id}{path}", {"action": "Pass"} if path else None)
        assert info.value.status == 404 and info.value.code == "session_not_found"
    assert fifo_session.id not in [s["id"] for s in bob.sessions()]
    assert fifo_session.info()["state"] == "ready"


def test_sessions_per_token_limit(alice, fifo_session):
    second = alice.session({"width": 32, "height": 32})
    try:
        with pytest.raises(ServiceError) as info:
            alice.session({"width": 32, "height": 32})
        assert info.value.status == 429 and info.value.code == "too_many_sessions"
    finally:
        second.stop()
    with pytest.raises(ServiceError) as info:
        second.step("Pass")
    assert info.value.status == 410 and info.value.code == "session_ended"


def test_invalid_action_is_a_client_error(fifo_session):
    with pytest.raises(ActionError) as info:  # the same exception type as a local Controller raises
        fifo_session.step({"action": "RotateRight", "unknownArgument": 1})
    assert info.value.status == 400 and info.value.code == "invalid_action"
    assert "unknownArgument" in str(info.value)
    assert fifo_session.step("Pass").metadata["lastActionSuccess"]
    # a body above the channel's frame-body size (received into its own buffer) reaches the app intact
    with pytest.raises(ActionError, match="paddedArgument"):
        fifo_session.step({"action": "RotateRight", "paddedArgument": "x" * 200_000})


def test_cameras_added_by_actions_are_held_to_the_limit(alice):
    render = {"cameras": [{"name": f"c{i}", "position": {"x": 0, "y": 1.5, "z": 0}} for i in range(8)]}
    with alice.session({"width": 32, "height": 32}, render=render) as session:
        event = session.step("Pass")
        assert len(event.third_party_camera_frames) == 8  # at the limit (8 by default)
        with pytest.raises(ServiceError) as info:
            session.step({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 1.5, "z": 0}})
        assert info.value.status == 422 and info.value.code == "too_many_cameras"
        assert len(session.step("Pass").third_party_camera_frames) == 8


def test_unknown_scene_is_a_client_error(fifo_session):
    with pytest.raises(ServiceError) as info:
        fifo_session.reset("NoSuchScene")
    assert info.value.status == 422 and info.value.code == "unknown_scene" and "FloorPlan1" in str(info.value)
    assert fifo_session.step("Pass").metadata["lastActionSuccess"]


def test_killed_player_fails_only_its_own_session(bob, fifo_session):
    """Bob's players are SIGKILLed between steps while Alice's session steps concurrently: Alice never sees
    an error; Bob gets a clear error, a restart when he asked for one, and a closed session otherwise."""
    alice_errors: list[BaseException] = []
    alice_steps = [0]
    stop = threading.Event()

    def alice_loop():
        while not stop.is_set():
            try:
                fifo_session.step("RotateLeft")
                alice_steps[0] += 1
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                alice_errors.append(exc)

    worker = threading.Thread(target=alice_loop)
    worker.start()
    try:
        restarting = bob.session({"width": 32, "height": 32}, auto_restart=True)
        one_shot = bob.session({"width": 32, "height": 32})
        restarting.step("Pass")
        # Mid-step: freeze the player, send a step (it waits on the player), then kill the player.
        pid = restarting.info()["pid"]
        os.kill(pid, signal.SIGSTOP)
        in_flight: list[BaseException] = []

        def step_in_flight():
            try:
                restarting.step("RotateRight")
            except BaseException as exc:  # noqa: BLE001 - asserted below
                in_flight.append(exc)

        assert unread_action_bytes(pid) == 0
        stepping = threading.Thread(target=step_in_flight)
        stepping.start()
        deadline = time.monotonic() + 60
        while not unread_action_bytes(pid):  # the step's action has reached the frozen player's pipe
            assert stepping.is_alive() and time.monotonic() < deadline, in_flight
            time.sleep(0.01)
        assert stepping.is_alive()  # the request is waiting on the frozen player
        os.kill(pid, signal.SIGKILL)
        stepping.join(60)
        assert len(in_flight) == 1 and isinstance(in_flight[0], RestartError), in_flight
        assert in_flight[0].status == 502 and in_flight[0].code == "player_restarted"
        assert restarting.step("RotateRight").metadata["lastActionSuccess"]
        assert restarting.info()["restarts"] == 1

        pid = one_shot.info()["pid"]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(PlayerCrashedError) as info:
            one_shot.step("Pass")
        assert info.value.status == 502 and info.value.code == "player_crashed"
        assert "SIGKILL" in str(info.value)
        with pytest.raises(ServiceError) as info:
            one_shot.step("Pass")
        assert info.value.status == 410
        restarting.stop()
    finally:
        stop.set()
        worker.join(60)
    assert alice_errors == [] and alice_steps[0] > 0


def test_one_shot_render_of_poses(alice):
    episode = {"scene": "FloorPlan1", "poses": [
        {"position": {"x": 0.0, "y": 0.9, "z": 0.0}, "rotation": 0},
        {"position": {"x": 0.0, "y": 0.9, "z": 0.0}, "rotation": 90},
    ]}
    events = alice.render(episode, environment={"width": 48, "height": 32},
                          render={"modalities": ["rgb", "depth"]})
    assert len(events) == 2
    for event in events:
        assert event.frame.shape == (32, 48, 3) and event.depth_frame.shape == (32, 48)
        assert event.instance_segmentation_frame is None
    assert not np.array_equal(events[0].frame, events[1].frame)
    # the temporary session is gone again
    assert not [s for s in alice.sessions() if "episode" in s["environment"]]


def test_one_shot_render_forwards_a_wsgi_players_json_as_sent(service, alice):
    import msgpack

    episode = {"scene": "FloorPlan1", "actions": ["RotateRight", "RotateRight", "MoveAhead"]}
    body = {"environment": {"width": 32, "height": 32, "transport": "wsgi"}, "episode": episode}
    resp = requests.post(f"{service.url}/v1/render", json=body, timeout=60, headers={
        "Authorization": f"Bearer {ALICE}", "Accept": "application/x-msgpack", "Unirender-Metadata": "as-sent"})
    assert resp.status_code == 200, resp.text
    events = msgpack.unpackb(resp.content, raw=False)["events"]
    forms = ({"metadata", "frames"}, {"metadata", "step", "frames"}, {"metadata_json", "step", "frames"})
    assert len(events) == 4 and all(set(e) in forms for e in events)
    assert any("metadata_json" in e for e in events)  # the steps' metadata, as the player sent it
    decoded = alice.render(episode, environment={"width": 32, "height": 32, "transport": "wsgi"})
    assert [json.loads(e["metadata_json"])["agents"][0]["agent"] if "metadata_json" in e else e["metadata"]["agent"]
            for e in events] == [e.metadata["agent"] for e in decoded]


def test_job_with_progress_manifest_and_ownership(service, alice, bob):
    spec = {
        "name": "tiny",
        "environment": {"width": 32, "height": 24},
        "episodes": [{"scene": "FloorPlan1", "actions": ["RotateRight", "RotateRight", "MoveAhead"]}],
        "output": {"directory": "runs/tiny"},
        "workers": 1,
    }
    job = alice.submit_job(spec)
    seen: list[dict] = []
    status = job.wait(timeout=90, poll=0.2, progress=seen.append)
    assert status["state"] == "succeeded", status
    assert status["progress"]["frames_done"] == status["progress"]["frames_total"] == 4
    assert seen and seen[-1]["frames_done"] == 4
    manifest = job.manifest()
    assert manifest  # the runner's manifest, served as JSON
    out = service.tmp / "data" / "alice" / "runs" / "tiny"
    assert (out / "manifest.json").is_file()
    with pytest.raises(ServiceError) as info:
        bob.request("GET", f"/v1/jobs/{job.id}")
    assert info.value.status == 404
    metrics = requests.get(service.url + "/metrics", timeout=10).text
    assert 'unirender_jobs{state="succeeded"} 1.0' in metrics


def test_job_cancel(service, alice):
    spec = {
        "name": HELD,
        "environment": {"width": 32, "height": 24},
        "episodes": [{"scene": "FloorPlan1", "actions": ["RotateRight"] * 400}],
        "output": {"directory": "runs/cancelled"},
        "workers": 1,
    }
    job = alice.submit_job(spec)
    service.wait_for_log(f"job {job.id} at 1 frames {TEST_HOLD_LINE}")  # mid-job whatever the load
    assert job.status()["state"] == "running"
    job.cancel()
    status = job.wait(timeout=60, poll=0.2)
    assert status["state"] == "cancelled"
    assert status["progress"]["frames_done"] < 401


def test_metrics_count_steps_and_restarts(service, fifo_session):
    fifo_session.step("Pass")
    text = requests.get(service.url + "/metrics", timeout=10).text
    steps = [line for line in text.splitlines() if line.startswith('unirender_steps_total{outcome="ok"}')]
    assert steps and float(steps[0].split()[-1]) > 5
    assert "unirender_player_restarts_total 1.0" in text
    assert "unirender_step_seconds_count" in text
    assert "Traceback" not in service.log()


def test_one_shot_render_of_an_impossible_pose_is_422(alice):
    episode = {"scene": "FloorPlan1", "poses": [{"position": {"x": 1000.0, "y": 0.9, "z": 1000.0}}]}
    with pytest.raises(ServiceError) as info:
        alice.render(episode, environment={"width": 32, "height": 32})
    assert info.value.status == 422 and info.value.code == "episode_failed"


@pytest.mark.parametrize(("headers", "body", "status", "code"), [
    ({"Content-Type": "application/json"}, b"{\"environment\": ", 400, "malformed_body"),
    ({"Content-Type": "application/x-msgpack"}, b"\x92\x01", 400, "malformed_body"),
    ({"Content-Type": "application/json"}, b"{\"pad\": \"" + b"x" * (5 * 2**20) + b"\"}", 413, "body_too_large"),
    ({"Content-Type": "application/json", "Transfer-Encoding": "chunked"}, None, 413, "body_too_large"),
])
def test_malformed_and_oversized_bodies_over_http(service, headers, body, status, code):
    if body is None:  # chunked: no Content-Length up front, the limit must still hold
        body = iter([b"{\"pad\": \"", b"y" * (5 * 2**20), b"\"}"])
    resp = requests.post(service.url + "/v1/sessions", data=body,
                         headers={"Authorization": f"Bearer {ALICE}", **headers}, timeout=30)
    assert resp.status_code == status and resp.json()["error"]["code"] == code
