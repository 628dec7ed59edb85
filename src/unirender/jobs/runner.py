"""Run a job: resolve the platform once, start N players, share the work among them, write, finish.

Each worker is a thread that owns one player (a ``Controller``, or a session from a ``SessionBackend``) and
takes the next task from a shared queue: a range of chunks of one unit. Rendering happens in the player
processes, so Python threads are enough to keep N of them busy. Frames are committed chunk by chunk
(:mod:`unirender.jobs.chunks`); a crash redoes only the open chunk on a fresh player, at most
``max_episode_retries`` times per task. Pose and generator episodes are split into chunk ranges that run on
several players at once (a grid once its size is known), so one big episode uses every player.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirender.errors import ActionError, PlayerCrashedError, PlayerTimeoutError, RestartError, SpecError
from unirender.jobs.annotations import annotator_for
from unirender.jobs.atomic import write_atomic
from unirender.jobs.chunks import Commit, digest, encode_records, meta_path
from unirender.jobs.episodes import EpisodeFailed, WorkUnit, expand_units, missing_modalities, run_frames
from unirender.jobs.manifest import build_manifest, write_annotations, write_manifest
from unirender.jobs.mlagents_episodes import frame_parts, run_mlagents_frames
from unirender.jobs.plan import auto_workers, resolve_platform
from unirender.jobs.progress import Reporter
from unirender.jobs.state import MANIFEST, JobError, JobState
from unirender.jobs.write_behind import WriteBehind
from unirender.jobs.writers import FRAMES_DIR, open_episode_writer
from unirender.spec import JobSpec
from unirender.spec.mlagents import MLAgentsJobSpec

log = logging.getLogger(__name__)


@dataclass
class JobResult:
    directory: Path
    manifest_path: Path
    frames: int = 0  # in the dataset
    frames_written: int = 0  # by this run
    units: int = 0
    units_resumed: int = 0
    workers: int = 0
    elapsed_s: float = 0.0
    step_s: float = 0.0  # summed over workers: waiting on players (render + transfer)
    write_s: float = 0.0  # summed over workers: blocked on writing (what write-behind could not overlap)
    encode_s: float = 0.0  # summed over write-behind threads: selecting, decoding, encoding, writing
    platform: str | None = None
    device: str | None = None
    cancelled: bool = False
    failed: bool = False
    # Per worker of this run: frames it rendered, and its session's info() on a backend (node, pid, ...).
    players: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def frames_per_second(self) -> float:
        return self.frames_written / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "frames_done": self.frames,
            "frames_total": self.frames,
            "frames_written": self.frames_written,
            "episodes_done": self.units,
            "episodes_total": self.units,
            "episodes_resumed": self.units_resumed,
            "workers": self.workers,
            "elapsed_s": round(self.elapsed_s, 3),
            "frames_per_s": round(self.frames_per_second, 2),
            "write_share": round(self.write_s / (self.step_s + self.write_s), 4)
            if self.step_s + self.write_s > 0
            else 0.0,
            "encode_s": round(self.encode_s, 3),
            "platform": self.platform,
            "device": self.device,
        }


class _Cancelled(Exception):
    pass


class JobInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the job; committed chunks are kept. ``immediate``: a second Ctrl-C, nothing waited for."""

    def __init__(self, directory: Path, frames_kept: int, units_left: int, immediate: bool = False):
        self.directory, self.frames_kept, self.units_left, self.immediate = (
            directory,
            frames_kept,
            units_left,
            immediate,
        )
        super().__init__(f"{frames_kept:,} frames kept in {directory}, {units_left} units left")


@dataclass
class Task:
    """Frames ``start .. end-1`` of a unit (chunk-aligned); ``end`` None: to the unit's end, which a grid learns
    only once its scene is loaded (the task then shrinks and hands the rest out)."""

    unit: WorkUnit
    start: int
    end: int | None


# Errors that a redo would repeat: the job fails without advising a resume.
_DETERMINISTIC = (ActionError, EpisodeFailed)


def _pinned_kwargs(spec: JobSpec, resolution) -> dict[str, Any]:
    kwargs = spec.controller_kwargs()
    if resolution is not None:
        kwargs["platform"] = resolution.platform.name
        display = getattr(resolution, "virtual_display", None)
        if display is not None and kwargs.get("x_display") is None:
            kwargs["x_display"] = display.display  # the one Xvfb this job started, shared by its players
    return kwargs


