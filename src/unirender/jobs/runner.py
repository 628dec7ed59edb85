"""Run a job: resolve the platform once, start N players, shard the units among them, write, finish.

Each worker is a thread that owns one player (a ``Controller``, or a session from a ``SessionBackend``) and
takes the next unfinished unit from a shared queue. Rendering happens in the player processes, so Python
threads are enough to keep N of them busy. A unit's files are written as its frames arrive and the unit is
marked finished only when all of them are in place; a crash redoes just that unit on a fresh player, at most
``max_episode_retries`` times.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirender.errors import PlayerCrashedError, PlayerTimeoutError, RestartError, SpecError
from unirender.jobs.episodes import EpisodeFailed, WorkUnit, expand_units, missing_modalities, run_unit
from unirender.jobs.manifest import build_manifest, write_manifest, write_metadata
from unirender.jobs.plan import auto_workers, resolve_platform
from unirender.jobs.progress import Reporter
from unirender.jobs.state import MANIFEST, JobError, JobState
from unirender.jobs.write_behind import WriteBehind
from unirender.jobs.writers import open_episode_writer
from unirender.spec import JobSpec

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


def _pinned_kwargs(spec: JobSpec, resolution) -> dict[str, Any]:
    kwargs = spec.controller_kwargs()
    if resolution is not None:
        kwargs["platform"] = resolution.platform.name
        display = getattr(resolution, "virtual_display", None)
        if display is not None and kwargs.get("x_display") is None:
            kwargs["x_display"] = display.display  # the one Xvfb this job started, shared by its players
    return kwargs


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
        self._lock = threading.Lock()
        self._queue: deque[WorkUnit] = deque()
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

    # -- players ------------------------------------------------------------------------------------------
    def _open_player(self, kwargs: dict[str, Any]):
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
        units = expand_units(self.spec)
        state = JobState.open(self.root, self.spec, resume=self.resume)
        try:
            finished = state.finished_units()
            pending = [u for u in units if u.id not in finished]
            self._units_total = len(units)
            self._units_done = len(units) - len(pending)
            self._frames_done = sum(len(finished[u.id]["frames"]) for u in units if u.id in finished)
            self._frames_total = self._frames_done + sum(u.known_frame_count or 0 for u in pending)
            result = JobResult(directory=self.root, manifest_path=self.root / MANIFEST, units=len(units))
            result.units_resumed = self._units_done
            if pending:
                self._render(pending, result)
            result.elapsed_s = time.monotonic() - started
            result.step_s, result.write_s, result.encode_s = self._step_s, self._write_s, self._encode_s
            result.frames_written = self._frames_done - sum(
                len(finished[u.id]["frames"]) for u in units if u.id in finished
            )
            if result.cancelled:
                return result
            finished = state.finished_units()
            result.frames = write_metadata(self.root, units, finished)
            manifest = build_manifest(self.spec, units, finished, result, self._player_info)
            write_manifest(self.root, manifest)
            return result
        finally:
            state.close()

    def _render(self, pending: list[WorkUnit], result: JobResult) -> None:
        resolution = None if (self.backend or self.player_factory) else resolve_platform(self.spec)
        try:
            software = bool(getattr(getattr(resolution, "device", None), "software", True))
            if resolution is not None:
                result.platform = resolution.platform.name
                result.device = getattr(resolution.device, "name", None)
                self._player_info.update(platform=result.platform, device=result.device, software=software)
            requested = self.requested_workers
            n = auto_workers(len(pending), software) if requested in (None, "auto") else int(requested)
            n = max(1, min(n, len(pending)))
            result.workers = n
            self._queue.extend(pending)
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
                for t in threads:
                    t.start()
                # Wait on an Event, not Thread.join: on Python 3.11 a Ctrl-C inside join() marks a running
                # thread as stopped (the bpo-45274 fix), and a later join() returns while it still writes.
                try:
                    while not self._workers_done.wait(0.5):
                        pass
                except KeyboardInterrupt:
                    self._stop.set()
                    self._workers_done.wait()
                    raise
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
        if self.cancel.is_set() and self._units_done < self._units_total:
            result.cancelled = True

    def _next_unit(self) -> WorkUnit | None:
        with self._lock:
            if self._stopping() or not self._queue:
                return None
            return self._queue.popleft()

    def _stopping(self) -> bool:
        if self.cancel.is_set():
            self._stop.set()
        return self._stop.is_set()

    def _fail(self, unit: WorkUnit | None, exc: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = exc
                where = f"episode {unit.id} (scene {unit.episode.scene!r})" if unit else "starting a player"
                self._failure_report = (
                    f"job {self.spec.name!r} failed in {where}: {type(exc).__name__}: {exc}\n"
                    f"  {self._units_done} of {self._units_total} episodes are finished and kept in {self.root}; "
                    "run the same job again to resume."
                )
        self._stop.set()

    def _worker(self, wid: int, kwargs: dict[str, Any]) -> None:
        player = None
        unit = None
        lost = self._lost_errors()
        counted_totals: set[str] = set()
        try:
            while (unit := self._next_unit()) is not None:
                attempts = 0
                while True:
                    if self._stopping():  # e.g. Ctrl-C, which also reached the players
                        raise _Cancelled
                    if player is None:
                        self.reporter.worker(wid, "starting player")
                        player = self._open_player(kwargs)
                    try:
                        self._run_unit(wid, player, unit, counted_totals)
                        break
                    except (RestartError, *lost) as exc:
                        attempts += 1
                        if not isinstance(exc, RestartError):
                            self._close_player(player)
                            player = None
                        if attempts > self.spec.max_episode_retries:
                            raise JobError(
                                f"player failed {attempts} times on this episode "
                                f"(max_episode_retries={self.spec.max_episode_retries}); last: {exc}"
                            ) from exc
                        cause = (str(exc).splitlines() or [type(exc).__name__])[0]  # not the log tail
                        self.reporter.log(f"worker {wid}: player lost in {unit.id} ({cause}); redoing it")
                        self.reporter.worker(wid, f"{unit.id}: redoing after a player crash")
                with self._lock:
                    self._units_done += 1
                self.reporter.worker(wid, f"{unit.id}: done")
            self.reporter.worker(wid, "idle")
        except _Cancelled:
            self.reporter.worker(wid, "cancelled")
        except BaseException as exc:
            self.reporter.worker(wid, f"failed: {type(exc).__name__}")
            self._fail(unit, exc)
        finally:
            if player is not None:
                self._close_player(player)
            with self._lock:
                self._workers_running -= 1
                if self._workers_running == 0:
                    self._workers_done.set()

    def _run_unit(self, wid: int, player, unit: WorkUnit, counted_totals: set[str]) -> dict[str, Any]:
        render = self.spec.render
        writer = WriteBehind(
            open_episode_writer(self.root, unit.id, self.spec.output, render.depth_format), render
        )
        written = 0
        step_s = wait_s = 0.0
        expected: list[int | None] = [unit.known_frame_count]

        def on_total(n: int) -> None:
            expected[0] = n
            if unit.known_frame_count is None and unit.id not in counted_totals:
                counted_totals.add(unit.id)
                self._add_total(n)

        events = run_unit(player, unit, render, on_total=on_total)
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    event = next(events)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                if written == 0:
                    self._note_player(player, event)
                    missing = missing_modalities(event, render)
                    if missing:
                        raise EpisodeFailed(
                            f"the player did not produce {', '.join(missing)} (asked for through Initialize "
                            f"{sorted(k for k, v in render.initialize_params().items() if v)})"
                        )
                writer.add(written, event)
                step_s += t1 - t0
                wait_s += time.perf_counter() - t1
                written += 1
                self._advance(1)
                self.reporter.worker(wid, f"{unit.id}: {written}/{expected[0] or '?'} frames")
                if self._stopping():
                    raise _Cancelled
            t0 = time.perf_counter()
            records = writer.finish()
            wait_s += time.perf_counter() - t0
            timings = {"step_s": step_s, "write_s": wait_s, "encode_s": writer.busy_s}
            record = {"unit": unit.id, "frames": records, "timings": timings}
            # Marking the unit finished is the commit point: after it, a resumed job skips the unit.
            JobState(self.root).mark_finished(unit.id, record)
        except BaseException:
            writer.discard()
            self._advance(-written)  # these frames will be redone (or the job stops)
            raise
        finally:
            events.close()
            with self._lock:
                self._step_s += step_s
                self._write_s += wait_s
                self._encode_s += writer.busy_s
        return record

    def _note_player(self, player, event) -> None:
        if self._player_info.get("player_version"):
            return
        metadata = event.metadata
        env = self.spec.environment
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
    from unirender.spec import check_builtin_scenes, load_spec

    spec = load_spec(spec_or_path)
    check_builtin_scenes(spec)
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
