"""The batched ML-Agents body (issue 49 stage 3, docs/service.md): negotiated with ``Unirender-Body: batched``,
each sensor one ``(agents, ...)`` array in its native dtype; a client that does not ask gets today's body byte for
byte; actions go up as msgpack arrays and are checked with the list bodies' errors. On the reference game (builtin
player, local sessions in the WSGI app)."""

from __future__ import annotations

import json

import msgpack
import numpy as np
import pytest
from werkzeug.test import Client as WsgiClient

from unirender import http_format
from unirender.client.mlagents import RemoteMLAgentsSession, action_rows, event_from_document
from unirender.cluster import create_backend
from unirender.jobs.mlagents_episodes import behavior_views
from unirender.service.errors import ApiError
from unirender.service.mlagents_sessions import batched_document, mlagents_document
from unirender.spec.mlagents import RecordSpec

BEHAVIOR = "ReachTarget?team=0"
KWARGS = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 16, "height": 16,
          "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2", "UNIRENDER_MLAGENTS_MAX_STEP": "3"}}
ENV = {k: v for k, v in KWARGS.items() if k not in ("protocol",)}
BATCHED = {http_format.BODY_HEADER: http_format.BATCHED}


def decoded(doc: dict, fmt: str = http_format.MSGPACK) -> dict:
    ctype, body = http_format.encode_document(doc, fmt)
    return http_format.decode_document(ctype, body if isinstance(body, bytes) else b"".join(body))


def test_the_batched_body_round_trips_a_game_s_events():
    with create_backend("local", max_sessions=1) as backend:
        session = backend.create_session(KWARGS)
        try:
            description = session.describe()
            specs = behavior_views(description)
            layouts = {(o.behavior, o.key[len(o.behavior) + 1:]): o.layout for o in description.observations
                       if o.behavior and o.layout}  # fmt: skip
            event, ended = session.last_event, 0
            for step in range(6):  # agents end at max_step 3: terminal steps with interrupted flags
                doc = batched_document(event, step, specs, RecordSpec(), None, layouts)
                for fmt in (http_format.MSGPACK, http_format.JSON):
                    remote = event_from_document(decoded(doc, fmt))
                    assert remote.step == step and remote.behavior_names == event.behavior_names
                    for theirs, mine in zip(event.steps(BEHAVIOR), remote.steps(BEHAVIOR), strict=True):
                        assert type(mine) is type(theirs)
                        assert mine.agent_id.dtype == np.int32 and mine.agent_id.tolist() == theirs.agent_id.tolist()
                        assert mine.reward.dtype == np.float32 and np.array_equal(mine.reward, theirs.reward)
                        assert mine.sensor_names == theirs.sensor_names == ["CameraSensor", "VectorSensor_size8"]
                        camera = mine.frames["CameraSensor"]  # uint8 as sent, (agents, H, W, C)
                        assert camera.dtype == np.uint8 and camera.shape == (len(theirs), 16, 16, 3)
                        assert np.array_equal(camera, theirs.frames["CameraSensor"])
                        for a, b in zip(mine.obs, theirs.obs, strict=True):  # every agent's own: terminal too
                            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape and np.array_equal(a, b)
                        masks = [getattr(steps, "action_mask", None) for steps in (mine, theirs)]
                        assert (masks[0] is None) == (masks[1] is None)  # one (n, branch) mask per branch
                        assert all(np.array_equal(a, b) for a, b in zip(*masks, strict=True)) if masks[0] else True
                    ended += len(event.terminal_steps[BEHAVIOR])
                    terminal = remote.terminal_steps[BEHAVIOR]
                    assert terminal.interrupted.tolist() == event.terminal_steps[BEHAVIOR].interrupted.tolist()
                event = session.step({})
            assert ended, "no agent reached max_step: the terminal steps went untested"

            # the arrays on the wire: native dtypes, one per sensor and field, and nothing else
            doc = batched_document(event, 6, specs, RecordSpec(), ["VectorSensor_size8"], layouts)
            at = f"{BEHAVIOR}/decision/"
            assert doc["frames"][at + "VectorSensor_size8"].dtype == np.float32
            assert at + "CameraSensor" not in doc["frames"]  # only what was asked for
            assert doc["metadata"]["behaviors"][BEHAVIOR]["sensors"] == ["VectorSensor_size8"]
            remote = event_from_document(decoded(doc))
            assert remote.decision_steps[BEHAVIOR].sensor_names == ["VectorSensor_size8"]
            assert not remote.decision_steps[BEHAVIOR].agent_id.flags.writeable  # read-only, as the body is
            with pytest.raises(ApiError) as info:
                batched_document(event, 6, specs, RecordSpec(), ["CameraSenser"], layouts)
            assert info.value.status == 400 and info.value.code == "unknown_modality"
        finally:
            session.stop()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from unirender.service import create_app
    from unirender.service.config import ServiceConfig

    app = create_app(ServiceConfig(data_root=tmp_path_factory.mktemp("batched"), port=0))
    try:
        yield app
    finally:
        app.shutdown(timeout=5)