def _contiguous(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted ints as half-open runs: [0, 1, 2, 5, 6] -> [(0, 3), (5, 7)]."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n:
            runs[-1] = (runs[-1][0], n + 1)
        else:
            runs.append((n, n + 1))
    return runs


@contextmanager
def _software_threads(workers: int, software: bool):
    """Give each software-rasteriser player its share of the cores (llvmpipe/lavapipe read LP_NUM_THREADS)."""
    if not software or "LP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["LP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    try:
        yield
    finally:
        os.environ.pop("LP_NUM_THREADS", None)


class JobRunner:
    def __init__(
        self,
        spec: JobSpec,
        *,
        output_dir: str | os.PathLike | None = None,
        workers: int | None = None,
        resume: bool = True,
        reporter: Reporter | None = None,
        progress: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None,
        backend=None,
        player_factory: Callable[[dict], Any] | None = None,
    ):
        self.spec = spec
        self.root = Path(output_dir if output_dir is not None else spec.output.directory)
        self.requested_workers = workers if workers is not None else spec.workers
        self.resume = resume
        self.reporter = reporter or Reporter()
        self.progress = progress
        self.cancel = cancel or threading.Event()  # the caller's: set means "stop, the job is cancelled"
        self._stop = threading.Event()  # ours: set on cancel or on a failure, workers stop after their frame
        self._workers_done = threading.Event()
        self._workers_running = 0
        self.backend = backend
        self.player_factory = player_factory
        self.mlagents = isinstance(spec, MLAgentsJobSpec)
        if self.mlagents and backend is not None:
            # Each unit launches its own seeded game (jobs.mlagents_episodes): in this process, which is where a
            # local backend's players run anyway; a remote backend cannot do that yet.
            if getattr(backend, "name", None) != "local":
                raise SpecError(
                    f"ML-Agents jobs run their games in this process, not on the {backend.name!r} backend",
                    [("environment.protocol", "mlagents jobs need no backend or the local one")],
                )
            self.backend = None
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self._failure_report: str = ""
        self._frames_done = 0
        self._frames_total = 0
        self._units_done = 0
        self._units_total = 0
        self._step_s = 0.0
        self._write_s = 0.0
        self._encode_s = 0.0
        self._player_info: dict[str, Any] = {}
        self._tasks_changed = threading.Condition(self._lock)
        self._queue: deque[Task] = deque()
        self._committed: dict[str, dict[int, Commit]] = defaultdict(dict)
        self._unit_totals: dict[str, int] = {}
        self._sized: set[str] = set()
        self._open_ended = 0
        self._n_workers = 1
        self._player_stats: list[dict[str, Any]] = []
        self._units: list[WorkUnit] = []

    # -- players ------------------------------------------------------------------------------------------
    def _open_player(self, kwargs: dict[str, Any]):
        if self.mlagents:  # a seat: each unit launches its own game (see jobs.mlagents_episodes)
            from unirender.jobs.mlagents_episodes import MLAgentsSeat

            return MLAgentsSeat(kwargs, self.player_factory)
        if self.player_factory is not None:
            return self.player_factory(dict(kwargs))
        if self.backend is not None:
            return self.backend.create_session(dict(kwargs))
        from unirender.controller import Controller

        return Controller(**kwargs)

    @staticmethod
    def _close_player(player) -> None:
        try:
            player.stop()
        except Exception as exc:  # a dead player may complain while being stopped
            log.debug("stopping player: %s", exc)

    @staticmethod
    def _lost_errors() -> tuple[type[BaseException], ...]:
        errors: list[type[BaseException]] = [PlayerCrashedError, PlayerTimeoutError]
        try:
            from unirender.cluster.base import SessionLostError

            errors.append(SessionLostError)
        except ImportError:
            pass
        return tuple(errors)

    # -- progress -----------------------------------------------------------------------------------------
    def _progress_dict(self) -> dict[str, Any]:
        return {
            "frames_done": self._frames_done,
            "frames_total": self._frames_total,
            "episodes_done": self._units_done,
            "episodes_total": self._units_total,
        }

    def _advance(self, frames: int) -> None:
        with self._lock:
            self._frames_done += frames
            snapshot = self._progress_dict()
        self.reporter.advance(frames)
        if self.progress:
            self.progress(snapshot)

    def _add_total(self, frames: int) -> None:
        with self._lock:
            self._frames_total += frames
        self.reporter.add_total(frames)

    # -- the job ------------------------------------------------------------------------------------------
    def run(self) -> JobResult:
        started = time.monotonic()
        if self.mlagents:  # load the ML-Agents modules here, once, not first in several worker threads at once
            from unirender.cluster.simulators import launcher

            launcher("mlagents")
        units = expand_units(self.spec)
        self._units = units
        chunk = self.spec.output.frames_per_shard
        state = JobState.open(self.root, self.spec, resume=self.resume)
        self._state = state
        try:
            commits = state.commits()
            for (unit_id, k), commit in commits.items():
                self._committed[unit_id][k] = commit
            kept = sum(c.frames for c in commits.values())
            runs, open_dirs, unknown = [], [], 0
            for unit in units:
                done = self._committed.get(unit.id, {})
                total = self._unit_total(unit)
                if total is not None:
                    self._sized.add(unit.id)  # counted here, not again when the grid is loaded
                    missing = [k for k in range(math.ceil(total / chunk)) if k not in done]
                    runs += [(unit, lo, hi) for lo, hi in _contiguous(missing)]
                    self._frames_total += sum(min(chunk, total - k * chunk) for k in missing)
                else:
                    runs.append((unit, 0, None))
                    unknown += 1
                unit_dir = self.root / FRAMES_DIR / unit.id
                if (total is None or missing) and unit_dir.is_dir():
                    open_dirs += [
                        d for d in unit_dir.iterdir() if not d.name.isdigit() or int(d.name) not in done
                    ]
            state.sweep(open_dirs)
            pending_units = {u.id for u, _, _ in runs}
            self._units_total = len(units)
            self._units_done = len(units) - len(pending_units)
            self._frames_done = kept
            self._frames_total += kept
            if commits:
                self.reporter.log(
                    f"{self.root}: {kept:,} frames kept, {len(pending_units)} unit"
                    f"{'s' if len(pending_units) != 1 else ''} left"
                )
            result = JobResult(directory=self.root, manifest_path=self.root / MANIFEST, units=len(units))
            result.units_resumed = self._units_done
            if runs:
                self._render(runs, unknown, result)
            result.elapsed_s = time.monotonic() - started
            result.step_s, result.write_s, result.encode_s = self._step_s, self._write_s, self._encode_s
            result.frames_written = self._frames_done - kept
            if result.cancelled:
                return result
            result.frames = sum(c.frames for done in self._committed.values() for c in done.values())
            write_annotations(self.root, self.spec, units, self._committed)
            manifest = build_manifest(self.spec, self.root, units, self._committed, result, self._player_info)
            write_manifest(self.root, manifest)
            return result
        finally:
            state.close()

    def _unit_total(self, unit: WorkUnit) -> int | None:
        if unit.known_frame_count is not None:
            return unit.known_frame_count
        if unit.id in self._unit_totals:
            return self._unit_totals[unit.id]
        return next((c.unit_frames for c in self._committed.get(unit.id, {}).values()), None)

    def _kept(self) -> tuple[int, int]:
        """(frames committed, units not finished) right now."""
        with self._lock:
            kept = sum(c.frames for done in self._committed.values() for c in done.values())
            left = 0
            for unit in self._units:
                total = self._unit_total(unit)
                done = self._committed.get(unit.id, {})
                if total is None or len(done) < math.ceil(total / self.spec.output.frames_per_shard):
                    left += 1
        return kept, left

    def _render(self, runs: list[tuple[WorkUnit, int, int | None]], unknown: int, result: JobResult) -> None:
        resolution = None if (self.backend or self.player_factory) else resolve_platform(self.spec)
        try:
            software = bool(getattr(getattr(resolution, "device", None), "software", True))
            if resolution is not None:
                result.platform = resolution.platform.name
                result.device = getattr(resolution.device, "name", None)
                self._player_info.update(platform=result.platform, device=result.device, software=software)
            # How many players the work can keep busy: every chunk of a pose/generator episode can run on its
            # own player, an action sequence only on one (each action depends on the ones before).
            capacity = sum(
                1 if hi is None or unit.sequential else hi - lo for unit, lo, hi in runs
            ) + unknown * (os.cpu_count() or 1)
            requested = self.requested_workers
            n = auto_workers(capacity, software) if requested in (None, "auto") else int(requested)
            n = max(1, min(n, capacity))
            result.workers = self._n_workers = n
            chunk = self.spec.output.frames_per_shard
            pending_chunks = sum(hi - lo for _, lo, hi in runs if hi is not None)
            span = max(1, math.ceil(pending_chunks / n))  # chunks per task: about one share per player
            for unit, lo, hi in runs:
                if hi is None:
                    self._open_ended += 1
                    self._queue.append(Task(unit, 0, None))
                    continue
                total = self._unit_total(unit)
                step = hi - lo if unit.sequential else span
                for k in range(lo, hi, step):
                    self._queue.append(Task(unit, k * chunk, min(min(k + step, hi) * chunk, total)))
            kwargs = _pinned_kwargs(self.spec, resolution)
            self.reporter.start(
                total=self._frames_total,  # grows as grid episodes learn their size
                done=self._frames_done,
                workers=n,
            )
            # Only players this process launches itself inherit the setting (not a backend's).
            with _software_threads(n, software and resolution is not None):
                threads = [
                    threading.Thread(target=self._worker, args=(w, kwargs), name=f"unirender-render-{w}")
                    for w in range(n)
                ]
                self._workers_running = n
                self._player_stats = [{"worker": w, "frames": 0} for w in range(n)]
                result.players = self._player_stats
                for t in threads:
                    t.start()
                # Wait on an Event, not Thread.join: on Python 3.11 a Ctrl-C inside join() marks a running
                # thread as stopped (the bpo-45274 fix), and a later join() returns while it still writes.
                try:
                    while not self._workers_done.wait(0.5):
                        pass
                except KeyboardInterrupt:
                    # The players are in their own process group: the terminal's SIGINT reached only us. Stop
                    # after the current frames; the open chunks are dropped, committed ones stay.
                    self._stop.set()
                    self.reporter.log("interrupted: stopping the players (Ctrl-C again to stop at once)")
                    try:
                        while not self._workers_done.wait(0.5):
                            pass
                    except KeyboardInterrupt:
                        raise JobInterrupted(self.root, *self._kept(), immediate=True) from None
                    raise JobInterrupted(self.root, *self._kept()) from None
                for t in threads:
                    t.join()
        finally:
            self.reporter.stop()
            if resolution is not None:
                resolution.release()
        result.platform = result.platform or self._player_info.get("platform")
        result.device = result.device or self._player_info.get("device")
        if self._failure is not None:
            result.failed = True
            result.errors.append(self._failure_report)
            raise JobError(self._failure_report) from self._failure
        if self.cancel.is_set() and self._kept()[1]:
            result.cancelled = True

    def _next_task(self) -> Task | None:
        """The next task; while a grid is still learning its size, idle workers wait for its share."""
        with self._tasks_changed:
            while True:
                if self._stopping():
                    return None
                if self._queue:
                    return self._queue.popleft()
                if self._open_ended == 0:
                    return None
                self._tasks_changed.wait(0.25)

    def _stopping(self) -> bool:
        if self.cancel.is_set():
            self._stop.set()
        return self._stop.is_set()

    def _fail(self, unit: WorkUnit | None, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = exc
                where = f"episode {unit.id} (scene {unit.episode.scene!r})" if unit else "starting a player"
                report = f"job {self.spec.name!r} failed in {where}: {type(exc).__name__}: {exc}"
                self._failure_report = report
        kept, left = self._kept()
        if isinstance(exc, _DETERMINISTIC) or isinstance(getattr(exc, "__cause__", None), _DETERMINISTIC):
            advice = "this fails the same way every time: fix the spec (a resume would repeat it)"
        else:
            advice = "run the same job again to resume"
        with self._lock:
            if self._failure is exc:
                self._failure_report += (
                    f"\n  {kept:,} frames are kept in {self.root} ({left} units left); {advice}."
                )
        self._stop.set()

    def _worker(self, wid: int, kwargs: dict[str, Any]) -> None:
        player = None
        task = None
        lost = self._lost_errors()
        try:
            while (task := self._next_task()) is not None:
                attempts = 0
                while True:
                    if self._stopping():
                        raise _Cancelled
                    if player is None:
                        self.reporter.worker(wid, "starting player")
                        player = self._open_player(kwargs)
                    try:
                        self._run_task(wid, player, task)
                        break
                    except (RestartError, *lost) as exc:
                        attempts += 1
                        if not isinstance(exc, RestartError):
                            self._close_player(player)
                            player = None
                        if self._stopping():
                            raise _Cancelled from None  # a player lost while the job is being cancelled
                        if attempts > self.spec.max_episode_retries:
                            raise JobError(
                                f"player failed {attempts} times on this episode "
                                f"(max_episode_retries={self.spec.max_episode_retries}); last: {exc}"
                            ) from exc
                        cause = (str(exc).splitlines() or [type(exc).__name__])[0]  # not the log tail
                        self.reporter.log(
                            f"worker {wid}: player lost in {task.unit.id} ({cause}); redoing its open chunk"
                        )
                        self.reporter.worker(wid, f"{task.unit.id}: redoing after a player crash")
                self.reporter.worker(wid, f"{task.unit.id}: done")
            self.reporter.worker(wid, "idle")
        except _Cancelled:
            self.reporter.worker(wid, "cancelled")
        except BaseException as exc:
            self.reporter.worker(wid, f"failed: {type(exc).__name__}")
            self._fail(task.unit if task else None, exc)
        finally:
            if player is not None:
                self._close_player(player)
            with self._lock:
                self._workers_running -= 1
                if self._workers_running == 0:
                    self._workers_done.set()
                self._tasks_changed.notify_all()

    def _size_known(self, task: Task, total: int) -> int:
        """A unit's frame count became known (``on_total``): count it, and split an open-ended task."""
        chunk = self.spec.output.frames_per_shard
        with self._tasks_changed:
            if task.unit.known_frame_count is None and task.unit.id not in self._sized:
                self._sized.add(task.unit.id)
                self._frames_total += total
                self.reporter.add_total(total)
            if task.end is None:
                chunks = math.ceil(total / chunk)
                span = max(1, math.ceil(chunks / self._n_workers))
                if task.unit.sequential:
                    span = chunks
                for k in range(span, chunks, span):
                    self._queue.append(Task(task.unit, k * chunk, min((k + span) * chunk, total)))
                task.end = min(span * chunk, total)
                self._open_ended -= 1
                self._tasks_changed.notify_all()
            return task.end

    def _commit(self, unit: WorkUnit, chunk: int, records: list[dict[str, Any]], counter: list[int]) -> None:
        """On the write-behind thread, once the chunk's files are in place: its metadata, then the log line."""
        data = encode_records(records)
        write_atomic(meta_path(self.root, unit.id, chunk), data)
        total = self._unit_totals[unit.id]
        commit = Commit(unit.id, chunk, len(records), total, digest(data))
        self._state.log.append(commit)
        with self._lock:
            self._committed[unit.id][chunk] = commit
            if len(self._committed[unit.id]) == math.ceil(total / self.spec.output.frames_per_shard):
                self._units_done += 1
        counter[0] += len(records)
        self.reporter.committed(unit.id, chunk, len(records))

    def _run_task(self, wid: int, player, task: Task) -> None:
        render = self.spec.render
        unit = task.unit
        chunk = self.spec.output.frames_per_shard
        with self._lock:  # a redo starts at the task's first chunk that is not committed yet
            done = self._committed.get(unit.id, {})
            start = task.start
            while start // chunk in done and (task.end is None or start < task.end):
                start += chunk
        if task.end is not None and start >= task.end:
            return
        writer = WriteBehind(
            open_episode_writer(self.root, unit.id, self.spec.output, render.depth_format),
            render,
            self.spec.output,
            commit=lambda k, records: self._commit(unit, k, records, task_committed),
            annotate=annotator_for(render),
            select=frame_parts if self.mlagents else None,
        )
        written = 0
        task_committed = [0]  # frames this task committed (on the write-behind thread)
        step_s = wait_s = 0.0
        end = [task.end]

        def on_total(n: int) -> int:
            self._unit_totals[unit.id] = n
            end[0] = self._size_known(task, n)
            return end[0]

        if self.mlagents:
            events = run_mlagents_frames(player, unit, self.spec, start=start, end=task.end, on_total=on_total)
        else:
            events = run_frames(player, unit, render, start=start, end=task.end, on_total=on_total)
        try:
            first = True
            while True:
                t0 = time.perf_counter()
                try:
                    index, event = next(events)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                if first:
                    first = False
                    self._note_player(player, event)
                    info = getattr(player, "info", None)
                    if callable(info) and "node" not in self._player_stats[wid]:
                        self._player_stats[wid].update(info())
                    missing = [] if self.mlagents else missing_modalities(event, render)
                    if missing:
                        raise EpisodeFailed(
                            f"the player did not produce {', '.join(missing)} (asked for through Initialize "
                            f"{sorted(k for k, v in render.initialize_params().items() if v)})"
                        )
                writer.add(index, event)
                if (index + 1) % chunk == 0 or index + 1 == end[0]:
                    writer.seal()
                step_s += t1 - t0
                wait_s += time.perf_counter() - t1
                written += 1
                self._player_stats[wid]["frames"] += 1
                self._advance(1)
                self.reporter.worker(
                    wid, f"{unit.id}: frame {index + 1}/{self._unit_totals.get(unit.id, '?')}"
                )
                if self._stopping():
                    raise _Cancelled
            t0 = time.perf_counter()
            writer.finish()
            wait_s += time.perf_counter() - t0
        except BaseException:
            writer.discard()
            self._advance(-(written - task_committed[0]))  # the open chunk's frames will be redone
            raise
        finally:
            events.close()
            with self._lock:
                self._step_s += step_s
                self._write_s += wait_s
                self._encode_s += writer.busy_s

    def _note_player(self, player, event) -> None:
        if self._player_info.get("player_version"):
            return
        metadata = event.metadata
        env = self.spec.environment
        if self.mlagents:
            from unirender import __version__

            package = f"com.unity.ml-agents {player.version}" if player.version else None
            with self._lock:
                builtin = f"unirender-player {__version__} ({package})"
                self._player_info["player_version"] = builtin if env.is_builtin else package
            return
        if env.is_builtin:
            from unirender import __version__

            version = f"unirender-player {__version__}"
        else:  # Unity builds do not report a version; their folder is named thor-<Platform>-<commit>
            version = metadata.get("buildVersion") or Path(env.executable).resolve().parent.name
        with self._lock:
            self._player_info["player_version"] = version
            if "platform" not in self._player_info:
                info = player.info() if callable(getattr(player, "info", None)) else {}  # a backend's session
                self._player_info.update(
                    platform=info.get("platform"),
                    device=info.get("device"),
                    software=info.get("software_device"),
                )


def render(
    spec_or_path,
    *,
    output_dir: str | os.PathLike | None = None,
    workers: int | None = None,
    resume: bool = True,
    reporter: Reporter | None = None,
    progress: Callable[[dict], None] | None = None,
    cancel: threading.Event | None = None,
    backend=None,
    player_factory: Callable[[dict], Any] | None = None,
) -> JobResult:
    """Run a job spec (a ``JobSpec``, a mapping, or a YAML/JSON/TOML path) into a dataset directory.

    ``output_dir`` overrides ``output.directory``; ``workers`` overrides ``workers``; ``resume=False``
    discards what an earlier run left there. ``progress(dict)`` is called after every frame; setting
    ``cancel`` stops the job after the current frames (the result has ``cancelled=True``; run it again to
    resume). Raises ``SpecError`` before anything starts, ``JobError`` when an episode fails for good.
    """
    from unirender.spec import check_actions, check_builtin_scenes, load_spec, spec_warnings_text

    spec = load_spec(spec_or_path)
    check_builtin_scenes(spec)
    warnings = check_actions(spec)
    if warnings:
        (reporter or Reporter()).log(spec_warnings_text(spec, warnings))
        log.warning("%s", spec_warnings_text(spec, warnings))
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SpecError(
            f"workers: must be an int of at least 1, got {workers!r}", [("workers", "at least 1")]
        )
    return JobRunner(
        spec,
        output_dir=output_dir,
        workers=workers,
        resume=resume,
        reporter=reporter,
        progress=progress,
        cancel=cancel,
        backend=backend,
        player_factory=player_factory,
    ).run()
