"""ML-Agents sessions: on the LocalBackend, and over HTTP on a real ``unirender serve`` process (loopback) with the
thin client: create, step with actions, frames back, 422 on bad action shapes, reset, auth, OpenAPI."""

from __future__ import annotations

import re
import sys
import time

import numpy as np
import pytest
import requests
import yaml

from fixtures import no_leaks  # noqa: F401  (a fixture)
from unirender._process import ManagedProcess
from unirender.client import Client, RemoteMLAgentsSession
from unirender.cluster import create_backend
from unirender.protocol.mlagents.events import MLAgentsEvent

BEHAVIOR = "ReachTarget?team=0"
TOKEN = "ml-token-123"
ENV = {
    "platform": "EGL",
    "width": 32,
    "height": 32,
    "time_scale": 100,
    "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"},
}


@pytest.mark.usefixtures("no_leaks")
def test_local_backend_holds_an_mlagents_session():
    from unirender.protocol.mlagents import MLAgentsEvent

    kwargs = {"protocol": "mlagents", "executable": "builtin", "seed": 3, **ENV}
    with create_backend("local", max_sessions=1) as backend:
        session = backend.create_session(kwargs)
        try:
            assert isinstance(session.last_event, MLAgentsEvent)  # started and reset
            from unirender.protocol.mlagents.steps import ActionSpec

            space = session.describe().actions.behaviors[BEHAVIOR]
            decision, _ = session.last_event.steps()
            actions = ActionSpec(space.continuous, space.discrete).random(len(decision), np.random.default_rng(0))
            event = session.step({BEHAVIOR: {"continuous": actions.continuous, "discrete": actions.discrete}})
            assert event.frames()["CameraSensor"].shape == (2, 32, 32, 3)
            assert session.info()["steps"] == 1 and session.info()["pid"]
            pid = session.info()["pid"]
            event = session.reset(None, light_intensity=0.3)
            assert len(event.steps()[0]) == 2 and not len(event.steps()[1])
        finally:
            session.stop()
        assert not backend.sessions()
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlservice")
    config = tmp / "service.yaml"
    config.write_text(yaml.safe_dump({"port": 0, "data_root": str(tmp / "data"), "tokens": {"ml": TOKEN},
                                      "limits": {"pixels": 64 * 64}}))  # fmt: skip
    log = tmp / "serve.log"
    process = ManagedProcess([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                             log_path=str(log), name="unirender-serve")  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and process.alive():
            found = re.search(
                r"unirender serving on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace")
            )
            url = found.group(1) if found else time.sleep(0.05)
        assert url, log.read_text()
        yield url
    finally:
        process.terminate(grace=10)