@pytest.fixture()
def session_id(app):
    http = WsgiClient(app)
    resp = http.post("/v1/sessions", json={"environment": {"protocol": "mlagents", **ENV}})
    assert resp.status_code == 201, resp.get_data(as_text=True)
    session_id = resp.get_json()["id"]
    yield session_id
    http.delete(f"/v1/sessions/{session_id}")


def test_a_client_of_today_s_body_gets_it_from_the_new_server(app, session_id):
    """Without ``Unirender-Body``, a step's response is today's body, byte for byte: the dataset record of the
    event the session holds, encoded as ever (JSON and msgpack), for today's JSON list actions."""
    from unirender.service.config import ANONYMOUS

    http = WsgiClient(app)
    url = f"/v1/sessions/{session_id}/step"
    entry = app.sessions.get(ANONYMOUS, session_id)
    actions = {"actions": {BEHAVIOR: {"continuous": [[0.5, -0.5], [0.0, 1.0]], "discrete": [[1], [2]]}}}
    for fmt, params in ((http_format.MSGPACK, {}), (http_format.JSON, {"modalities": "CameraSensor"}),
                        (http_format.JSON, {})):  # fmt: skip
        resp = http.post(url, json=actions, headers={"Accept": fmt}, query_string=params)
        assert resp.status_code == 200, resp.get_data(as_text=True)
        wanted = params["modalities"].split(",") if params else ([] if fmt == http_format.JSON else None)
        before = mlagents_document(entry.session.last_event, entry.session.steps, entry.adapter.specs,
                                   entry.adapter.record, wanted)  # fmt: skip
        ctype, body = http_format.encode_document(before, fmt)
        assert resp.headers["Content-Type"] == ctype and resp.get_data() == body
        doc = http_format.decode_document(ctype, resp.get_data())
        assert "batched" not in doc["metadata"] and "agents" in doc["metadata"]["behaviors"][BEHAVIOR]
    # the same request asking for the batched body gets it
    resp = http.post(url, json=actions, headers={"Accept": http_format.MSGPACK, **BATCHED})
    doc = http_format.decode_document(resp.headers["Content-Type"], resp.get_data())
    assert doc["metadata"]["batched"] and doc["frames"][f"{BEHAVIOR}/decision/CameraSensor"].dtype == np.uint8
    # and so does the last event, and a batch of steps
    resp = http.get(f"/v1/sessions/{session_id}/event", headers={"Accept": http_format.MSGPACK, **BATCHED})
    assert http_format.decode_document(resp.headers["Content-Type"], resp.get_data())["metadata"]["batched"]
    resp = http.post("/v1/steps", json={"steps": [{"session": session_id, "action": actions}]},
                     headers={"Accept": http_format.MSGPACK, **BATCHED})  # fmt: skip
    (item,) = http_format.decode_document(resp.headers["Content-Type"], resp.get_data())["events"]
    assert item["metadata"]["batched"] and item["session"] == session_id


