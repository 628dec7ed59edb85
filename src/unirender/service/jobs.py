"""Jobs submitted over HTTP: a durable queue; each job runs ``unirender.jobs.render`` on a thread.

Outputs go under ``data_root/<owner>/<output.directory>`` only (see ``paths.py``). A job waits ``queued`` until
its ``workers`` player slots are free (the same pool as sessions, so jobs cannot starve the machine), then runs.

Every job is a record in the service's database (:mod:`unirender.service.store`), written on every state change
and at each chunk commit. A service that dies (SIGKILL, a crash) or is stopped (SIGTERM, a redeploy) takes up,
when it starts again, every job that was queued or running: each resumes from its last committed chunk (the
dataset's own commit log says which, docs/jobs.md), with no resubmission. A crash or a shutdown is not a cancel;
a cancel that was asked for is kept (the job ends ``cancelled``, even if the service died while stopping it).
Finished jobs stay listed for ``job_retention_days``.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import signal
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
from unirender.service.paths import owner_dir, resolve_output_dir
from unirender.service.store import ServiceStore
from unirender.simulator import family_of

log = logging.getLogger(__name__)

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
FINAL = {SUCCEEDED, FAILED, CANCELLED}
PAGE_DEFAULT, PAGE_MAX = 100, 1000  # GET /v1/jobs?limit=
_SCHEDULE_POLL_S = 0.5  # sessions release slots without telling the queue: look again this often
# Tests only (tests/service/test_durable_*.py): the service SIGKILLs itself at a named point of a job's life
# ("queued", "running", "frame:N", "commit:N", "cancel"), to land a real kill in each window deterministically.
TEST_KILL_ENV = "UNIRENDER_TEST_KILL_AT"
# Tests only (tests/service/test_server.py, test_console.py, test_durable_jobs.py): "NAME:N" holds the first job
# named NAME (``spec.name``) once N frames are done: its worker waits between frames, in the progress callback,
# until the job is cancelled or the service stops (both set ``job.cancel``), and the service logs
# ``TEST_HOLD_LINE`` when it holds. So a cancel or a SIGTERM lands mid-job whatever the load: the job cannot finish
# first. One job per service process (a resumed job of the same name runs on); inert unless set.
TEST_HOLD_ENV = "UNIRENDER_TEST_HOLD_JOB"
TEST_HOLD_LINE = "held until cancelled"


def _kill_point() -> tuple[str, int | None] | None:
    value = os.environ.get(TEST_KILL_ENV, "").strip()
    if not value:
        return None
    name, _, n = value.partition(":")
    return name, int(n) if n else None


def _hold_point() -> tuple[str, int] | None:
    value = os.environ.get(TEST_HOLD_ENV, "").strip()
    if not value:
        return None
    name, _, n = value.rpartition(":")
    return name, int(n)


def page_arguments(args) -> tuple[int, str | None]:
    """``GET /v1/jobs?limit=&before=`` -> (limit, before); 400 ``invalid_parameter`` for a bad limit."""
    raw = args.get("limit")
    try:
        limit = PAGE_DEFAULT if raw in (None, "") else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= PAGE_MAX:
        raise ApiError(400, "invalid_parameter", f"limit must be an integer from 1 to {PAGE_MAX}, got {raw!r}",
                       path="limit")
    return limit, args.get("before") or None


@dataclass
class Job:
    id: str
    owner: str
    spec_doc: dict | str  # the validated spec as JSON (text as read from the database, decoded on first use)
    output_dir: Path
    workers: int
    name: str | None = None
    seq: int = 0
    state: str = QUEUED
    progress: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    worker_states: dict = field(default_factory=dict)  # worker number -> what it is doing (the runner says)
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    manifest_path: Path | None = None
    cancel_requested: bool = False  # by its owner (a shutdown also sets ``cancel``, but is no cancel)
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    _spec: Any = None

    @property
    def spec(self):
        """The ``JobSpec`` (or ``MLAgentsJobSpec``); parsed on first use, so 10,000 finished jobs load fast."""
        if self._spec is None:
            from unirender.spec import load_spec

            self._spec = load_spec(self.spec_document)
        return self._spec

    @property
    def spec_document(self) -> dict:
        if isinstance(self.spec_doc, str):
            self.spec_doc = json.loads(self.spec_doc)
        return self.spec_doc

    def describe(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
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

    def row(self) -> dict:
        """Its database record (every column)."""
        doc = self.spec_document
        return {
            "id": self.id, "seq": self.seq, "owner": self.owner, "name": self.name,
            "kind": family_of(doc.get("environment") or {}),
            "spec": doc, "output": doc.get("output", {}).get("directory", ""),
            "workers": self.workers, "state": self.state, "progress": self.progress, "errors": self.errors,
            "cancel_requested": int(self.cancel_requested), "created_at": self.created_at,
            "started_at": self.started_at, "finished_at": self.finished_at, "updated_at": time.time(),
            "manifest": str(self.manifest_path) if self.manifest_path else None,
        }  # fmt: skip


def _progress_dict(p: Any) -> dict:
    """Whatever ``unirender.jobs`` reports as progress -> a plain JSON dict."""
    if isinstance(p, dict):
        return {k: v for k, v in p.items() if isinstance(v, int | float | str | bool | type(None))}
    if hasattr(p, "model_dump"):
        return _progress_dict(p.model_dump())
    if hasattr(p, "__dataclass_fields__"):
        return _progress_dict({k: getattr(p, k) for k in p.__dataclass_fields__})
    return {"status": str(p)}


class _JobReporter(Reporter):
    """The runner's reports: per-worker states for ``describe()`` (the web console shows them), and each chunk
    commit, which is written to the job's record."""

    def __init__(self, manager: JobManager, job: Job):
        self.manager = manager
        self.job = job
        self.commits = 0

    def worker(self, worker: int, state: str) -> None:
        self.job.worker_states[worker] = state

    def committed(self, unit_id: str, chunk: int, frames: int) -> None:
        self.commits += 1
        self.manager._test_kill("commit", self.commits)  # after the commit log's line, before the record's
        self.manager._save(self.job, "progress")


