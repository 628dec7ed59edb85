"""The container image: size, build time from a warm base, `run` to /healthz, `run` to first frame, and a step
over the container's published port vs the same service outside a container (target: at most 1.1x).

    python benchmarks/container.py [--rounds 5] [--steps 200] [--no-build]

Uses podman and scripts/container-build.sh (the images it builds are the ones `./dev container-test` checks).
The step comparison interleaves the two services round by round, same client, same token, same 300x300 rgb
session on the reference player (EGL, llvmpipe), msgpack: only the container's network path and process
isolation differ. Traffic stays on 127.0.0.1 and a podman network of the benchmark's own.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from unirender.client import Client  # noqa: E402

CONTAINERS_CONF = """[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
LABEL = f"unirender.container-bench={os.getpid()}"
SUBNET_PREFIX = "10.89.8"
SIZE = 300


def podman(*args: str, check: bool = True, timeout: float = 600) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout).stdout


def build_images(no_cache: bool = False) -> tuple[str, float]:
    """(service image tag, seconds) through scripts/container-build.sh; no_cache: every layer on the warm base."""
    script = f"source {ROOT}/scripts/container-build.sh; ur_build_images; echo $UR_IMAGE"
    env = dict(os.environ)
    if no_cache:  # the base stays; the image's own layers are built again under a throwaway tag
        script = (f"source {ROOT}/scripts/container-build.sh; ur_podman_env; base=$(ur_base_tag); "
                  f"podman image exists $base || ur_build_images >/dev/null; "
                  f"podman build --no-cache --format docker --network host "
                  f"-v ${{PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}:/run/ca.crt:ro --build-arg PIP_CERT=/run/ca.crt "
                  f"--build-arg BASE=$base --target service -t localhost/unirender-bench:nocache "
                  f"-f {ROOT}/Containerfile {ROOT} >&2; echo localhost/unirender-bench:nocache")
    t0 = time.perf_counter()
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return out.stdout.split()[-1], time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def wait_healthy(url: str, limit: float = 60) -> float:
    t0 = time.perf_counter()
    while not healthy(url):
        if time.perf_counter() - t0 > limit:
            raise RuntimeError(f"{url}: no /healthz within {limit} s")
        time.sleep(0.02)
    return time.perf_counter() - t0


class Containers:
    """Runs service containers on the benchmark's own network; removes them, the network and volumes at exit."""

    def __init__(self, image: str, token: str):
        self.image, self.token, self.n = image, token, 0
        self.network = f"unirender-bench-{os.getpid()}"
        podman("network", "create", "--label", LABEL, "--subnet", f"{SUBNET_PREFIX}.0/24", self.network)

    def run(self) -> tuple[str, str, float]:
        """(name, url, the time podman run was called) for a fresh service container."""
        self.n += 1
        name, port = f"{self.network}-{self.n}", free_port()
        t0 = time.perf_counter()
        podman("run", "-d", "--name", name, "--label", LABEL, "--network", self.network, "-p",
               f"127.0.0.1:{port}:8200", "-e", f"UNIRENDER_TOKENS=bench={self.token}", self.image)
        return name, f"http://127.0.0.1:{port}", t0

    def remove(self, name: str) -> None:
        podman("rm", "-f", "-v", "-t", "0", name, check=False)

    def close(self) -> None:
        ids = podman("ps", "-aq", "--filter", f"label={LABEL}", check=False).split()
        if ids:
            podman("rm", "-f", "-v", "-t", "0", *ids, check=False)
        podman("network", "rm", "-f", self.network, check=False)


def first_frame(url: str, token: str) -> None:
    with Client(url, token=token).session({"width": SIZE, "height": SIZE}, scene="FloorPlan1") as env:
        env.step("RotateRight").frame  # noqa: B018 - the frame is what is timed


def step_times(session, steps: int) -> list[float]:
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        event = session.step("RotateRight" if i % 2 else "RotateLeft")
        event.frame  # noqa: B018
        times.append(time.perf_counter() - t0)
    return times


def host_service(tmp: Path, token: str) -> tuple[subprocess.Popen, str]:
    config = tmp / "service.yaml"
    port = free_port()
    config.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_root": str(tmp / "data")}))
    env = dict(os.environ, UNIRENDER_TOKENS=f"bench={token}", PYTHONPATH=str(ROOT / "src"))
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, f"http://127.0.0.1:{port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200, help="steps per service per round")
    parser.add_argument("--no-build", action="store_true", help="skip the --no-cache build from the warm base")
    args = parser.parse_args()
    if not shutil.which("podman"):
        print("podman is not installed (apt-get install podman runc debootstrap)")
        return 2
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    token = secrets.token_hex(16)
    report: dict = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="unirender-bench-")))
        conf = tmp / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        os.environ["CONTAINERS_CONF"] = str(conf)

        image, seconds = build_images()
        report["image"] = image
        report["cached build (nothing changed), s"] = round(seconds, 1)
        report["image size, MB"] = round(int(podman("image", "inspect", "-f", "{{.Size}}", image)) / 1e6)
        if not args.no_build:
            nocache, seconds = build_images(no_cache=True)
            report["build from the warm base (--no-cache), s"] = round(seconds, 1)
            podman("rmi", nocache, check=False)
            podman("image", "prune", "-f", check=False)  # its intermediate layers

        containers = Containers(image, token)
        stack.callback(containers.close)
        to_health, to_frame = [], []
        for _ in range(args.rounds):
            name, url, t0 = containers.run()
            wait_healthy(url)
            to_health.append(time.perf_counter() - t0)
            first_frame(url, token)
            to_frame.append(time.perf_counter() - t0)
            containers.remove(name)
        report["run to /healthz, s (median, min-max)"] = _spread(to_health)
        report["run to first frame 300x300, s (median, min-max)"] = _spread(to_frame)

        name, container_url, _ = containers.run()
        wait_healthy(container_url)
        proc, host_url = host_service(tmp, token)
        stack.callback(_stop, proc)
        wait_healthy(host_url)
        inside = stack.enter_context(Client(container_url, token=token).session(
            {"width": SIZE, "height": SIZE}, scene="FloorPlan1"))
        outside = stack.enter_context(Client(host_url, token=token).session(
            {"width": SIZE, "height": SIZE}, scene="FloorPlan1"))
        step_times(inside, 20), step_times(outside, 20)  # warm both
        rounds = []
        for r in range(args.rounds):
            pair = {}
            for label, session in ([("container", inside), ("host", outside)] if r % 2 == 0
                                   else [("host", outside), ("container", inside)]):
                pair[label] = statistics.median(step_times(session, args.steps)) * 1000
            rounds.append(pair)
            print(f"round {r}: container {pair['container']:.2f} ms, host {pair['host']:.2f} ms, "
                  f"ratio {pair['container'] / pair['host']:.3f}", flush=True)
        ratios = [p["container"] / p["host"] for p in rounds]
        report["step p50, container port, ms (per round)"] = [round(p["container"], 2) for p in rounds]
        report["step p50, host service, ms (per round)"] = [round(p["host"], 2) for p in rounds]
        report["ratio container/host (median, min-max)"] = _spread(ratios, 3)
        report["target <= 1.1x"] = "met" if statistics.median(ratios) <= 1.1 else "not met"
    print(json.dumps(report, indent=1))
    return 0


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