def _msgpack_step(http, session_id: str, actions: dict):
    ctype, body = http_format.encode_request_body({"actions": actions}, http_format.MSGPACK)
    return http.post(f"/v1/sessions/{session_id}/step", data=body, headers={"Content-Type": ctype, **BATCHED})


def test_action_arrays_are_accepted_and_checked_as_lists_are(app, session_id):
    http = WsgiClient(app)
    good = {"continuous": np.array([[0.5, -0.5], [0.0, 1.0]], np.float32), "discrete": np.array([[1], [2]], np.int32)}
    _, body = http_format.encode_request_body({"actions": {BEHAVIOR: good}}, http_format.MSGPACK)
    assert b"0.5" not in body and msgpack.unpackb(body)["actions"][BEHAVIOR]["continuous"]["dtype"] == "<f4"
    resp = _msgpack_step(http, session_id, {BEHAVIOR: good})
    assert resp.status_code == 200, resp.get_data(as_text=True)
    # the same error, word for word, for an array as for the list with the same values
    for kind, bad in (("continuous", [[0.5, 0.5]]), ("continuous", [[0.5], [0.5]]), ("discrete", [[3], [0]]),
                      ("discrete", [[1, 1], [0, 0]])):  # fmt: skip
        as_list = http.post(f"/v1/sessions/{session_id}/step", json={"actions": {BEHAVIOR: {kind: bad}}})
        dtype = np.float32 if kind == "continuous" else np.int32
        as_array = _msgpack_step(http, session_id, {BEHAVIOR: {kind: np.array(bad, dtype)}})
        assert as_list.status_code == as_array.status_code == 422
        assert as_array.get_json() == as_list.get_json(), (as_array.get_json(), as_list.get_json())
    # what only an array can get wrong: its rank, its dtype, non-finite values, a malformed description
    for kind, array, code in (
        ("continuous", np.zeros(2, np.float32), "invalid_action_shape"),
        ("continuous", np.ones((2, 2), bool), "invalid_action"),
        ("discrete", np.full((2, 1), 0.5, np.float32), "invalid_action"),
        ("continuous", np.full((2, 2), np.nan, np.float32), "invalid_action"),
    ):
        resp = _msgpack_step(http, session_id, {BEHAVIOR: {kind: array}})
        error = resp.get_json()["error"]
        assert resp.status_code == 422 and error["code"] == code, error
        assert error["path"] == f"actions.{BEHAVIOR}.{kind}"
    description = {"shape": [2, 2], "dtype": "<f4", "data": b"\0" * 12}  # 16 bytes wanted
    body = msgpack.packb({"actions": {BEHAVIOR: {"continuous": description}}}, use_bin_type=True)
    resp = http.post(f"/v1/sessions/{session_id}/step", data=body, headers={"Content-Type": http_format.MSGPACK})
    assert resp.status_code == 422 and "16 bytes" in resp.get_json()["error"]["message"]
    # today's JSON list body is still taken
    resp = http.post(f"/v1/sessions/{session_id}/step", json={"actions": {BEHAVIOR: {"discrete": [[0], [1]]}}})
    assert resp.status_code == 200


def test_the_client_sends_arrays_and_asks_for_the_batched_body():
    assert RemoteMLAgentsSession.batched and RemoteMLAgentsSession.request_format == http_format.MSGPACK
    rows = np.zeros((2, 3), np.float32)
    assert action_rows("continuous", rows) is rows  # no copy, no tolist()
    assert action_rows("discrete", [[1], [2]]).dtype == np.int32
    assert action_rows("continuous", [[0.5], [0.5, 1.0]]) == [[0.5], [0.5, 1.0]]  # ragged: the service says so
    assert action_rows("discrete", [[True]]) == [[True]]
    assert json.loads(http_format.encode_request_body({"a": rows})[1]) == {"a": rows.tolist()}  # JSON as before
