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
    log = open(tmp_path / "render.log", "wb")  # noqa: SIM115 - closed below
    job = subprocess.Popen([*cli, "render", str(tmp_path / "remote.yaml"), "--backend", "service", "--url",
                            first.url], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    second = None
    try:
        deadline = time.monotonic() + 120
        while len(list(remote.glob("frames/*/*/*.png"))) < 3:  # when to stop it, not what the test relies on
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "render.log").read_text()
            time.sleep(0.05)
        os.kill(first.process.pid, signal.SIGSTOP)  # the job's next step waits on a frozen service...
        assert not (remote / "manifest.json").exists()
        os.kill(first.process.pid, signal.SIGKILL)  # ...and is cut when it dies
        assert first.wait_exit(60) == -9
        second = Service(tmp_path, {"port": int(port)})
        assert job.wait(300) == 0, (tmp_path / "render.log").read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        log.close()
        for service in (first, second):
            if service is not None:
                service.stop()
    text = (tmp_path / "render.log").read_text()
    assert "is away" in text and "is back" in text, text[-3000:]
    assert frames_only(dataset_bytes(remote)) == frames_only(dataset_bytes(local))
    assert_no_players_left(tmp_path / "data")
