"""A trainer outlives its render host (issue 35): a service backend's sessions ride through the service being
SIGKILLed and started again on the same port and data root (a redeploy): the affected envs' episodes end
truncated (``info["restart_cause"] == "service_restart"``), their sessions are recreated, and stepping goes on;
a service that never comes back is one clear error after ``reconnect_timeout``. Real ``unirender serve``
processes, real SIGKILLs; a SIGSTOP before the kill puts a request in flight deterministically."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
import requests
from durable_helpers import Service, assert_no_players_left

from fixtures.log_events import log_event
from unirender.cluster import SessionLostError, create_backend

AI2THOR = {"executable": "builtin", "width": 48, "height": 40, "platform": "EGL", "server": "fifo"}
MLAGENTS = {"protocol": "mlagents", "executable": "builtin", "width": 48, "height": 40, "platform": "EGL",
            "time_scale": 100}  # fmt: skip


@pytest.fixture
def outages():
    """``outages.seen`` is set when the service going away was noticed (its log line): act only then."""
    with log_event("unirender.cluster.service_backend", "is away") as event:
        yield event


class Host:
    """A render host that can be killed and redeployed: ``unirender serve`` on one data root and one port."""

    def __init__(self, root):
        self.root = root
        self.services = [Service(root)]
        self.url = self.services[0].url
        self.port = int(self.url.rsplit(":", 1)[1])

    @property
    def current(self) -> Service:
        return self.services[-1]

    def kill(self, *, in_flight: bool = False) -> None:
        """SIGKILL the service; ``in_flight``: SIGSTOP it first, so that requests sent meanwhile are cut mid-way."""
        os.kill(self.current.process.pid, signal.SIGKILL)
        assert self.current.wait_exit(60) == -9

    def redeploy(self) -> None:
        self.services.append(Service(self.root, {"port": self.port}))

    def stop(self) -> None:
        for service in self.services:
            service.stop()
        assert_no_players_left(self.root / "data")


@pytest.fixture
def host(tmp_path):
    h = Host(tmp_path)
    yield h
    h.stop()


def step_across_a_redeploy(host, outages, step):
    """``step()`` in a thread while the service is killed; the service is redeployed once the backend noticed."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = step()
        except BaseException as exc:  # reported to the test thread
            outcome["error"] = exc

    host.kill()
    worker = threading.Thread(target=run)
    worker.start()
    assert outages.seen.wait(60), "the backend never noticed the outage"
    host.redeploy()
    worker.join(180)
    assert not worker.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.parametrize("kwargs", [AI2THOR, MLAGENTS], ids=["ai2thor", "mlagents"])
def test_a_vector_env_rides_through_a_service_redeploy(host, outages, kwargs):
    from unirender.gym import UnityVectorEnv

    backend = create_backend("service", url=host.url, reconnect_timeout=120)
    env = UnityVectorEnv(2, kwargs, backend=backend)
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
        obs, _, terminated, truncated, infos = step_across_a_redeploy(
            host, outages, lambda: env.step(env.action_space.sample()))
        assert truncated.tolist() == [True, True] and not terminated.any()
        assert infos["restart_cause"].tolist() == ["service_restart"] * 2
        assert env.observation_space.contains(obs)
        env.step(env.action_space.sample())  # the autoreset step, on the recreated sessions
        env.step(env.action_space.sample())
    finally:
        env.close()
    faults = backend.faults()
    assert faults.get("reconnects") == 1 and faults.get("recreated") == 2, faults
    metrics = requests.get(host.url + "/metrics", timeout=10).text  # the service's side of the same outage
    assert "unirender_sessions_lost_in_restart_total 2.0" in metrics
    backend.close()


def test_recv_rides_through_a_request_cut_in_flight(host, outages):
    """``send`` puts the batch on the wire of a frozen service; the service dies with it; ``recv`` returns the
    envs truncated on recreated sessions once the service is back."""
    from unirender.gym import UnityVectorEnv

    backend = create_backend("service", url=host.url, reconnect_timeout=120)
    env = UnityVectorEnv(2, AI2THOR, backend=backend, batch_size=2)
    try:
        env.reset(seed=1)
        pid = host.current.process.pid
        os.kill(pid, signal.SIGSTOP)  # the next request is sent but never answered...
        env.send(np.array([1, 1]))
        os.kill(pid, signal.SIGKILL)  # ...and cut when the service dies
        assert host.current.wait_exit(60) == -9
        assert outages.seen.wait(60)
        host.redeploy()
        _, _, terminated, truncated, infos = env.recv()
        assert truncated.all() and not terminated.any() and set(infos["restart_cause"]) == {"service_restart"}
        env.send(np.array([0, 0]))
        assert env.recv()[1].shape == (2,)
    finally:
        env.close()
        backend.close()


def test_a_service_that_never_comes_back_is_one_clear_error(host):
    backend = create_backend("service", url=host.url, reconnect_timeout=1.5)
    session = backend.create_session(dict(AI2THOR))
    session.step("RotateRight")
    threads = set(threading.enumerate())
    host.kill()
    with pytest.raises(SessionLostError) as info:
        session.step("RotateRight")
    message = str(info.value)
    assert host.url in message and "stayed unreachable" in message and "reconnect_timeout=1.5" in message
    assert backend.faults().get("gave_up") == 1
    assert set(threading.enumerate()) <= threads  # nothing left waiting behind the error
    backend.close()


def test_reconnect_timeout_zero_keeps_the_old_behaviour(host):
    backend = create_backend("service", url=host.url, reconnect_timeout=0)
    session = backend.create_session(dict(AI2THOR))
    host.kill()
    with pytest.raises(SessionLostError, match="cannot be reached"):
        session.step("RotateRight")
    backend.close()
    with pytest.raises(ValueError, match="reconnect_timeout must be >= 0"):
        create_backend("service", url=host.url, reconnect_timeout=-1)
