"""``unirender render --backend service`` rides through a render host being redeployed (issue 35): the service is
frozen (SIGSTOP: the job cannot step on) mid-job, SIGKILLed with the job's step in flight, and started again on
the same port and data root; the job goes on on a recreated session and its dataset is the one a local run
writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import yaml
from durable_helpers import Service, assert_no_players_left, dataset_bytes
from service_processes import unread_request_bytes

from fixtures.held_job import release, start_held

FRAMES = 150
SPEC = {
    "name": "across",
    "environment": {"width": 32, "height": 24, "platform": "EGL"},
    "render": {"modalities": ["rgb"]},
    "episodes": [{"scene": "FloorPlan201_physics", "generator": {"kind": "random", "count": FRAMES, "seed": 4}}],
    "output": {"frames_per_shard": 10},
    "workers": 1,
}


def frames_only(files: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if k != "manifest.json"}


def test_render_with_the_service_backend_survives_a_redeploy(tmp_path):
    local = tmp_path / "local"
    (tmp_path / "local.yaml").write_text(yaml.safe_dump({**SPEC, "output": {**SPEC["output"],
                                                                           "directory": str(local)}}))
    cli = [sys.executable, "-m", "unirender.cli"]
    subprocess.run([*cli, "render", str(tmp_path / "local.yaml")], check=True, capture_output=True, timeout=300)

    first = Service(tmp_path)
    port = first.url.rsplit(":", 1)[1]
    remote = tmp_path / "remote"
    (tmp_path / "remote.yaml").write_text(yaml.safe_dump({**SPEC, "output": {**SPEC["output"],
                                                                             "directory": str(remote)}}))
    ready = tmp_path / "held"
    # The job holds between its 3rd and 4th frames (no step in flight) until released (when to stop the service,
    # not what the test relies on): it cannot finish first, whatever the load, and its next step is sent to the
    # frozen service.
    job = second = None
    try:
        job = start_held("pause", 3, ready, ["render", str(tmp_path / "remote.yaml"), "--backend", "service",
                                             "--url", first.url], log=tmp_path / "render.log")
        os.kill(first.process.pid, signal.SIGSTOP)  # the job's next step waits on a frozen service...
        assert not (remote / "manifest.json").exists()
        release(ready)
        deadline = time.monotonic() + 120
        while not unread_request_bytes(int(port)):  # the job's step has reached the frozen service
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "render.log").read_text()
            time.sleep(0.01)
        os.kill(first.process.pid, signal.SIGKILL)  # ...and is cut when it dies
        assert first.wait_exit(60) == -9
        second = Service(tmp_path, {"port": int(port)})
        assert job.wait(300) == 0, (tmp_path / "render.log").read_text()[-3000:]
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        for service in (first, second):
            if service is not None:
                service.stop()
    text = (tmp_path / "render.log").read_text()
    assert "is away" in text and "is back" in text, text[-3000:]
    assert frames_only(dataset_bytes(remote)) == frames_only(dataset_bytes(local))
    assert_no_players_left(tmp_path / "data")
