"""Soak: sessions stepping through a ``unirender serve`` for a bounded time while a fault injector attacks it.

    PYTHONPATH=src .venv/bin/python benchmarks/soak.py [--minutes 10] [--size 96]

N=4 sessions (2 FIFO, 2 WSGI, each in a different scene), each stepped by its own thread and compared frame by
frame with a local Controller doing the same actions: a frame that differs is a *mix-up* (must be 0). Meanwhile
a fault injector, every few seconds, SIGKILLs or SIGSTOPs (then SIGCONTs) one session's player, opens idle and
slow (one header byte a second) connections, and sends rogue ``/train`` bodies (wrong tokens, forms sized to
poison a parser, part-name floods, truncated bodies). A session whose player was killed gets its error, is
recreated and goes on; errors are counted by code. Every 30 s it prints steps, errors by code, p50/p99 step
latency, mix-ups and the service's RSS; at the end the RSS must be flat (within 10 % of the 1-minute value) and
no player process may outlive its session or the service (orphans: 0). Exit status 1 if any check fails.
Everything on 127.0.0.1; bounded in time (``--minutes``) and in connections (at most ~150 at once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

from unirender._process import ManagedProcess
from unirender.client import Client
from unirender.controller import Controller
from unirender.protocol.multipart import build_wwwform
from unirender.spec import EnvironmentSpec, RenderSpec

# The service tests' process-tree helpers: the same checks for orphans as the suite makes.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
from service_processes import alive, descendants  # noqa: E402

TOKEN = "soak-token"
# The reference player has three scenes: the fourth session shares one, with its own random actions.
SESSIONS = [("fifo", "FloorPlan1"), ("fifo", "FloorPlan201"), ("wsgi", "FloorPlan301"), ("wsgi", "FloorPlan1")]
ACTIONS = ["RotateRight", "MoveAhead", "RotateLeft", "MoveBack", "LookDown", "LookUp"]
REPORT_S = 30.0
FAULT_EVERY_S = (4.0, 8.0)  # seconds between faults, drawn uniformly (seeded)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps = 0
        self.errors: Counter = Counter()
        self.latencies: list[float] = []
        self.mixups = 0
        self.faults: Counter = Counter()
        self.player_pids: set[int] = set()

    def step(self, seconds: float) -> None:
        with self.lock:
            self.steps += 1
            self.latencies.append(seconds)

    def error(self, code: str) -> None:
        with self.lock:
            self.errors[code] += 1


class SessionDriver(threading.Thread):
    """One remote session and its local twin, stepped with the same actions; recreated after a failure."""

    def __init__(self, url: str, transport: str, scene: str, size: int, stats: Stats, stop: threading.Event,
                 seed: int):
        super().__init__(name=f"soak-{transport}-{scene}", daemon=True)
        self.client = Client(url, TOKEN, timeout=120)
        self.transport, self.scene, self.size = transport, scene, size
        self.stats, self.stop_event = stats, stop
        self.rng = random.Random(seed)
        env = EnvironmentSpec(width=size, height=size)
        self.local = Controller(**env.controller_kwargs(RenderSpec(modalities=["rgb"])), scene=scene)
        self.session = None
        self.pid: int | None = None
        self.paused = threading.Event()  # set while the injector holds this player stopped

    def _open(self) -> None:
        self.session = self.client.session({"width": self.size, "height": self.size, "transport": self.transport},
                                           scene=self.scene)
        self.pid = self.session.info().get("pid")
        if self.pid:
            with self.stats.lock:
                self.stats.player_pids.add(self.pid)
        self.local.reset(self.scene)

    def _close(self) -> None:
        session, self.session, self.pid = self.session, None, None
        if session is not None:
            with contextlib.suppress(Exception):
                session.stop()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.session is None:
                    self._open()
                action = self.rng.choice(ACTIONS)
                started = time.perf_counter()
                remote = self.session.step(action)
                took = time.perf_counter() - started
                mine = self.local.step(action)
                if not np.array_equal(remote.frame, mine.frame) or \
                        remote.metadata["agent"]["position"] != mine.metadata["agent"]["position"]:
                    with self.stats.lock:
                        self.stats.mixups += 1
                    self._close()
                    continue
                self.stats.step(took)
            except Exception as exc:  # noqa: BLE001 - every failure is counted by code, then the session is redone
                self.stats.error(getattr(exc, "code", None) or type(exc).__name__)
                self._close()
                time.sleep(0.2)
        self._close()
        self.local.stop()
        self.client.close()


class FaultInjector(threading.Thread):
    def __init__(self, url: str, drivers: list[SessionDriver], stats: Stats, stop: threading.Event, seed: int):
        super().__init__(name="soak-faults", daemon=True)
        host, port = url.rsplit("//", 1)[1].split(":")
        self.address = (host, int(port))
        self.url, self.drivers, self.stats, self.stop_event = url, drivers, stats, stop
        self.rng = random.Random(seed)
        self.held: list[socket.socket] = []  # idle and slow connections, closed a while later

    def run(self) -> None:
        faults = [self.kill, self.pause, self.idle_connections, self.slow_connections, self.rogue_train]
        while not self.stop_event.wait(self.rng.uniform(*FAULT_EVERY_S)):
            fault = self.rng.choice(faults)
            try:
                fault()
                self.stats.faults[fault.__name__] += 1
            except OSError:
                self.stats.faults[fault.__name__ + "_failed"] += 1
            self._drip()
        for sock in self.held:
            sock.close()

    def _player(self) -> int | None:
        pids = [d.pid for d in self.drivers if d.pid]
        return self.rng.choice(pids) if pids else None

    def kill(self) -> None:
        pid = self._player()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pause(self) -> None:
        pid = self._player()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(self.rng.uniform(0.5, 3.0))
                os.kill(pid, signal.SIGCONT)

    def _connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=5)

    def idle_connections(self) -> None:
        self._trim()
        self.held.extend(self._connect() for _ in range(50))

    def slow_connections(self) -> None:
        self._trim()
        for _ in range(10):
            sock = self._connect()
            sock.sendall(b"POST /v1/sessions HTTP/1.1\r\n")
            self.held.append(sock)

    def _drip(self) -> None:
        """One header byte on each slow connection (the ones the service has not closed yet)."""
        for sock in list(self.held):
            try:
                sock.send(b"X")
            except OSError:
                self.held.remove(sock)
                sock.close()

    def _trim(self) -> None:
        while len(self.held) > 90:
            self.held.pop(0).close()

    def rogue_train(self) -> None:
        size = self.rng.choice([96 * 96 * 3, 96 * 96 * 3 + 130, 300 * 300 * 3, 1000])
        kind = self.rng.choice(["poison", "flood", "truncated"])
        if kind == "flood":
            fields = [(f"n{self.rng.random()}-{i}", b"\0") for i in range(5000)]
        else:
            fields = [("metadata", "{}"), ("image", os.urandom(size))]
        content_type, body = build_wwwform([*fields, ("token", f"rogue-{self.rng.random()}")])
        if kind == "truncated":
            body = body[: len(body) // 2]
        with self._connect() as sock:
            sock.sendall(f"POST /train HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            sock.settimeout(10)
            with contextlib.suppress(OSError):
                while sock.recv(65536):
                    pass


def start_service(tmp: Path) -> tuple[ManagedProcess, str]:
    config = tmp / "service.yaml"
    config.write_text(json.dumps({
        "port": 0, "data_root": str(tmp / "data"), "tokens": {"soak": TOKEN},
        "limits": {"sessions_per_token": 8, "total_players": 8, "steps_per_second": 100000},
    }))
    env = {k: v for k, v in os.environ.items() if k not in ("UNIRENDER_TOKENS", "UNIRENDER_CONFIG")}
    proc = ManagedProcess([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)], env=env,
                          log_path=tmp / "serve.log", name="unirender-serve")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://\S+)", (tmp / "serve.log").read_text())
        if match:
            return proc, match.group(1)
        if not proc.alive():
            break
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("service did not start:\n" + (tmp / "serve.log").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=96, help="width and height of every session")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stats, stop = Stats(), threading.Event()
    with tempfile.TemporaryDirectory(prefix="unirender-soak-") as tmp:
        service, url = start_service(Path(tmp))
        drivers: list[SessionDriver] = []
        try:
            for i, (transport, scene) in enumerate(SESSIONS):
                drivers.append(SessionDriver(url, transport, scene, args.size, stats, stop, args.seed + i))
            injector = FaultInjector(url, drivers, stats, stop, args.seed)
            for thread in [*drivers, injector]:
                thread.start()
            started = time.monotonic()
            end = started + args.minutes * 60
            rss: list[tuple[float, float]] = []
            print(f"soak: {len(drivers)} sessions ({', '.join(t + ' ' + s for t, s in SESSIONS)}) at "
                  f"{args.size}x{args.size}, {args.minutes:g} min, service {url}", flush=True)
            print("| t (s) | steps | errors by code | p50 ms | p99 ms | mix-ups | RSS MB | faults so far |")
            print("|---|---|---|---|---|---|---|---|")
            while time.monotonic() < end:
                time.sleep(min(REPORT_S, max(0.0, end - time.monotonic())))
                elapsed = time.monotonic() - started
                with stats.lock:
                    lat = list(stats.latencies)
                    errors = dict(stats.errors)
                    steps, mixups, faults = stats.steps, stats.mixups, dict(stats.faults)
                rss.append((elapsed, rss_mb(service.pid)))
                print(f"| {elapsed:.0f} | {steps} | {errors or '-'} | {percentile(lat, 0.5) * 1000:.1f} | "
                      f"{percentile(lat, 0.99) * 1000:.1f} | {mixups} | {rss[-1][1]:.0f} | "
                      f"{sum(faults.values())} |", flush=True)
            stop.set()
            for thread in [*drivers, injector]:
                thread.join(180)
            deadline = time.monotonic() + 30  # sessions deleted: their players are being stopped
            while (left := descendants(service.pid)) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            stop.set()
            for driver in drivers:
                if not driver.is_alive():  # never started (an error while setting up): its own cleanup
                    with contextlib.suppress(Exception):
                        driver.local.stop()
            service_pid = service.pid
            service.terminate(grace=30.0)
        orphans = sorted(p for p in stats.player_pids | left if alive(p))
        one_minute = next((v for t, v in rss if t >= 55), rss[0][1] if rss else float("nan"))
        final = rss[-1][1] if rss else float("nan")
        flat = abs(final - one_minute) <= 0.10 * one_minute
        lat = stats.latencies
        print(f"\nsteps {stats.steps}, errors {dict(stats.errors)}, p50 {percentile(lat, 0.5) * 1000:.1f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, mean {statistics.fmean(lat) * 1000 if lat else 0:.1f} ms")
        print(f"faults injected: {dict(stats.faults)}")
        print(f"frames mixed up: {stats.mixups} (must be 0)")
        print(f"RSS: {one_minute:.0f} MB at 1 min, {final:.0f} MB at the end ({'flat' if flat else 'NOT flat'})")
        print(f"players left after their sessions ended: {sorted(left)}; orphans after the service stopped "
              f"(pid {service_pid}): {orphans} (must be none)")
        return 0 if stats.mixups == 0 and flat and not orphans and not left and stats.steps else 1


if __name__ == "__main__":
    sys.exit(main())
