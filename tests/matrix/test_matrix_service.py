"""The service layer on every family and backend: a real service (``service.server.Server``: the app on waitress,
127.0.0.1, an ephemeral port) over the case's backend, driven through the thin client: a session created,
stepped and reset with typed remote events (AI2-THOR ``Event``, ML-Agents ``MLAgentsEvent`` with frames),
described and deleted (WebGL: ``RemoteWebGLEvent``); and ``/v1/render`` per family."""

from __future__ import annotations

import threading

import numpy as np

from unirender.client import Client, RemoteMLAgentsSession, RemoteSession
from unirender.client.webgl import RemoteWebGLEvent, RemoteWebGLSession
from unirender.protocol.event import Event
from unirender.protocol.mlagents.events import MLAgentsEvent
from unirender.service.config import ServiceConfig
from unirender.service.server import Server

H, W = 40, 48  # tests/matrix/conftest.py's frames


def serve(case, request, tmp_path) -> str:
    """The service on the case's backend for the length of the test; its URL."""
    config = ServiceConfig(host="127.0.0.1", port=0, data_root=tmp_path, **case.service_config)
    server = Server(config, backend=case.backend())
    thread = threading.Thread(target=server.serve_forever, name="matrix-service", daemon=True)
    thread.start()

    def stop() -> None:
        server.request_shutdown("the test is over")
        thread.join(60)
        assert not thread.is_alive(), "the service did not stop"

    request.addfinalizer(stop)
    return server.url


def environment_of(case) -> dict:
    """The case's environment as a spec (and so a request body) spells it: an AI2-THOR ``transport``, which
    controller kwargs call ``server`` (``case.environment`` gives the latter's key today)."""
    environment = dict(case.environment)
    if "server" in environment:
        environment["transport"] = environment.pop("server")
    return environment


def behavior_of(description: dict) -> str:
    (behavior,) = description["actions"]["behaviors"]
    return behavior


def assert_camera(frames: np.ndarray, agents: int | None = None) -> None:
    assert frames.dtype == np.uint8 and frames.shape[-3:] == (H, W, 3)
    assert agents is None or frames.shape[0] == agents
    assert np.ptp(frames) > 0  # a rendered view, not a flat colour


def test_a_served_session_steps_with_typed_events(case, request, tmp_path):
    with Client(serve(case, request, tmp_path)) as client:
        session = client.session(environment_of(case))
        try:
            description = session.describe()
            assert description["family"] == case.family == session.family
            assert description["pid"] and description["observations"]
            if case.family == "ai2thor":
                assert isinstance(session, RemoteSession)
                event = session.step("RotateRight", degrees=90)
                assert isinstance(event, Event) and event.metadata["lastActionSuccess"]
                assert_camera(event.frame)
                assert isinstance(session.reset("FloorPlan201_physics"), Event)
                assert session.last_event.metadata["sceneName"] == "FloorPlan201_physics"
            elif case.family == "webgl":
                assert isinstance(session, RemoteWebGLSession)
                event = session.step("right")
                assert isinstance(event, RemoteWebGLEvent) and event.action == "right" and event.step == 1
                assert_camera(event.frame)
                assert event.metadata["position"][0] > session.reset().metadata["position"][0]
            else:
                assert isinstance(session, RemoteMLAgentsSession)
                behavior = behavior_of(description)
                n = len(session.reset().decision_steps[behavior])
                event = session.step({behavior: {"continuous": np.full((n, 2), 0.5), "discrete": [[1]] * n}})
                assert isinstance(event, MLAgentsEvent) and event.behavior_names == [behavior]
                decision, _ = event.steps(behavior)
                assert len(decision) == n and decision.reward.dtype == np.float32
                assert_camera(event.frames(behavior)["CameraSensor"], n)
                assert [o.shape[0] for o in decision.obs] == [n] * len(decision.obs)
            assert session.info()["steps"] >= 1
        finally:
            session.stop()
        assert client.sessions() == []


EPISODES = {
    "ai2thor": {"scene": "FloorPlan1", "actions": [{"action": "RotateRight", "degrees": 90}]},
    "mlagents": {"steps": 1, "policy": "zeros"},
    "webgl": {"actions": ["right"]},
}


def test_a_one_shot_render(family_case, request, tmp_path):
    with Client(serve(family_case, request, tmp_path)) as client:
        events = client.render(EPISODES[family_case.family], environment=environment_of(family_case))
        assert len(events) == 2  # the reset's frame, then the step's
        for event in events:
            if family_case.family == "ai2thor":
                assert isinstance(event, Event)
                assert_camera(event.frame)
            elif family_case.family == "webgl":
                assert isinstance(event, RemoteWebGLEvent)
                assert_camera(event.frame)
            else:
                assert isinstance(event, MLAgentsEvent)
                assert_camera(event.frames()["CameraSensor"])
        assert client.sessions() == []  # the temporary player is gone
