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

``--service-restarts MINUTES`` (issue 35) also SIGKILLs the service every MINUTES (drawn within +-25 %) and starts
it again on the same port and data root, a redeploy, while besides the four checked sessions (a) a dataset job
runs on the service, again and again, each followed by ``RemoteJob.wait`` across the restarts and compared byte for
byte with an uninterrupted run's dataset, and (b) a 4-env ``UnityVectorEnv`` steps over the ``service`` backend
and must never raise, its truncations matching the outages (4 per restart, ``restart_cause == "service_restart"``).
Then the pass also needs: 0 jobs lost, every dataset identical, the vector env's truncations = 4 x restarts, no
player of any service incarnation left running, and each incarnation's RSS within 10 % of the first one's.
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
from unirender.cluster import create_backend
from unirender.controller import Controller
from unirender.protocol.multipart import build_wwwform
from unirender.spec import EnvironmentSpec, RenderSpec

# The service tests' process-tree helpers: the same checks for orphans as the suite makes. tests/ too: those
# helpers import the suite's shared `fixtures` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
from durable_helpers import MARK_ENV, dataset_bytes, players_of  # noqa: E402
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


JOB = {
    "name": "soak",
    "environment": {"width": 32, "height": 24, "platform": "EGL"},
    "render": {"modalities": ["rgb", "depth"]},
    "episodes": [{"scene": "FloorPlan201_physics", "generator": {"kind": "random", "count": 40, "seed": 7}}],
    "output": {"frames_per_shard": 8},
    "workers": 1,
}


