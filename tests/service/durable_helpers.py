"""Real ``unirender serve`` processes on one data root, started, SIGKILLed and started again (the durable tests).

``UNIRENDER_TEST_KILL_AT`` (``unirender.service.jobs.TEST_KILL_ENV``) makes a service SIGKILL itself at a named
point of a job's life, so each kill lands in its window deterministically; the tests also SIGKILL from outside.
``UNIRENDER_TEST_HOLD_JOB`` (``TEST_HOLD_ENV``) holds a job mid-run until it is cancelled or the service stops, so a
cancel or a SIGTERM lands before the job can finish.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import requests
import yaml
from service_processes import alive

from fixtures.log_events import wait_for_line
from unirender._process import ManagedProcess

SERVING = re.compile(r"unirender serving on (http://127\.0\.0\.1:\d+)")
FINAL = ("succeeded", "failed", "cancelled")


class Service:
    """One ``unirender serve`` on ``root/data``; ``config`` is merged into the service YAML."""

    count = 0

    def __init__(self, root: Path, config: dict | None = None, *, env: dict | None = None, wait: bool = True):
        Service.count += 1
        self.root = root
        self.data_root = root / "data"
        self.config_path = root / f"service-{Service.count}.yaml"
        self.config_path.write_text(yaml.safe_dump({"port": 0, "data_root": str(self.data_root), **(config or {})}))
        self.log_path = root / f"serve-{Service.count}.log"
        base = {k: v for k, v in os.environ.items() if k not in ("UNIRENDER_TOKENS", "UNIRENDER_CONFIG",
                                                                 "UNIRENDER_TEST_KILL_AT",
                                                                 "UNIRENDER_TEST_HOLD_JOB")}
        self.process = ManagedProcess(
            [sys.executable, "-m", "unirender.cli", "serve", "--config", str(self.config_path)],
            env={**base, MARK_ENV: str(self.data_root), **(env or {})}, log_path=self.log_path,
            name="unirender-serve",
        )
        self.url = self._wait_for_url(90.0) if wait else None

    def _wait_for_url(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = SERVING.search(self.log())
            if match:
                return match.group(1)
            if not self.process.alive():
                raise RuntimeError(f"unirender serve exited early:\n{self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"unirender serve did not come up:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 120.0) -> None:
        """Until the service has logged ``text`` (an event the code gives: a held job, say)."""
        wait_for_line(self.log, self.process.alive, text, timeout)

    # -- HTTP -------------------------------------------------------------------------------------------
    def call(self, method: str, path: str, token: str | None = None, **kw) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kw)

    def jobs(self, token: str | None = None) -> list[dict]:
        resp = self.call("GET", "/v1/jobs", token)
        assert resp.status_code == 200, resp.text
        return resp.json()["jobs"]

    def wait_job(self, job_id: str, token: str | None = None, *, until=FINAL, timeout: float = 120.0,
                 frames: int = 0) -> dict:
        """Poll until the job's state is one of ``until`` (and at least ``frames`` frames are done)."""
        deadline = time.monotonic() + timeout
        doc = {}
        while time.monotonic() < deadline:
            resp = self.call("GET", f"/v1/jobs/{job_id}", token)
            assert resp.status_code == 200, resp.text
            doc = resp.json()
            if doc["state"] in until and (doc["progress"].get("frames_done") or 0) >= frames:
                return doc
            if doc["state"] in FINAL and doc["state"] not in until:
                raise AssertionError(f"job ended {doc['state']}: {doc}\n{self.log()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} not {until} after {timeout} s: {doc}\n{self.log()[-3000:]}")

    # -- the process ------------------------------------------------------------------------------------
    def wait_exit(self, timeout: float = 60.0) -> int | None:
        return self.process.wait(timeout)

    def sigkill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            if self.process.wait(60) is None:
                self.process.terminate(grace=2.0)
        self.process.terminate(grace=1.0)


MARK_ENV = "UNIRENDER_TEST_DATA_ROOT_MARK"  # inherited by every player a test service starts


def players_of(data_root: Path) -> list[int]:
    """Live processes (players, virtual displays) started by the services of this data root."""
    marker = f"{MARK_ENV}={data_root}".encode() + b"\0"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker in environ and b"unirender.cli\0serve" not in cmdline and alive(int(entry)):
            pids.append(int(entry))
    return pids


def assert_no_players_left(data_root: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while players_of(data_root) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = players_of(data_root)
    for pid in left:  # do not leak them into other tests, whatever the verdict
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"players left running after the service died: {left}"


def dataset_bytes(directory: Path) -> dict[str, bytes]:
    """Every file a job wrote, by relative path: frames, shards (tars), meta files, annotations; the manifest
    without what describes the run rather than the data (when, how long, which absolute directory); not the resume
    state (``.unirender-job/``: a lock file and the commit log)."""
    out = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if not path.is_file() or rel.startswith(".unirender-job/"):
            continue
        data = path.read_bytes()
        if rel == "manifest.json":
            doc = json.loads(data)
            for key in ("created", "timings", "directory"):
                doc.pop(key, None)
            data = json.dumps(doc, sort_keys=True).encode()
        out[rel] = data
    return out
