"""Jobs submitted over HTTP: each runs ``unirender.jobs.render`` on a thread, with progress and cancel.

Outputs go under ``data_root/<owner>/<output.directory>`` only (see ``paths.py``). Each running job holds
player slots (its ``workers``) from the same pool as sessions, so jobs cannot starve the machine.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirender.jobs.progress import Reporter
from unirender.service.errors import ApiError, from_unirender_error
from unirender.service.limits import PlayerSlots
from unirender.service.metrics import ServiceMetrics
from unirender.spec import JobSpec

log = logging.getLogger(__name__)

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
FINAL = {SUCCEEDED, FAILED, CANCELLED}


@dataclass
class Job:
    id: str
    owner: str
    spec: JobSpec
    output_dir: Path
    workers: int
    state: str = QUEUED
    progress: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    worker_states: dict = field(default_factory=dict)  # worker number -> what it is doing (the runner says)
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    manifest_path: Path | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def describe(self) -> dict:
        return {
            "id": self.id,
            "name": self.spec.name,
            "state": self.state,
            "progress": dict(self.progress),
            "errors": list(self.errors),
            "workers": {str(w): state for w, state in sorted(self.worker_states.items())},
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "output": self.output_dir.name,
            "manifest_available": bool(self.manifest_path and self.manifest_path.is_file()),
        }


def _progress_dict(p: Any) -> dict:
    """Whatever ``unirender.jobs`` reports as progress -> a plain JSON dict."""
    if isinstance(p, dict):
        return {k: v for k, v in p.items() if isinstance(v, int | float | str | bool | type(None))}
    if hasattr(p, "model_dump"):
        return _progress_dict(p.model_dump())
    if hasattr(p, "__dataclass_fields__"):
        return _progress_dict({k: getattr(p, k) for k in p.__dataclass_fields__})
    return {"status": str(p)}


class _WorkerStates(Reporter):
    """The runner's per-worker reports, kept on the job for ``describe()`` (the web console shows them)."""

    def __init__(self, job: Job):
        self.job = job

    def worker(self, worker: int, state: str) -> None:
        self.job.worker_states[worker] = state


def _fraction(progress: dict) -> float | None:
    for done, total in (("frames_done", "frames_total"), ("episodes_done", "episodes_total"), ("done", "total")):
        if progress.get(total):
            return min(1.0, float(progress.get(done) or 0) / float(progress[total]))
    return None


class JobManager:
    def __init__(self, *, slots: PlayerSlots, metrics: ServiceMetrics, jobs_per_token: int, backend=None):
        self.slots = slots
        self.metrics = metrics
        self.jobs_per_token = jobs_per_token
        self.backend = backend
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def submit(self, owner: str, spec: JobSpec, output_dir: Path, workers: int) -> Job:
        with self._lock:
            mine = [j for j in self._jobs.values() if j.owner == owner and j.state not in FINAL]
            if len(mine) >= self.jobs_per_token:
                raise ApiError(429, "too_many_jobs", f"this token already runs {len(mine)} jobs (limit "
                               f"{self.jobs_per_token}); wait for one or cancel it")
            busy = [j for j in self._jobs.values() if j.state not in FINAL and j.output_dir == output_dir]
            if busy:
                raise ApiError(409, "output_in_use", f"job {busy[0].id} is writing to output.directory "
                               f"{spec.output.directory!r}; choose another directory")
            self.slots.acquire(workers)
            job = Job(id="j" + uuid.uuid4().hex[:12], owner=owner, spec=spec, output_dir=output_dir,
                      workers=workers)
            self._jobs[job.id] = job
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"unirender-job-{job.id}", daemon=True)
        job.thread.start()
        self._update_gauges()
        return job

    def get(self, owner: str, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or job.owner != owner:
            raise ApiError(404, "job_not_found", f"no job {job_id!r}")
        return job

    def list(self, owner: str) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if j.owner == owner]

    def cancel(self, owner: str, job_id: str) -> Job:
        job = self.get(owner, job_id)
        job.cancel.set()
        return job

    def manifest(self, owner: str, job_id: str) -> dict:
        job = self.get(owner, job_id)
        path = job.manifest_path
        if path is None or not path.is_file():
            raise ApiError(409, "manifest_not_ready", f"job {job_id} is {job.state} and has no manifest yet")
        return json.loads(path.read_text())

    def cancel_all(self, wait: float = 10.0) -> None:
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.state not in FINAL]
        for job in jobs:
            job.cancel.set()
        deadline = time.monotonic() + wait
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))

    # -- the worker thread --------------------------------------------------------------------------------
    def _on_progress(self, job: Job, p: Any) -> None:
        job.progress = _progress_dict(p)
        fraction = _fraction(job.progress)
        if fraction is not None:
            self.metrics.job_progress.labels(job.id).set(fraction)

    def _run(self, job: Job) -> None:
        from unirender import jobs as jobs_runner

        job.state, job.started_at = RUNNING, time.time()
        self._update_gauges()
        try:
            result = jobs_runner.render(
                job.spec,
                output_dir=job.output_dir,
                workers=job.workers,
                progress=lambda p: self._on_progress(job, p),
                reporter=_WorkerStates(job),
                cancel=job.cancel,
                **({"backend": self.backend} if self.backend is not None else {}),
            )
            job.manifest_path = Path(result.manifest_path)
            job.errors.extend(str(err) for err in result.errors)
            if result.cancelled:
                job.state = CANCELLED
            else:
                job.state = FAILED if result.failed else SUCCEEDED
                job.progress.update(_progress_dict(result.summary()))
        except Exception as exc:
            log.warning("job %s failed: %s", job.id, exc)
            job.errors.append(from_unirender_error(exc).body()["error"])
            job.state = CANCELLED if job.cancel.is_set() else FAILED
        finally:
            job.finished_at = time.time()
            self.slots.release(job.workers)
            try:  # finished jobs leave the gauge: its label set stays bounded by running jobs
                self.metrics.job_progress.remove(job.id)
            except KeyError:
                pass
            self._update_gauges()

    def _update_gauges(self) -> None:
        with self._lock:
            states = [j.state for j in self._jobs.values()]
        for state in (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED):
            self.metrics.jobs.labels(state).set(states.count(state))
        self.metrics.players.set(self.slots.used)