def start_service(tmp: Path, port: int = 0, n: int = 0) -> tuple[ManagedProcess, str]:
    """``unirender serve`` on ``tmp/data`` (``port`` 0: a free one); its players carry a marker in their
    environment, so that any of them left running after the service died is found (``players_of``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / f"service-{n}.yaml"
    config.write_text(json.dumps({
        "port": port, "data_root": str(tmp / "data"), "tokens": {"soak": TOKEN},
        "limits": {"sessions_per_token": 16, "total_players": 12, "steps_per_second": 100000, "jobs_per_token": 4},
    }))
    env = {k: v for k, v in os.environ.items() if k not in ("UNIRENDER_TOKENS", "UNIRENDER_CONFIG")}
    env[MARK_ENV] = str(tmp / "data")
    log = tmp / f"serve-{n}.log"
    proc = ManagedProcess([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)], env=env,
                          log_path=log, name="unirender-serve")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://\S+)", log.read_text())
        if match:
            return proc, match.group(1)
        if not proc.alive():
            break
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("service did not start:\n" + log.read_text())


class RenderHost:
    """The service, redeployed: SIGKILLed and started again on the same port and data root."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.process, self.url = start_service(tmp)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.restarts = 0
        self.rss: list[list[float]] = [[]]  # per incarnation

    @property
    def pid(self) -> int:
        return self.process.pid

    def sample_rss(self) -> float:
        value = rss_mb(self.process.pid)
        self.rss[-1].append(value)
        return value

    def redeploy(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        self.restarts += 1
        self.process, _ = start_service(self.tmp, self.port, self.restarts)
        self.rss.append([])


class RssSampler(threading.Thread):
    """The service's RSS every 2 s, per incarnation (a short-lived incarnation still gets several samples)."""

    def __init__(self, host: RenderHost, stop: threading.Event):
        super().__init__(name="soak-rss", daemon=True)
        self.host, self.stop_event = host, stop

    def run(self) -> None:
        while not self.stop_event.wait(2.0):
            with contextlib.suppress(OSError, ProcessLookupError):  # between a kill and the next start
                self.host.sample_rss()


class Restarter(threading.Thread):
    def __init__(self, host: RenderHost, every_s: float, stop: threading.Event, seed: int):
        super().__init__(name="soak-restarts", daemon=True)
        self.host, self.every_s, self.stop_event = host, every_s, stop
        self.rng = random.Random(seed)
        self.failed: list[str] = []

    def run(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(0.75, 1.25) * self.every_s):
            try:
                self.host.redeploy()
            except Exception as exc:  # noqa: BLE001 - reported at the end
                self.failed.append(repr(exc))
                return


class JobLoop(threading.Thread):
    """Dataset jobs on the service, one after another, each followed across restarts and checked against the
    uninterrupted run's bytes."""

    def __init__(self, url: str, reference: dict[str, bytes], data: Path, stop: threading.Event):
        super().__init__(name="soak-jobs", daemon=True)
        self.url, self.reference, self.data, self.stop_event = url, reference, data, stop
        self.done = self.identical = 0
        self.problems: list[str] = []

    def run(self) -> None:
        with Client(self.url, TOKEN, timeout=120) as client:
            n = 0
            while not self.stop_event.is_set():
                n += 1
                spec = {**JOB, "output": {**JOB["output"], "directory": f"job-{n}"}}
                try:
                    job = client.submit_job(spec)
                except Exception as exc:  # noqa: BLE001 - the service is away: was the job recorded before it went?
                    if not client_outage(exc):
                        self.problems.append(f"submit {n}: {exc!r}")
                        continue
                    job = self._recorded(client, f"job-{n}")
                    if job is None:  # not recorded: submit it again (a job the service never saw)
                        n -= 1
                        continue
                try:
                    status = job.wait(timeout=1800, poll=0.5, reconnect_timeout=300)
                except Exception as exc:  # noqa: BLE001
                    self.problems.append(f"job {job.id}: {exc!r}")
                    continue
                if status["state"] != "succeeded":
                    self.problems.append(f"job {job.id}: {status['state']} {status.get('error')}")
                    continue
                self.done += 1
                mine = comparable(dataset_bytes(self.data / "soak" / f"job-{n}"))
                if mine == self.reference:
                    self.identical += 1
                else:
                    self.problems.append(f"job {job.id}: dataset differs from the uninterrupted run's: "
                                         f"{differences(mine, self.reference)}")

    def _recorded(self, client: Client, output: str):
        """The job writing ``output``, once the service answers again (a submission cut by a restart may have
        been recorded before the service died: submitting it again would start a second job on the same
        directory); None when the service has no such job."""
        from unirender.client import RemoteJob

        while not self.stop_event.is_set():
            try:
                jobs = client._json("GET", "/v1/jobs")["jobs"]
            except Exception as exc:  # noqa: BLE001
                if not client_outage(exc):
                    raise
                time.sleep(1.0)
                continue
            found = next((j for j in jobs if j.get("output") == output), None)
            return RemoteJob(client, found) if found else None
        return None


def comparable(files: dict[str, bytes]) -> dict[str, bytes]:
    """A dataset's bytes as two runs of the same job into different output directories must share them: the
    manifest without the spec's own copy (its ``output.directory`` and so its hash differ by design)."""
    out = dict(files)
    if "manifest.json" in out:
        doc = json.loads(out["manifest.json"])
        doc.pop("spec", None)
        doc.pop("spec_hash", None)
        out["manifest.json"] = json.dumps(doc, sort_keys=True).encode()
    return out


def differences(mine: dict[str, bytes], reference: dict[str, bytes]) -> str:
    """Which files differ (and, for the manifest, which of its keys)."""
    keys = sorted(set(mine) ^ set(reference))
    changed = sorted(k for k in set(mine) & set(reference) if mine[k] != reference[k])
    detail = ""
    if "manifest.json" in changed:
        a, b = json.loads(mine["manifest.json"]), json.loads(reference["manifest.json"])
        detail = f"; manifest keys differing: {sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))}"
        for k in sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))[:3]:
            detail += f"; {k}: {json.dumps(a.get(k))[:300]} vs {json.dumps(b.get(k))[:300]}"
    return f"only in one: {keys[:10]}, changed: {changed[:10]}{detail}"


def client_outage(exc: BaseException) -> bool:
    from unirender.client import is_outage

    return is_outage(exc)


