"""The ``service`` placement (issue 26): a real ``unirender serve`` on 127.0.0.1, its sessions driven through
``create_backend("service", url=...)`` by the session API, the Gymnasium envs and the vector env (batched
steps), for every family; a crash in the middle of a batch; ``recv()`` under uneven players."""

from __future__ import annotations

import os
import re
import signal
import threading

import numpy as np
import pytest
import requests

from unirender.cluster import SessionLostError
from unirender.errors import PlayerCrashedError
from unirender.protocol.mlagents.events import MLAgentsEvent


def batch_requests(url: str) -> float:
    """How many ``POST /v1/steps`` the service answered 200 (its /metrics)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    found = re.search(r'route="batch_steps",status="200"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_session_verbs_return_the_local_event_types(service_case):
    from unirender.protocol.event import Event

    backend = service_case.backend()
    session = backend.create_session(service_case.controller_kwargs)
    assert session.family == service_case.family and session.info()["backend"] == "service"
    description = session.describe()
    assert description.family == service_case.family
    if service_case.family == "ai2thor":
        assert isinstance(session.last_event, Event) and session.last_event.frame.shape == (40, 48, 3)
        event = session.step("RotateRight")
        assert isinstance(event, Event) and event.metadata["lastActionSuccess"]
        assert session.reset().frame.shape == (40, 48, 3)
    elif service_case.family == "webgl":
        from unirender.client.webgl import RemoteWebGLEvent

        assert isinstance(session.last_event, RemoteWebGLEvent) and session.last_event.frame.shape == (40, 48, 3)
        event = session.step("right")
        assert isinstance(event, RemoteWebGLEvent) and event.action == "right"
        assert session.reset().metadata["position"][0] < event.metadata["position"][0]
    else:
        behavior = next(iter(description.actions.behaviors))
        assert isinstance(session.last_event, MLAgentsEvent)
        decision, _ = session.step({}).steps(behavior)
        assert decision.frames and next(iter(decision.frames.values())).shape[1:] == (40, 48, 3)
        assert isinstance(session.reset(), MLAgentsEvent)
    assert session.info()["steps"] == 2
    session.stop()
    assert backend.sessions() == []


def test_vector_env_over_the_service_steps_in_one_request(service_case):
    from unirender.gym import UnityVectorEnv

    backend = service_case.backend()
    url = backend.client.url
    env = UnityVectorEnv(2, service_case.controller_kwargs, backend=backend)
    try:
        obs, _ = env.reset(seed=0)
        before = batch_requests(url)
        for _ in range(3):
            obs, rewards, *_ = env.step(env.action_space.sample())
        assert batch_requests(url) - before == 3  # one request per vector step
        assert rewards.shape == (2,)
        env.step_async(env.action_space.sample())
        assert env.step_wait()[1].shape == (2,)
        # Two vector envs on one backend, stepped at once from two threads: each its own batch.
        other = UnityVectorEnv(2, service_case.controller_kwargs, backend=backend)
        try:
            other.reset(seed=5)
            before = batch_requests(url)
            for _ in range(2):
                threads = [threading.Thread(target=e.step, args=(e.action_space.sample(),)) for e in (env, other)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
            assert batch_requests(url) - before == 4
        finally:
            other.close()
    finally:
        env.close()


def test_gym_env_and_make_vec_env_take_the_service_backend(service_case):
    from unirender.gym import make_env
    from unirender.gym.sb3 import make_vec_env

    url = service_case.backend().client.url
    env = make_env(service_case.controller_kwargs, backend="service", backend_options={"url": url})
    try:
        obs, _ = env.reset(seed=1)
        assert env.observation_space.contains(obs)
        assert env.observation_space.contains(env.step(env.action_space.sample())[0])
    finally:
        env.close()
    extra = {"action_parts": "continuous"} if service_case.family == "mlagents" else {}  # SB3: no Dict actions
    venv = make_vec_env(2, service_case.controller_kwargs, backend="service", backend_options={"url": url},
                        **extra)
    try:
        venv.reset()
        venv.step(np.array([venv.action_space.sample() for _ in range(2)]))
    finally:
        venv.close()


def _pid(session) -> int:
    return int(session.remote.info()["pid"])


@pytest.fixture
def ai2thor_service(request):
    """AI2-THOR under the service placement: the batch and recv paths are family-blind."""
    from tests.matrix.conftest import Case

    return Case("ai2thor-fifo", "service", request)


def test_a_player_crashing_mid_batch_fails_only_its_own_step(ai2thor_service):
    service_case = ai2thor_service
    backend = service_case.backend()
    kwargs = {**service_case.controller_kwargs, "max_restarts": 0}
    sessions = [backend.create_session(kwargs) for _ in range(3)]
    os.kill(_pid(sessions[1]), signal.SIGKILL)
    # The client's own batch: the others' events arrive, the crashed one's error too.
    results = backend.client.step_many([(s.remote, "RotateRight") for s in sessions])
    assert results[0].metadata["lastActionSuccess"] and results[2].metadata["lastActionSuccess"]
    assert isinstance(results[1], PlayerCrashedError) and results[1].code == "player_crashed"
    # Through the backend's step_many, as a vector env steps: the same exception types as locally.
    crashed = backend.create_session(kwargs)
    sessions = [sessions[0], crashed, sessions[2]]
    os.kill(_pid(crashed), signal.SIGKILL)
    outcome = backend.step_many([(s, "RotateLeft") for s in sessions])
    assert isinstance(outcome[1], PlayerCrashedError) and crashed.state == "lost"
    assert outcome[0].metadata["lastActionSuccess"] and outcome[2].metadata["lastActionSuccess"]
    assert sessions[0].last_event is outcome[0] and sessions[0].steps == 1
    # A lost session in a batch: its own SessionLostError, the others step.
    outcome = backend.step_many([(s, "Pass") for s in sessions])
    assert isinstance(outcome[1], SessionLostError) and outcome[0].metadata["lastActionSuccess"]
    assert crashed.restart().frame.shape == (40, 48, 3) and crashed.step("Pass").metadata["lastActionSuccess"]
    # A batch the service refuses whole (a session it has ended behind the backend's back): every member gets
    # its own answer, as without a batch.
    sessions[2].remote.stop()
    outcome = backend.step_many([(s, "Pass") for s in sessions])
    assert outcome[0].metadata["lastActionSuccess"] and outcome[1].metadata["lastActionSuccess"]
    assert isinstance(outcome[2], SessionLostError) and sessions[0].state == "ready"
    with pytest.raises(ValueError, match="once"):
        backend.step_many([(sessions[0], "Pass"), (sessions[0], "Pass")])


def test_a_player_crashing_in_a_vector_step_truncates_only_its_env(ai2thor_service):
    """The vector env's batched step: the crashed env's episode ends as truncated on its restarted player, the
    others step as usual, and the next vector step is again one request."""
    from unirender.gym import UnityVectorEnv

    backend = ai2thor_service.backend()
    env = UnityVectorEnv(3, ai2thor_service.controller_kwargs, backend=backend)
    try:
        env.reset()
        env.step(np.array([0, 0, 0]))
        pid = _pid(env.envs[1].session)
        os.kill(pid, signal.SIGKILL)
        before = batch_requests(backend.client.url)
        obs, rewards, terminated, truncated, infos = env.step(np.array([1, 1, 1]))
        assert truncated.tolist() == [False, True, False] and not terminated.any()
        assert infos["restarted"].tolist() == [False, True, False] and infos["_restarted"][1]
        assert env.observation_space.contains(obs) and _pid(env.envs[1].session) != pid
        env.step(np.array([0, 0, 0]))
        assert batch_requests(backend.client.url) - before == 2
    finally:
        env.close()


def test_recv_returns_the_envs_that_finish_first(ai2thor_service):
    from unirender.gym import UnityVectorEnv

    service_case = ai2thor_service
    backend = service_case.backend()
    env = UnityVectorEnv(3, service_case.controller_kwargs, backend=backend, batch_size=2)
    try:
        env.reset()
        slow = _pid(env.envs[0].session)
        os.kill(slow, signal.SIGSTOP)  # env 0's player takes as long as we say
        try:
            env.send(np.array([1, 1, 1]))
            _, rewards, _, _, infos = env.recv()
            assert sorted(infos["env_id"].tolist()) == [1, 2] and rewards.shape == (2,)
            env.send(np.array([2, 2]), env_ids=[1, 2])
            assert sorted(env.recv()[4]["env_id"].tolist()) == [1, 2]  # env 0 still stepping
        finally:
            os.kill(slow, signal.SIGCONT)
        assert env.recv()[4]["env_id"].tolist() == [0]
        with pytest.raises(ValueError, match="nothing sent"):
            env.recv()
    finally:
        env.close()


def test_render_with_the_service_backend_writes_the_local_dataset(service_case, tmp_path):
    """``unirender render --backend service --url``: the runner drives the service's sessions and writes the
    dataset here, frame for frame what the local backend writes."""
    import json

    from unirender.cli import main
    from unirender.jobs import load_dataset

    url = service_case.backend().client.url
    if service_case.family == "ai2thor":
        spec = {"environment": service_case.environment, "render": {"modalities": ["rgb", "depth"]},
                "episodes": [{"scene": "FloorPlan1", "actions": ["MoveAhead", "RotateRight"]}]}
    elif service_case.family == "webgl":
        spec = {"environment": service_case.environment, "episodes": [{"actions": ["right", "red"]}]}
    else:
        spec = {"environment": service_case.environment, "episodes": [{"steps": 2, "seed": 3}]}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    assert main(["render", str(path), "--backend", "service", "--url", url, "--out", str(tmp_path / "remote"),
                 "--quiet"]) == 0
    assert main(["render", str(path), "--out", str(tmp_path / "local"), "--quiet"]) == 0
    remote, local = list(load_dataset(tmp_path / "remote")), list(load_dataset(tmp_path / "local"))
    assert len(remote) == len(local) > 0
    for a, b in zip(remote, local, strict=True):
        frames_a = a.frames() if callable(getattr(a, "frames", None)) else {"frame": a.frame}
        frames_b = b.frames() if callable(getattr(b, "frames", None)) else {"frame": b.frame}
        assert frames_a and frames_a.keys() == frames_b.keys()
        for key in frames_a:
            assert np.array_equal(np.asarray(frames_a[key]), np.asarray(frames_b[key])), key
    assert main(["render", str(path), "--backend", "service"]) == 2  # no --url: a clear usage error


def test_async_vector_stepping_on_every_placement(placement_case):
    """``step_async``/``step_wait`` and ``send``/``recv`` on local, Ray and the service, every family."""
    from gymnasium.vector.utils import batch_space

    from unirender.gym import UnityVectorEnv

    env = UnityVectorEnv(2, placement_case.controller_kwargs, backend=placement_case.backend(), batch_size=1,
                         autoreset_mode="SAME_STEP")
    try:
        env.reset(seed=0)
        env.step_async(env.action_space.sample())
        with pytest.raises(ValueError, match="asynchronously"):
            env.step(env.action_space.sample())
        obs, rewards, *_ = env.step_wait()
        assert env.observation_space.contains(obs) and rewards.shape == (2,)
        env.send(env.action_space.sample())
        first = env.recv()
        second = env.recv()
        ids = first[4]["env_id"].tolist() + second[4]["env_id"].tolist()
        assert sorted(ids) == [0, 1] and first[1].shape == (1,)
        one = batch_space(env.single_action_space, 1).sample()
        env.send(one, env_ids=[0])
        with pytest.raises(ValueError, match="still stepping"):
            env.send(one, env_ids=[0])
    finally:
        while env._in_flight:
            env.recv()
        env.close()


def test_the_services_refusals_arrive_as_the_local_exception_types(ai2thor_service, tmp_path):
    from unirender.cluster import CapacityError, create_backend

    url = ai2thor_service.service(tmp_path, limits={"sessions_per_token": 1})
    backend = create_backend("service", url=url)
    try:
        kwargs = ai2thor_service.controller_kwargs
        with pytest.raises(ValueError, match="player_hub"):  # what no session body can say
            backend.create_session({**kwargs, "player_hub": object()})
        session = backend.create_session(kwargs)
        with pytest.raises(CapacityError):  # the token's quota: 429 too_many_sessions
            backend.create_session(kwargs)
        session.remote.stop()  # the service ends the session behind the backend's back
        with pytest.raises(SessionLostError):
            session.step("Pass")
        assert session.restart().frame.shape == (40, 48, 3)
    finally:
        backend.close()
    unreachable = create_backend("service", url="http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(SessionLostError, match="cannot be reached"):
        unreachable.create_session(ai2thor_service.controller_kwargs)