def test_service_creates_and_steps_an_mlagents_session(service):
    client = Client(service, token=TOKEN)
    with client.session(
        {"protocol": "mlagents", "executable": "builtin", **ENV}, record={"sensors": ["CameraSensor"]}
    ) as session:
        assert isinstance(session, RemoteMLAgentsSession)
        info = session.info()
        assert info["environment"]["environment"]["protocol"] == "mlagents" and info["pid"]
        description = session.describe()
        assert description["family"] == "mlagents" and description["pid"] == info["pid"]
        assert description["actions"]["behaviors"][BEHAVIOR] == {"continuous": 2, "discrete": [3]}
        actions = {BEHAVIOR: {"continuous": np.full((2, 2), 0.5, np.float32), "discrete": [[0], [2]]}}
        event = session.step(actions)
        assert isinstance(event, MLAgentsEvent) and event.behavior_names == [BEHAVIOR]
        decision, terminal = event.steps(BEHAVIOR)
        assert decision.agent_id.tolist() == [0, 1] and decision.agent_id_to_index == {0: 0, 1: 1}
        assert decision.reward.dtype == np.float32 and len(terminal) == 0
        # the batched body by default: one array per sensor, only the recorded camera
        assert event.metadata["batched"] and event.metadata["behaviors"][BEHAVIOR]["sensors"] == ["CameraSensor"]
        frames = event.frames()  # the only behavior's decision agents, as MLAgentsEvent.frames()
        assert list(frames) == ["CameraSensor"] and frames["CameraSensor"].shape == (2, 32, 32, 3)
        assert frames["CameraSensor"].dtype == np.uint8
        assert np.array_equal(decision.frame(1, "CameraSensor"), frames["CameraSensor"][1])
        assert decision.sensor_names == ["CameraSensor"]
        # obs as a local event has them: the builtin game is a package 4.x one, its camera CHW
        assert np.allclose(decision.obs[0], frames["CameraSensor"].transpose(0, 3, 1, 2) / 255.0)
        assert event.step == 1 and session.last_event is event

        # a bad action shape is a 422 naming the path, and the session goes on
        for bad, path in (
            ({BEHAVIOR: {"continuous": [[0.5, 0.5]]}}, f"actions.{BEHAVIOR}.continuous"),
            ({BEHAVIOR: {"continuous": [[0.5], [0.5]]}}, f"actions.{BEHAVIOR}.continuous.0"),
            ({BEHAVIOR: {"discrete": [[3], [0]]}}, f"actions.{BEHAVIOR}.discrete.0.0"),
            ({"Nope?team=0": {}}, "actions.Nope?team=0"),
        ):
            with pytest.raises(Exception) as info:
                session.step(bad)
            assert getattr(info.value, "status", None) == 422 and path in str(info.value), (
                bad,
                str(info.value),
            )
        resp = requests.post(f"{service}/v1/sessions/{session.id}/step", json={"actions": {BEHAVIOR: {
            "continuous": [[True, 1]]}}}, headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert resp.status_code == 422
        assert session.step({}).step == 2  # zeros for every agent

        # JSON: frames on request only, a sensor name selects every agent's frame
        url = f"{service}/v1/sessions/{session.id}/step"
        headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
        resp = requests.post(url, json={}, headers=headers)
        assert resp.status_code == 200 and resp.json()["frames"] == {}
        resp = requests.post(url, json={}, headers=headers, params={"modalities": "CameraSensor"})
        assert sorted(resp.json()["frames"]) == ["CameraSensor.0", "CameraSensor.1"]

        session.batched = False  # today's body: the per-agent records as sent
        event = session.step({})
        agents = event.metadata["behaviors"][BEHAVIOR]["agents"]
        assert [a["id"] for a in agents] == [0, 1] and agents[0]["decision"]
        assert "observations" not in agents[0]  # only the camera is recorded
        assert event.frames()["CameraSensor"].shape == (2, 32, 32, 3)
        session.batched = True

        event = session.reset(light_intensity=0.2)
        assert event.step == session.info()["steps"] and len(event.decision_steps[BEHAVIOR]) == 2

    # same auth and limits as AI2-THOR sessions
    anonymous = requests.post(f"{service}/v1/sessions", json={"environment": {"protocol": "mlagents"}})
    assert anonymous.status_code == 401
    for environment, status, code in (
        ({**ENV, "width": 128, "height": 128}, 422, "resolution_too_large"),
        ({**ENV, "platform": "auto", "executable": "/bin/true"}, 403, "executable_not_allowed"),
        ({**ENV, "time_scale": "fast"}, 422, "invalid_spec"),
    ):
        with pytest.raises(Exception) as info:
            client.mlagents_session(environment)
        assert (getattr(info.value, "status", None), getattr(info.value, "code", None)) == (status, code), (
            str(info.value)
        )
    with pytest.raises(Exception) as info:
        client.mlagents_session({"executable": "builtin", **ENV}, record={"sensors": ["CameraSenser"]})
    assert getattr(info.value, "status", None) == 422 and "did you mean 'CameraSensor'" in str(info.value)
    assert client.sessions() == []

    spec = requests.get(f"{service}/openapi.json").json()
    step_body = spec["paths"]["/v1/sessions/{session_id}/step"]["post"]["requestBody"]["content"]
    refs = [s["$ref"] for s in step_body["application/json"]["schema"]["oneOf"]]
    assert refs[:2] == ["#/components/schemas/Action", "#/components/schemas/MLAgentsStep"]  # then WebGL's
    assert "BehaviorActions" in spec["components"]["schemas"]
    render_body = spec["paths"]["/v1/render"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert [s["$ref"] for s in render_body["oneOf"]][:2] == ["#/components/schemas/RenderRequest",
                                                         "#/components/schemas/MLAgentsRenderRequest"]
    assert "description" in spec["paths"]["/v1/sessions/{session_id}"]["get"]["summary"]
    client.close()


def test_service_runs_an_mlagents_job(service):
    client = Client(service, token=TOKEN)
    job = client.submit_job({
        "name": "served", "environment": {"protocol": "mlagents", **ENV},
        "episodes": [{"steps": 3, "policy": "zeros"}], "output": {"directory": "ml-job", "frames_per_shard": 2},
    })  # fmt: skip
    status = job.wait(timeout=120)
    assert status["state"] == "succeeded", status
    manifest = job.manifest()
    assert manifest["protocol"] == "mlagents" and manifest["counts"]["frames"] == 4
    with pytest.raises(Exception) as info:
        client.submit_job(
            {"environment": {"protocol": "mlagents", **ENV}, "episodes": [{"steps": 3, "polcy": 1}]}
        )
    assert getattr(info.value, "status", None) == 422 and "episodes.0.polcy" in str(info.value)
    client.close()


def test_console_lists_an_mlagents_session(tmp_path):
    from werkzeug.test import Client as WsgiClient

    from unirender.service import create_app
    from unirender.service.config import ANONYMOUS, ServiceConfig

    app = create_app(ServiceConfig(data_root=tmp_path, port=0))
    try:
        resp = WsgiClient(app).post("/v1/sessions", json={"environment": {"protocol": "mlagents", **ENV}})
        assert resp.status_code == 201, resp.get_data(as_text=True)
        (doc,) = app.console._status_doc(ANONYMOUS)["sessions"]
        assert doc["width"] == 32 and doc["scene"] == "ML-Agents: ReachTarget"  # its behaviors, not "?"
        assert "<td>ML-Agents: ReachTarget</td>" in WsgiClient(app).get(
            "/ui/", environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_data(as_text=True)
    finally:
        app.shutdown(timeout=5)


def test_action_check_limits_agents_and_checks_branches():
    from unirender.service.errors import ApiError
    from unirender.service.mlagents_sessions import check_behavior_actions
    from unirender.simulator import BehaviorActions

    spaces = {"B": BehaviorActions(1, (2, 5))}
    check_behavior_actions({"B": {"continuous": [[0.1], [0.2]], "discrete": [[1, 4], [0, 0]]}}, spaces, {"B": 2}, 2)
    for actions, counts, code, path in (
        ({"B": {}}, {"B": 3}, "too_many_agents", "actions.B"),
        ({"B": {"discrete": [[1, 5], [0, 0]]}}, {"B": 2}, "invalid_action", "actions.B.discrete.0.1"),
        ({"B": {"discrete": [[1], [0]]}}, {"B": 2}, "invalid_action_shape", "actions.B.discrete.0"),
        ({"C": {}}, {"B": 2}, "unknown_behavior", "actions.C"),
    ):
        with pytest.raises(ApiError) as info:
            check_behavior_actions(actions, spaces, counts, 2)
        assert (info.value.status, info.value.code, info.value.details["path"]) == (422, code, path)


def test_service_renders_an_mlagents_episode(service):
    """POST /v1/render with an ML-Agents game: a temporary game per repeat (its seed), the policy's steps, every
    frame back as the event documents of a session; the same request twice gives the same frames."""
    client = Client(service, token=TOKEN)
    body = {"environment": {"protocol": "mlagents", "executable": "builtin", **ENV},
            "record": {"sensors": ["CameraSensor"]},
            "episode": {"steps": 2, "seed": 5, "policy": {"kind": "random", "seed": 1}, "repeat": 2}}  # fmt: skip
    first = client.request("POST", "/v1/render", body, accept="application/x-msgpack")
    from unirender import http_format

    events = http_format.decode_document(first.headers["Content-Type"], first.content)["events"]
    assert len(events) == 6  # (reset + 2 steps) x 2 repeats
    assert [e["metadata"]["step"] for e in events] == [0, 1, 2, 0, 1, 2]
    agents = events[0]["metadata"]["behaviors"][BEHAVIOR]["agents"]
    assert len(agents) == 2 and len(agents[0]["action"]["continuous"]) == 2  # the policy's action, recorded
    assert sorted(events[1]["frames"]) == ["CameraSensor.0", "CameraSensor.1"]
    assert events[1]["frames"]["CameraSensor.0"].shape == (32, 32, 3)
    again = client.request("POST", "/v1/render", body, accept="application/x-msgpack")
    events_again = http_format.decode_document(again.headers["Content-Type"], again.content)["events"]
    for a, b in zip(events, events_again, strict=True):
        assert a["metadata"] == b["metadata"]
        assert all(np.array_equal(a["frames"][k], b["frames"][k]) for k in a["frames"])
    assert client.sessions() == []  # every temporary game stopped

    with pytest.raises(Exception) as info:  # refused before any game starts
        client.request("POST", "/v1/render", {**body, "episode": {"steps": 300, "policy": "zeros"}})
    assert (getattr(info.value, "status", None), getattr(info.value, "code", None)) == (422, "render_too_large")
    with pytest.raises(Exception) as info:
        client.request("POST", "/v1/render", {**body, "record": {"sensors": ["CameraSenser"]}})
    assert getattr(info.value, "status", None) == 422 and "did you mean 'CameraSensor'" in str(info.value)
    assert client.sessions() == []
    client.close()


def test_client_session_takes_an_mlagents_spec_file(service, tmp_path):
    """``Client.session("ml.yaml")``: the spec port loads the file by its family (it used to raise ``SpecError:
    environment.protocol: unknown key``)."""
    path = tmp_path / "ml.yaml"
    path.write_text(yaml.safe_dump({"environment": {"protocol": "mlagents", "executable": "builtin", **ENV},
                                    "episodes": [{"steps": 1}]}))  # fmt: skip
    with Client(service, token=TOKEN).session(str(path), record={"sensors": ["CameraSensor"]}) as session:
        assert isinstance(session, RemoteMLAgentsSession)
        assert session.info()["environment"]["environment"]["width"] == 32