class VectorLoop(threading.Thread):
    """A 4-env vector env over the service backend, stepping until told to stop; it must never raise."""

    def __init__(self, url: str, size: int, stop: threading.Event):
        super().__init__(name="soak-vector", daemon=True)
        self.url, self.size, self.stop_event = url, size, stop
        self.steps = 0
        self._last_step: int | None = None  # finish_after: stop once steps reaches it
        self._finished = threading.Event()
        self.truncations: Counter = Counter()
        self.error: str | None = None
        self.faults: dict = {}

    def run(self) -> None:
        from unirender.gym import UnityVectorEnv

        backend = create_backend("service", url=self.url, token=TOKEN, reconnect_timeout=300)
        try:
            env = UnityVectorEnv(4, {"executable": "builtin", "width": self.size, "height": self.size},
                                 backend=backend)  # fmt: skip
            try:
                env.reset(seed=0)
                while not self._done():
                    _, _, _, truncated, infos = env.step(env.action_space.sample())
                    self.steps += 1
                    causes = infos.get("restart_cause")
                    for i in np.flatnonzero(truncated):
                        if causes is not None and infos.get("_restart_cause", np.ones(4, bool))[i]:
                            self.truncations[str(causes[i])] += 1
            finally:
                env.close()
        except Exception as exc:  # noqa: BLE001 - the vector env must never raise: reported
            self.error = repr(exc)
        finally:
            self.faults = backend.faults()
            backend.close()
            self._finished.set()

    def _done(self) -> bool:
        if self._last_step is not None:  # finishing: the steps past the last restart, whatever stop says
            return self.steps >= self._last_step
        return self.stop_event.is_set()

    def finish_after(self, more: int) -> None:
        """Step ``more`` vector steps from now (past the last restart), then stop; wait for that (bounded)."""
        self._last_step = self.steps + more
        self._finished.wait(600)


