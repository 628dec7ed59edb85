"""Sessions as video on a real ``unirender serve`` with the reference player: ``record.video`` at creation,
start/stop while a session runs, ``GET /v1/sessions/{id}/video`` decoded frame for frame against the steps'
frames, Range requests, the errors, and the file gone with its session."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from unirender.client import Client

av = pytest.importorskip("av")

TOKEN = "video-secret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
W, H = 96, 72
TURNS = ["RotateRight", "RotateRight", "MoveAhead"]


@pytest.fixture(scope="module")
def service(make_service):
    return make_service({"tokens": {"alice": TOKEN}, "limits": {"sessions_per_token": 3}})


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, TOKEN) as client:
        yield client


def decode(data: bytes) -> tuple[list[np.ndarray], float]:
    import io

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        return [f.to_ndarray(format="rgb24") for f in container.decode(stream)], float(stream.average_rate)


def psnr(a, b) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def nearest(frame, candidates) -> int:
    return max(range(len(candidates)), key=lambda i: psnr(frame, candidates[i]))


def post(service, path, body=None, status=200):
    resp = requests.post(service.url + path, json=body or {}, headers=AUTH, timeout=60)
    assert resp.status_code == status, resp.text
    return resp.json()


def test_start_stop_and_download_while_a_session_runs(service, alice):
    with alice.session({"width": W, "height": H}, scene="FloorPlan1") as session:
        sid = session.id
        base = f"/v1/sessions/{sid}/video"
        err = requests.get(service.url + base, headers=AUTH, timeout=30)
        assert err.status_code == 404 and err.json()["error"]["code"] == "no_video"
        started = post(service, base + "/start", {"fps": 12})
        assert started["recording"] and started["view"] == "frame" and started["frames"] == 1
        assert post(service, base + "/start", status=409)["error"]["code"] == "already_recording"
        shown = [np.asarray(session.step("Pass").frame).copy()]  # the frame shown when recording started
        for action in TURNS:
            shown.append(np.asarray(session.step(action).frame).copy())
        busy = requests.get(service.url + base, headers=AUTH, timeout=30)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "recording"
        doc = requests.get(service.url + f"/v1/sessions/{sid}", headers=AUTH, timeout=30).json()
        assert doc["video"]["recording"] and doc["video"]["frames"] == 1 + 1 + len(TURNS)
        stopped = post(service, base + "/stop")
        assert not stopped["recording"] and stopped["finished"]["frames"] == 5 and stopped["finished"]["fps"] == 12
        assert post(service, base + "/stop", status=409)["error"]["code"] == "not_recording"
        resp = requests.get(service.url + base, headers=AUTH, timeout=30)
        assert resp.status_code == 200 and resp.headers["Content-Type"] == "video/mp4"
        frames, fps = decode(resp.content)
        assert fps == 12 and len(frames) == 5
        # frame 0: what the session showed at the start; then one per step (Pass repeats it)
        assert [nearest(f, shown) for f in frames[1:]] == [0, 1, 2, 3]
        assert min(psnr(f, s) for f, s in zip(frames[1:], shown, strict=True)) >= 30  # 96x72: chroma-limited
        part = requests.get(service.url + base, headers={**AUTH, "Range": "bytes=0-99"}, timeout=30)
        assert part.status_code == 206 and part.content == resp.content[:100]  # browsers seek with ranges
        path = next((service.tmp / "data").rglob(f"{sid}-1.mp4"))
    assert not path.exists()  # the recording goes with its session
    gone = requests.get(service.url + base, headers=AUTH, timeout=30)
    assert gone.status_code in (404, 410)


def test_record_video_at_creation_records_from_the_first_frame(service):
    body = {"environment": {"width": W, "height": H}, "scene": "FloorPlan1",
            "record": {"video": {"fps": 5, "quality": "medium"}}}  # fmt: skip
    created = post(service, "/v1/sessions", body, status=201)
    sid = created["id"]
    try:
        assert created["video"]["recording"] and created["video"]["frames"] == 1
        for action in TURNS:
            post(service, f"/v1/sessions/{sid}/step", {"action": action})
        assert post(service, f"/v1/sessions/{sid}/video/stop")["finished"]["frames"] == 1 + len(TURNS)
        frames, fps = decode(requests.get(service.url + f"/v1/sessions/{sid}/video", headers=AUTH, timeout=30).content)
        assert fps == 5 and len(frames) == 1 + len(TURNS) and frames[0].shape == (H, W, 3)
    finally:
        requests.delete(service.url + f"/v1/sessions/{sid}", headers=AUTH, timeout=60)


@pytest.mark.parametrize("record, field", [
    ({"video": {"fps": 0}}, "fps"),
    ({"video": {"codec": "nosuchcodec"}}, "codec"),
    ({"video": {"quality": "ultra"}}, "quality"),
    ({"video": {"colour": "blue"}}, "colour"),
])  # fmt: skip
def test_bad_recording_options_are_refused_before_a_player_starts(service, record, field):
    body = {"environment": {"width": W, "height": H}, "record": record}
    err = post(service, "/v1/sessions", body, status=422)["error"]
    assert err["code"] == "invalid_spec" and field in err["message"]
    assert requests.get(service.url + "/v1/sessions", headers=AUTH, timeout=30).json()["sessions"] == []


def test_bad_options_to_start(service, alice):
    with alice.session({"width": W, "height": H}) as session:
        base = f"/v1/sessions/{session.id}/video"
        assert "fps" in post(service, base + "/start", {"fps": -1}, status=422)["error"]["message"]
        assert "unknown view" in post(service, base + "/start", {"view": "smell"}, status=422)["error"]["message"]
        assert post(service, base + "/start", {"view": "frame"})["recording"] is True


def test_an_mlagents_session_records_an_agent_camera(service, alice):
    pytest.importorskip("grpc")
    env = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 32, "height": 32,
           "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"}}  # fmt: skip
    behavior = "ReachTarget?team=0"
    view = f"{behavior}/CameraSensor/1"
    # record.sensors is the family's (which sensors events carry), record.video every family's
    with alice.session(env, record={"sensors": ["CameraSensor"], "video": {"fps": 10, "view": view}}) as session:
        info = requests.get(service.url + f"/v1/sessions/{session.id}", headers=AUTH, timeout=30).json()
        assert info["video"]["recording"] and info["video"]["view"] == view
        shown = []
        for _ in range(3):
            event = session.step({behavior: {"continuous": [[1.0, 0.5]] * 2, "discrete": [[1]] * 2}})
            shown.append(np.asarray(event.steps(behavior)[0].frame(1, "CameraSensor")).copy())
        assert post(service, f"/v1/sessions/{session.id}/video/stop")["finished"]["frames"] == 4
        frames, fps = decode(requests.get(service.url + f"/v1/sessions/{session.id}/video", headers=AUTH,
                                          timeout=30).content)  # fmt: skip
        assert fps == 10 and len(frames) == 4 and frames[0].shape == (32, 32, 3)
        assert min(psnr(f, s) for f, s in zip(frames[1:], shown, strict=True)) >= 28  # 32x32: chroma-limited