def _fraction(progress: dict) -> float | None:
    for done, total in (("frames_done", "frames_total"), ("episodes_done", "episodes_total"), ("done", "total")):
        if progress.get(total):
            return min(1.0, float(progress.get(done) or 0) / float(progress[total]))
    return None


class JobManager:
    def __init__(self, *, slots: PlayerSlots, metrics: ServiceMetrics, jobs_per_token: int, backend=None,
                 store: ServiceStore | None = None, data_root: Path | None = None, retention_days: float = 30.0):
        self.slots = slots
        self.metrics = metrics
        self.jobs_per_token = jobs_per_token
        self.backend = backend
        self.store = store
        self.data_root = data_root
        self.retention_s = retention_days * 86400.0
        self._jobs: dict[str, Job] = {}
        self._by_owner: dict[str, list[Job]] = {}  # in submission order (seq ascending): listing pages
        self._queue: list[Job] = []  # queued jobs in submission order
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._next_seq = store.next_job_seq() if store is not None else 1
        self._stopping = False
        self._scheduler: threading.Thread | None = None
        self._kill_at = _kill_point()
        self._hold_at = _hold_point()
        self._held = False

    # -- start: take up what the last service left ---------------------------------------------------------
    def start(self) -> None:
        """Load every record; resume queued and running jobs; start the queue. Call once."""
        if self.store is not None:
            self._recover()
        self._scheduler = threading.Thread(target=self._schedule_loop, name="unirender-job-queue", daemon=True)
        self._scheduler.start()

    def _recover(self) -> None:
        now = time.time()
        expired = []
        for row in self.store.jobs():
            if row["state"] in FINAL and row["finished_at"] is not None and now - row["finished_at"] > self.retention_s:
                expired.append(row["id"])
                continue
            job = Job(
                id=row["id"], owner=row["owner"], spec_doc=row["spec"], output_dir=Path(), name=row["name"],
                workers=row["workers"],
                seq=row["seq"], state=row["state"], progress=row["progress"] or {}, errors=row["errors"] or [],
                created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
                manifest_path=Path(row["manifest"]) if row["manifest"] else None,
                cancel_requested=bool(row["cancel_requested"]),
            )
            job.output_dir = self._output_dir(job.owner, row["output"], job)
            if job.state not in FINAL:
                self._take_up(job, now)
            self._add(job)
        if expired:
            self.store.delete_jobs(expired)
        taken = [j for j in self._queue]
        if taken:
            self.metrics.jobs_taken_up.inc(len(taken))
            log.warning("taking up %d job(s) the previous service left queued or running: %s", len(taken),
                        ", ".join(j.id for j in taken))

    def _output_dir(self, owner: str, directory: str, job: Job) -> Path:
        """Recomputed from the spec and this service's data root (the volume may be mounted elsewhere now),
        held to the same rules as at submission for a job that will run. A finished one only names it (a
        resubmission is checked again in ``submit``), so 10,000 of them load without 10,000 ``realpath``s."""
        if self.data_root is None:
            return Path(directory)
        if job.state in FINAL:
            return owner_dir(self.data_root, owner) / directory
        try:
            return resolve_output_dir(self.data_root, owner, directory)
        except ApiError as exc:
            job.state, job.finished_at = FAILED, time.time()
            job.errors.append(exc.body()["error"])
            self._save(job, "final")
            return Path(directory)

    def _take_up(self, job: Job, now: float) -> None:
        if job.cancel_requested:  # the service died while the job was being cancelled: it stays cancelled
            job.state, job.finished_at = CANCELLED, now
            job.errors.append("cancelled; the service restarted before the job had stopped")
            self._save(job, "final")
            return
        job.state = QUEUED
        job.workers = max(1, min(job.workers, self.slots.total))  # the new config may have fewer slots
        job.worker_states = {}
        self._save(job, "state")
        self._queue.append(job)

    def _add(self, job: Job) -> None:
        self._jobs[job.id] = job
        self._by_owner.setdefault(job.owner, []).append(job)

    # -- the API ------------------------------------------------------------------------------------------
    def submit(self, owner: str, spec, output_dir: Path, workers: int) -> Job:
        if self.data_root is not None:  # whoever passed output_dir (a console's resubmission of a loaded job)
            output_dir = resolve_output_dir(self.data_root, owner, spec.output.directory)
        with self._lock:
            if self._stopping:
                raise ApiError(503, "shutting_down", "the service is shutting down", headers={"Retry-After": "5"})
            mine = [j for j in self._by_owner.get(owner, []) if j.state not in FINAL]
            if len(mine) >= self.jobs_per_token:
                raise ApiError(429, "too_many_jobs", f"this token already runs {len(mine)} jobs (limit "
                               f"{self.jobs_per_token}); wait for one or cancel it")
            busy = [j for j in self._jobs.values() if j.state not in FINAL and j.output_dir == output_dir]
            if busy:
                raise ApiError(409, "output_in_use", f"job {busy[0].id} is writing to output.directory "
                               f"{spec.output.directory!r}; choose another directory")
            job = Job(id="j" + uuid.uuid4().hex[:12], owner=owner, spec_doc=spec.model_dump(mode="json"),
                      output_dir=output_dir, name=spec.name, workers=workers, seq=self._next_seq, _spec=spec)
            self._next_seq += 1
            if self.store is not None:
                self.store.insert_job(job.row())  # durable before the client hears of it
            self._add(job)
            self._queue.append(job)
            self._wake.notify_all()
        self._test_kill("queued")
        self._start_queued()
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
            return list(self._by_owner.get(owner, []))

    def page(self, owner: str, limit: int = PAGE_DEFAULT, before: str | None = None) -> tuple[list[Job], str | None]:
        """Newest first: at most ``limit`` of the owner's jobs submitted before job ``before`` (a cursor: the
        last id of the previous page), and the cursor of the next page (None on the last)."""
        with self._lock:
            jobs = self._by_owner.get(owner, [])
            end = len(jobs)
            if before is not None:
                cursor = self._jobs.get(before)
                if cursor is None or cursor.owner != owner:
                    raise ApiError(400, "invalid_parameter", f"before={before!r} is not one of your jobs",
                                   path="before")
                end = bisect.bisect_left(jobs, cursor.seq, key=lambda j: j.seq)
            start = max(0, end - limit)
            chosen = jobs[start:end][::-1]
        return chosen, (chosen[-1].id if start > 0 and chosen else None)

    def cancel(self, owner: str, job_id: str) -> Job:
        job = self.get(owner, job_id)
        with self._lock:
            if job.state in FINAL:
                return job
            job.cancel_requested = True
            job.cancel.set()
            if job in self._queue:  # never started: nothing to stop
                self._queue.remove(job)
                job.state, job.finished_at = CANCELLED, time.time()
        self._save(job, "final" if job.state in FINAL else "cancel")
        self._test_kill("cancel")
        self._update_gauges()
        return job

    def manifest(self, owner: str, job_id: str) -> dict:
        job = self.get(owner, job_id)
        path = job.manifest_path
        if path is None or not path.is_file():
            raise ApiError(409, "manifest_not_ready", f"job {job_id} is {job.state} and has no manifest yet")
        return json.loads(path.read_text())

    def close(self, wait: float = 10.0) -> None:
        """Shutdown: stop the queue and the running jobs after their current frames. They are no cancel: their
        records say ``queued``, and the next service resumes them."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
            running = [j for j in self._jobs.values() if j.state == RUNNING]
        for job in running:
            job.cancel.set()
        deadline = time.monotonic() + wait
        for job in running:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
        if self._scheduler is not None:
            self._scheduler.join(max(0.1, deadline - time.monotonic()))

    cancel_all = close  # the name app.shutdown() has always called

    def expire(self, now: float | None = None) -> int:
        """Drop finished jobs older than the retention (their datasets stay on disk)."""
        now = time.time() if now is None else now
        with self._lock:
            old = [j for j in self._jobs.values()
                   if j.state in FINAL and j.finished_at is not None and now - j.finished_at > self.retention_s]
            for job in old:
                del self._jobs[job.id]
                self._by_owner[job.owner].remove(job)
        if old and self.store is not None:
            self.store.delete_jobs(j.id for j in old)
        return len(old)

    # -- the queue ----------------------------------------------------------------------------------------
    def _schedule_loop(self) -> None:
        last_expiry = time.monotonic()
        while True:
            with self._lock:
                if self._stopping:
                    return
                # Asleep while nothing waits; a queued job waits on slots that sessions free without telling.
                self._wake.wait(_SCHEDULE_POLL_S if self._queue else 3600.0)
                if self._stopping:
                    return
            try:
                self._start_queued()
                if time.monotonic() - last_expiry >= 3600:
                    last_expiry = time.monotonic()
                    self.expire()
            except Exception:
                log.exception("job queue")

    def _start_queued(self) -> None:
        """Start queued jobs in submission order while their slots are free."""
        started = []
        with self._lock:
            while self._queue and not self._stopping:
                job = self._queue[0]
                try:
                    self.slots.acquire(job.workers)
                except ApiError:
                    break  # first come, first served: later jobs wait behind it
                self._queue.pop(0)
                job.state, job.started_at = RUNNING, time.time()
                job.thread = threading.Thread(target=self._run, args=(job,), name=f"unirender-job-{job.id}",
                                              daemon=True)
                started.append(job)
        for job in started:
            self._save(job, "state")
            self._test_kill("running")
            job.thread.start()
        if started:
            self._update_gauges()

    # -- the worker thread --------------------------------------------------------------------------------
    def _on_progress(self, job: Job, p: Any) -> None:
        job.progress = _progress_dict(p)
        self._test_kill("frame", job.progress.get("frames_done"))
        fraction = _fraction(job.progress)
        if fraction is not None:
            self.metrics.job_progress.labels(job.id).set(fraction)
        if self._hold_at is not None:
            self._test_hold(job)

    def _run(self, job: Job) -> None:
        from unirender import jobs as jobs_runner

        self._update_gauges()
        try:
            result = jobs_runner.render(
                job.spec,
                output_dir=job.output_dir,
                workers=job.workers,
                progress=lambda p: self._on_progress(job, p),
                reporter=_JobReporter(self, job),
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
            self.slots.release(job.workers)
            if job.state == CANCELLED and not job.cancel_requested:  # stopped by a shutdown: resume next time
                job.state, job.finished_at = QUEUED, None
                self._save(job, "state")
            else:
                job.finished_at = time.time()
                self._save(job, "final")
            try:  # finished jobs leave the gauge: its label set stays bounded by running jobs
                self.metrics.job_progress.remove(job.id)
            except KeyError:
                pass
            with self._lock:
                self._wake.notify_all()
            self._update_gauges()

    # -- records ------------------------------------------------------------------------------------------
    _FIELDS = {
        "state": ("state", "progress", "workers", "started_at", "finished_at", "updated_at"),
        "progress": ("progress", "updated_at"),
        "cancel": ("cancel_requested", "updated_at"),
        "final": ("state", "progress", "errors", "cancel_requested", "finished_at", "manifest", "updated_at"),
    }

    def _save(self, job: Job, what: str) -> None:
        if self.store is None:
            return
        row = job.row()
        try:
            self.store.update_job(job.id, **{k: row[k] for k in self._FIELDS[what]})
        except Exception:  # a full disk must not kill the job: its dataset's commit log is the real progress
            log.exception("writing the record of job %s", job.id)

    def _test_kill(self, point: str, n: int | None = None) -> None:
        if self._kill_at is not None and self._kill_at == (point, n):
            log.warning("%s=%s: SIGKILL now", TEST_KILL_ENV, os.environ.get(TEST_KILL_ENV))
            os.kill(os.getpid(), signal.SIGKILL)

    def _test_hold(self, job: Job) -> None:
        name, n = self._hold_at
        frames = job.progress.get("frames_done") or 0
        with self._lock:
            if self._held or job.name != name or frames < n:
                return
            self._held = True
        log.warning("%s=%s: job %s at %d frames %s", TEST_HOLD_ENV, os.environ.get(TEST_HOLD_ENV), job.id,
                    frames, TEST_HOLD_LINE)
        job.cancel.wait()

    def _update_gauges(self) -> None:
        with self._lock:
            states = [j.state for j in self._jobs.values() if j.state not in FINAL]
            finished = {s: 0 for s in FINAL}
            for j in self._jobs.values():
                if j.state in FINAL:
                    finished[j.state] += 1
        for state in (QUEUED, RUNNING):
            self.metrics.jobs.labels(state).set(states.count(state))
        for state, n in finished.items():
            self.metrics.jobs.labels(state).set(n)
        self.metrics.players.set(self.slots.used)