def reference_dataset(tmp: Path) -> dict[str, bytes]:
    """The soak job's dataset from an uninterrupted service of its own."""
    proc, url = start_service(tmp)
    try:
        with Client(url, TOKEN, timeout=120) as client:
            job = client.submit_job({**JOB, "output": {**JOB["output"], "directory": "reference"}})
            status = job.wait(timeout=600)
            if status["state"] != "succeeded":
                raise RuntimeError(f"the reference job {status['state']}: {status}")
        return comparable(dataset_bytes(tmp / "data" / "soak" / "reference"))
    finally:
        proc.terminate(grace=30.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=96, help="width and height of every session")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--service-restarts", type=float, default=0.0, metavar="MINUTES",
                        help="SIGKILL and redeploy the service about every MINUTES; a job loop and a 4-env vector "
                             "env over the service backend run too (issue 35)")  # fmt: skip
    args = parser.parse_args()
    stats, stop = Stats(), threading.Event()
    restarts = args.service_restarts > 0
    with tempfile.TemporaryDirectory(prefix="unirender-soak-") as tmp:
        reference = reference_dataset(Path(tmp) / "reference") if restarts else {}
        host = RenderHost(Path(tmp) / "host")
        url = host.url
        drivers: list[SessionDriver] = []
        extra: list[threading.Thread] = []
        left: set[int] = set()
        try:
            for i, (transport, scene) in enumerate(SESSIONS):
                drivers.append(SessionDriver(url, transport, scene, args.size, stats, stop, args.seed + i))
            injector = FaultInjector(url, drivers, stats, stop, args.seed)
            restarts_stop = threading.Event()  # restarts end first: the loops then see the last one through
            if restarts:
                restarter = Restarter(host, args.service_restarts * 60, restarts_stop, args.seed)
                jobs = JobLoop(url, reference, host.tmp / "data", stop)
                vector = VectorLoop(url, args.size, stop)
                extra = [restarter, jobs, vector, RssSampler(host, stop)]
            for thread in [*drivers, injector, *extra]:
                thread.start()
            started = time.monotonic()
            end = started + args.minutes * 60
            print(f"soak: {len(drivers)} sessions ({', '.join(t + ' ' + s for t, s in SESSIONS)}) at "
                  f"{args.size}x{args.size}, {args.minutes:g} min, service {url}"
                  + (f", restarted about every {args.service_restarts:g} min, a job loop and a 4-env vector env"
                     if restarts else ""), flush=True)  # fmt: skip
            print("| t (s) | steps | errors by code | p50 ms | p99 ms | mix-ups | RSS MB | faults so far |"
                  + (" restarts | jobs done | vector steps |" if restarts else ""))
            print("|---|---|---|---|---|---|---|---|" + ("---|---|---|" if restarts else ""))
            while time.monotonic() < end:
                time.sleep(min(REPORT_S, max(0.0, end - time.monotonic())))
                elapsed = time.monotonic() - started
                with stats.lock:
                    lat = list(stats.latencies)
                    errors = dict(stats.errors)
                    steps, mixups, faults = stats.steps, stats.mixups, dict(stats.faults)
                rss_now = float("nan")
                with contextlib.suppress(OSError):  # a service being redeployed has no /proc entry for a moment
                    rss_now = rss_mb(host.pid) if restarts else host.sample_rss()
                row = (f"| {elapsed:.0f} | {steps} | {errors or '-'} | {percentile(lat, 0.5) * 1000:.1f} | "
                       f"{percentile(lat, 0.99) * 1000:.1f} | {mixups} | {rss_now:.0f} | {sum(faults.values())} |")
                if restarts:
                    row += f" {host.restarts} | {jobs.done} | {vector.steps} |"
                print(row, flush=True)
            restarts_stop.set()
            if restarts:  # the last redeploy done, the vector env steps on until it has stepped past it
                restarter.join(300)
                vector.finish_after(3)
            stop.set()
            for thread in [*drivers, injector, *extra]:
                thread.join(600)
            deadline = time.monotonic() + 30  # sessions deleted: their players are being stopped
            while (left := set(descendants(host.pid))) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            restarts_stop.set()
            stop.set()
            for driver in drivers:
                if not driver.is_alive():  # never started (an error while setting up): its own cleanup
                    with contextlib.suppress(Exception):
                        driver.local.stop()
            service_pid = host.pid
            host.process.terminate(grace=30.0)
        deadline = time.monotonic() + 15
        while players_of(host.tmp / "data") and time.monotonic() < deadline:
            time.sleep(0.5)
        orphans = sorted({p for p in stats.player_pids if alive(p)} | set(players_of(host.tmp / "data")))
        rss = [v for v in host.rss[0]]
        one_minute = rss[1] if len(rss) > 1 else (rss[0] if rss else float("nan"))
        final = host.rss[-1][-1] if host.rss[-1] else (rss[-1] if rss else float("nan"))
        if restarts:  # each incarnation's median RSS (sampled every 2 s) against the first one's: 10 % + 10 MB
            medians = [statistics.median(r) for r in host.rss if r]
            flat = bool(medians) and all(m <= 1.10 * medians[0] + 10 for m in medians)
        else:
            flat = abs(final - one_minute) <= 0.10 * one_minute
        lat = stats.latencies
        print(f"\nsteps {stats.steps}, errors {dict(stats.errors)}, p50 {percentile(lat, 0.5) * 1000:.1f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, mean {statistics.fmean(lat) * 1000 if lat else 0:.1f} ms")
        print(f"faults injected: {dict(stats.faults)}")
        print(f"frames mixed up: {stats.mixups} (must be 0)")
        if restarts:
            shown = [f"{statistics.median(r):.0f}" for r in host.rss if r]
            print(f"RSS: median per service incarnation {', '.join(shown)} MB (each within 10 % + 10 MB of the "
                  f"first: {'flat' if flat else 'NOT flat'})")
        else:
            print(f"RSS: {one_minute:.0f} MB at 1 min, {final:.0f} MB at the end ({'flat' if flat else 'NOT flat'})")
        print(f"players left after their sessions ended: {sorted(left)}; orphans after the service stopped "
              f"(pid {service_pid}): {orphans} (must be none)")
        ok = stats.mixups == 0 and flat and not orphans and not left and stats.steps > 0
        if restarts:
            expected = 4 * host.restarts  # each restart loses each of the 4 sessions once
            got = vector.truncations.get("service_restart", 0)
            recreated = vector.faults.get("recreated", 0)
            absorbed = recreated - vector.faults.get("truncated:service_restart", 0)
            print(f"service restarts: {host.restarts} {restarter.failed or ''}")
            print(f"jobs: {jobs.done} done, {jobs.identical} byte-identical to the uninterrupted run, problems: "
                  f"{jobs.problems or 'none'} (must be none)")
            print(f"vector env: {vector.steps} steps, raised: {vector.error or 'never'}; sessions recreated "
                  f"{recreated} (must be 4 x restarts = {expected}): {got} as truncated steps (by cause "
                  f"{dict(vector.truncations)}), {absorbed} inside an autoreset's reset; backend faults "
                  f"{vector.faults}")
            ok = ok and host.restarts > 0 and not restarter.failed and not jobs.problems and jobs.done > 0 \
                and vector.error is None and recreated == expected and got + absorbed == expected
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
