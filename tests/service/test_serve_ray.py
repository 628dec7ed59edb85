"""``unirender serve --backend ray`` as a real process (its own local Ray, on loopback, usage stats off): a
session and a job stepped through it over HTTP, then SIGTERM: exit 0, and no process of it left (Ray's included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from service_processes import alive, descendants

from unirender.client import Client

SERVING = "unirender serving on http://127.0.0.1:"


@pytest.fixture(scope="module")
def ray_service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-ray")
    config = tmp / "service.yaml"
    # A small local Ray of the service's own: loopback only, two CPUs, a 100 MB object store.
    config.write_text(yaml.safe_dump({"port": 0, "data_root": str(tmp / "data"), "backend_options": {
        "init_options": {"_node_ip_address": "127.0.0.1", "num_cpus": 2, "object_store_memory": 100 * 2**20}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("UNIRENDER_TOKENS", "UNIRENDER_CONFIG", "RAY_ADDRESS")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    log = tmp / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "unirender.cli", "serve", "--backend", "ray", "--config",
                                 str(config)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                start_new_session=True)
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while SERVING not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, f"serve did not come up:\n{log.read_text()}"
            time.sleep(0.1)
        port = log.read_text().split(SERVING, 1)[1].split()[0].rstrip("/")
        proc.log = log
        proc.url = f"http://127.0.0.1:{port}"
        yield proc
        kids = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
        deadline = time.monotonic() + 30  # Ray's own processes stop as ray.shutdown() returns, or soon after
        while (left := [p for p in kids if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left behind by unirender serve --backend ray: {left}"
    finally:
        if proc.poll() is None:
            kids |= descendants(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        for pid in kids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def players_under_actors(service_pid: int) -> tuple[int, int]:
    """(reference players below the service, those whose parent is a Ray worker ``ray::...``)."""
    players = [p for p in descendants(service_pid) if "unirender.player" in cmdline(p) or
               "unirender-player" in cmdline(p)]
    under = 0
    for p in players:
        try:
            under += cmdline(parent(p)).startswith("ray::")
        except OSError:
            pass
    return len(players), under


def tcp_listeners(pids: set[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) of every TCP socket these processes listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    listening.append(cols[1].rsplit(":", 1)[0])
    return listening


def test_every_port_of_the_service_and_its_ray_is_on_loopback(ray_service):
    listening = tcp_listeners({ray_service.pid} | descendants(ray_service.pid))
    assert len(listening) >= 2  # the service's own port and at least Ray's GCS
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::1, ::ffff:127.0.0.1
    assert set(listening) <= loopback, f"listening beyond loopback: {sorted(set(listening) - loopback)}"


def test_a_session_steps_on_a_ray_actor(ray_service):
    with Client(ray_service.url) as client, client.session(
        {"width": 64, "height": 64}, render={"modalities": ["rgb", "depth"]}, scene="FloorPlan1"
    ) as session:
        info = session.info()
        assert info["backend"] == "ray" and info["node_ip"] == "127.0.0.1"
        assert info["actor_pid"] not in (None, ray_service.pid) and info["actor_pid"] in descendants(ray_service.pid)
        first = session.step("RotateRight")
        second = session.step("RotateRight")
        assert first.frame.shape == (64, 64, 3) and first.depth_frame.shape == (64, 64)
        assert np.abs(first.frame.astype(int) - second.frame.astype(int)).mean() > 1.0  # it really turned
        assert session.info()["steps"] == 2


def test_a_job_runs_through_the_ray_service(ray_service):
    with Client(ray_service.url) as client:
        job = client.submit_job({
            "name": "ray-tour",
            "environment": {"width": 32, "height": 32},
            "render": {"modalities": ["rgb"]},
            "episodes": [{"scene": "FloorPlan1", "actions": ["RotateRight"] * 40}],
            "output": {"directory": "runs/ray-tour"},
            "workers": 1,
        })
        seen = (0, 0)
        while job.status()["state"] in ("queued", "running"):
            seen = max(seen, players_under_actors(ray_service.pid))
            time.sleep(0.05)
        status = job.wait(timeout=120)
        assert status["state"] == "succeeded", status
        assert job.manifest()["counts"]["frames"] == 41
        assert seen[0] == 1 and seen[1] == 1, f"players seen, and below a Ray actor: {seen}"
