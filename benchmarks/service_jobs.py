"""Durable job records: listing and start-up with 10,000 finished jobs in the service's database.

    .venv/bin/python benchmarks/service_jobs.py [--jobs 10000] [--requests 200] [--out benchmarks/results-service-jobs.md]

A data root is filled with ``--jobs`` finished job records (a realistic small spec each, written through the
service's own store), then a real ``unirender serve`` is started on it and, side by side with one on an empty
data root (same run, requests interleaved):

1. start-up: spawn to the ready line (the records are all loaded, the queue taken up, before that line);
2. ``GET /v1/jobs`` (the first page, 100 jobs, newest first) and ``?limit=1000``: p50/p95/max over keep-alive
   requests; target: < 50 ms (p95) at 10,000 jobs;
3. walking all 10,000 with ``?limit=1000&before=<cursor>`` pages, and ``GET /v1/jobs/{id}``;
4. in-process, why pages: describing and encoding all 10,000 jobs as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

SPEC = {
    "name": "bench",
    "environment": {"width": 300, "height": 300},
    "render": {"modalities": ["rgb", "depth"]},
    "episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead", "RotateRight", "LookDown"] * 10}],
    "output": {"directory": "runs/0", "format": "npz"},
}


def fill(data_root: Path, n: int) -> float:
    from unirender.service.store import DATABASE, ServiceStore
    from unirender.spec import load_spec

    data_root.mkdir(parents=True, exist_ok=True)
    spec_doc = load_spec(SPEC).model_dump(mode="json")
    store = ServiceStore(data_root / DATABASE)
    started = time.perf_counter()
    now = time.time()
    store._db.execute("BEGIN")
    for i in range(n):
        doc = {**spec_doc, "output": {**spec_doc["output"], "directory": f"runs/{i}"}}
        state = ("succeeded", "failed", "cancelled")[i % 7 % 3]
        store.insert_job({
            "id": f"j{i:012x}", "seq": i + 1, "owner": "anonymous", "name": "bench", "kind": "ai2thor", "spec": doc,
            "output": f"runs/{i}", "workers": 1, "state": state,
            "progress": {"frames_done": 31, "frames_total": 31, "episodes_done": 1, "episodes_total": 1},
            "errors": [] if state == "succeeded" else ["stopped"], "cancel_requested": 0,
            "created_at": now - n + i, "started_at": now - n + i + 0.1, "finished_at": now - n + i + 0.9,
            "updated_at": now - n + i + 0.9, "manifest": str(data_root / "anonymous" / f"runs/{i}" / "manifest.json"),
        })
    store._db.execute("COMMIT")
    store.close()
    return time.perf_counter() - started


def start(tmp: Path) -> tuple[subprocess.Popen, str, float]:
    config = tmp / "service.yaml"
    config.write_text(json.dumps({"port": 0, "data_root": str(tmp / "data")}))
    log_path = tmp / "serve.log"
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "unirender.cli", "serve", "--config", str(config)],
                                stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        match = re.search(r"serving on (http://\S+)", log_path.read_text())
        if match:
            return proc, match.group(1).rstrip(" (;"), time.perf_counter() - t0
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    proc.kill()
    raise RuntimeError(log_path.read_text())


def timed(http: requests.Session, url: str) -> tuple[float, requests.Response]:
    t0 = time.perf_counter()
    resp = http.get(url, timeout=30)
    body = resp.content
    elapsed = time.perf_counter() - t0
    assert resp.status_code == 200, body[:300]
    return elapsed, resp


def stats(values: list[float]) -> str:
    values = sorted(values)
    p50 = statistics.median(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return f"p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {values[-1] * 1000:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [f"# Durable job records ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{platform.machine()}, Python {platform.python_version()})", ""]

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory(prefix="unirender-bench-jobs-") as tmp_name:
        tmp = Path(tmp_name)
        full, empty = tmp / "full", tmp / "empty"
        empty.mkdir()
        say(f"- filled a data root with {args.jobs:,} finished jobs in {fill(full / 'data', args.jobs):.2f} s "
            f"({(full / 'data' / 'service.sqlite3').stat().st_size / 2**20:.1f} MiB database)")
        services = {}
        try:
            for name, root in (("empty", empty), (f"{args.jobs:,} jobs", full)):
                proc, url, startup = start(root)
                services[name] = (proc, url)
                say(f"- start-up to the ready line, {name}: {startup:.2f} s")
            http = requests.Session()
            timings: dict[tuple[str, str], list[float]] = {}
            paths = ["/v1/jobs", "/v1/jobs?limit=1000"]
            for _ in range(args.requests):  # interleaved: both services, both pages, in turn
                for name, (_, url) in services.items():
                    for path in paths:
                        elapsed, _resp = timed(http, url + path)
                        timings.setdefault((name, path), []).append(elapsed)
            say("")
            say("| service | request | latency | bytes |")
            say("|---|---|---|---|")
            for (name, path), values in timings.items():
                size = len(http.get(services[name][1] + path, timeout=30).content)
                say(f"| {name} | `GET {path}` | {stats(values)} | {size:,} |")
            _, url = services[f"{args.jobs:,} jobs"]
            first = http.get(url + "/v1/jobs", timeout=30).json()
            walk_t0, seen, cursor = time.perf_counter(), 0, None
            while True:
                page = http.get(url + "/v1/jobs?limit=1000" + (f"&before={cursor}" if cursor else ""),
                                timeout=30).json()
                seen += len(page["jobs"])
                cursor = page["next"]
                if cursor is None:
                    break
            walk = time.perf_counter() - walk_t0
            assert seen == args.jobs, seen
            one = [timed(http, f"{url}/v1/jobs/{first['jobs'][i % 100]['id']}")[0] for i in range(args.requests)]
            say("")
            say(f"- walking all {seen:,} jobs in pages of 1,000: {walk * 1000:.0f} ms ({seen // 1000} requests)")
            say(f"- `GET /v1/jobs/{{id}}`: {stats(one)}")
        finally:
            for proc, _ in services.values():
                proc.terminate()
                proc.wait(60)

        # in-process: one document of every job (what a listing without pages would send)
        from unirender.service.config import ServiceConfig
        from unirender.service.data_root import DataRoot
        from unirender.service.jobs import JobManager
        from unirender.service.limits import PlayerSlots
        from unirender.service.metrics import ServiceMetrics

        root = DataRoot.open(full / "data")
        try:
            manager = JobManager(slots=PlayerSlots(8), metrics=ServiceMetrics(), jobs_per_token=2,
                                 store=root.store, data_root=ServiceConfig(data_root=full / "data").data_root)
            t0 = time.perf_counter()
            manager.start()
            load = time.perf_counter() - t0
            jobs = manager.list("anonymous")
            t0 = time.perf_counter()
            body = json.dumps({"jobs": [j.describe() for j in jobs]})
            everything = time.perf_counter() - t0
            manager.close()
        finally:
            root.close()
        say(f"- in-process: loading {len(jobs):,} records at start {load * 1000:.0f} ms; describing and encoding "
            f"all of them as one document {everything * 1000:.0f} ms ({len(body) / 2**20:.1f} MiB): why the "
            "listing is paged (100 by default, at most 1,000)")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
