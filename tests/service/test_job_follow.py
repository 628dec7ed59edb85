"""A client following a job rides through a service restart (issue 35): ``RemoteJob.wait`` reconnects after a
SIGKILL and follows the same job, which the durable queue took up; a service that never comes back is one clear
error after ``reconnect_timeout``. Real ``unirender serve`` processes, a real SIGKILL (the service's own test
hook lands it at a chosen frame)."""

from __future__ import annotations

import threading

import pytest
import requests
from durable_helpers import Service, assert_no_players_left

from fixtures.log_events import log_event
from unirender.client import Client, ServiceUnreachableError
from unirender.service.jobs import TEST_KILL_ENV

SPEC = {
    "name": "follow",
    "environment": {"width": 32, "height": 24, "platform": "EGL"},
    "render": {"modalities": ["rgb"]},
    "episodes": [{"scene": "FloorPlan1_physics", "generator": {"kind": "random", "count": 11, "seed": 3}}],
    "output": {"directory": "ds", "frames_per_shard": 4},
    "workers": 1,
}


@pytest.fixture
def outages():
    """``outages.seen`` is set when the service going away was noticed (its log line): act only then."""
    with log_event("unirender.client", "is away") as event:
        yield event


def test_wait_follows_the_same_job_across_a_sigkill_and_restart(tmp_path, outages):
    first = Service(tmp_path, env={TEST_KILL_ENV: "frame:5"})
    port = int(first.url.rsplit(":", 1)[1])
    second = None
    outcome: dict = {}
    try:
        with Client(first.url) as client:
            job = client.submit_job(SPEC)

            def follow():
                try:
                    outcome["status"] = job.wait(timeout=240, poll=0.1, reconnect_timeout=120)
                except BaseException as exc:  # reported to the test thread
                    outcome["error"] = exc

            follower = threading.Thread(target=follow)
            follower.start()
            assert first.wait_exit(120) == -9, first.log()[-2000:]  # it killed itself at frame 5
            assert outages.seen.wait(60), "the client never noticed the outage"
            second = Service(tmp_path, {"port": port})  # the same data root and port: a redeploy
            follower.join(240)
            assert not follower.is_alive()
        assert "error" not in outcome, outcome
        status = outcome["status"]
        assert status["id"] == job.id and status["state"] == "succeeded", status
        assert status["progress"]["frames_done"] == 11
        assert job.reconnects == 1
        assert "taking up 1 job(s)" in second.log()
        assert "unirender_jobs_taken_up_total 1.0" in requests.get(second.url + "/metrics", timeout=10).text
    finally:
        for service in (first, second):
            if service is not None:
                service.stop()
    assert_no_players_left(tmp_path / "data")


def test_a_service_that_never_comes_back_is_one_clear_error(tmp_path):
    service = Service(tmp_path, env={TEST_KILL_ENV: "frame:2"})
    try:
        with Client(service.url) as client:
            job = client.submit_job(SPEC)
            assert service.wait_exit(120) == -9
            with pytest.raises(ServiceUnreachableError) as info:
                job.wait(timeout=60, poll=0.05, reconnect_timeout=1.0)
        message = str(info.value)
        assert service.url in message and "reconnect_timeout=1" in message and job.id in message
    finally:
        service.stop()
