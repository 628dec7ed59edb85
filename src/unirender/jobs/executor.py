"""The executor of a job: N worker threads, each with a seat (its simulator), taking tasks from the planner,
retrying after a lost player, stopping on Ctrl-C, a cancel or the first failure.

Rendering happens in the player processes, so Python threads are enough to keep N of them busy. Frames are
committed chunk by chunk (:class:`~unirender.jobs.ledger.Ledger`); a crash redoes only the open chunk on a fresh
player, at most ``max_episode_retries`` times per task. What differs per family (the seat, how a unit drives its
simulator, what the writer keeps of a frame) comes from the family's adapter (:mod:`unirender.jobs.families`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unirender.errors import ActionError, PlayerCrashedError, PlayerTimeoutError, RestartError
from unirender.jobs.annotations import annotator_for
from unirender.jobs.families import JobFamily
from unirender.jobs.ledger import Ledger
from unirender.jobs.progress import Reporter
from unirender.jobs.state import JobError
from unirender.jobs.tasks import Task, TaskPlanner
from unirender.jobs.units import EpisodeFailed
from unirender.jobs.write_behind import WriteBehind
from unirender.jobs.writers import open_episode_writer

log = logging.getLogger(__name__)

# Errors that a redo would repeat: the job fails without advising a resume.
_DETERMINISTIC = (ActionError, EpisodeFailed)


class FlatCamerasError(EpisodeFailed):
    """A camera's first frame was one flat colour (no rendering context); the spec does not allow it."""


class Cancelled(Exception):
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


def _lost_errors() -> tuple[type[BaseException], ...]:
    from unirender.cluster.base import SessionLostError

    return (PlayerCrashedError, PlayerTimeoutError, SessionLostError)


def _stop_quietly(seat) -> None:
    try:
        seat.stop()
    except Exception as exc:  # a dead player may complain while being stopped
        log.debug("stopping player: %s", exc)


class Executor:
    """Runs the planner's tasks on ``workers`` seats; ``player_info`` and ``player_stats`` say what ran them."""

    def __init__(
        self,
        spec,
        family: JobFamily,
        root: Path,
        ledger: Ledger,
        planner: TaskPlanner,
        reporter: Reporter,
        cancel: threading.Event,
        open_simulator: Callable[[dict], Any],
        kwargs: dict[str, Any],
    ):
        self.spec, self.family, self.root = spec, family, root
        self.ledger, self.planner, self.reporter = ledger, planner, reporter
        self.cancel = cancel  # the caller's: set means "stop, the job is cancelled"
        self.open_simulator, self.kwargs = open_simulator, kwargs
        self.render = family.render_section(spec)
        self.allow_flat = family.allows_flat_cameras(spec)
        from unirender.cluster.simulators import camera_reader

        self.cameras_of = camera_reader(family.name)
        self._stop = threading.Event()  # ours: set on cancel or on a failure, workers stop after their frame
        self._done = threading.Event()
        self._running = 0
        self._lock = threading.Lock()
        self.failure: BaseException | None = None
        self.failure_report = ""
        self.player_info: dict[str, Any] = {}
        self.on_player: Callable[[dict[str, Any]], None] | None = None  # told player_info once it is known
        self.player_stats: list[dict[str, Any]] = []

    # -- the workers ----------------------------------------------------------------------------------
    def run(self, workers: int) -> None:
        """Run every task on ``workers`` threads; raises JobInterrupted on Ctrl-C, JobError on a failure."""
        threads = [
            threading.Thread(target=self._worker, args=(w,), name=f"unirender-render-{w}")
            for w in range(workers)
        ]
        self._running = workers
        self.player_stats[:] = [{"worker": w, "frames": 0} for w in range(workers)]
        for t in threads:
            t.start()
        # Wait on an Event, not Thread.join: on Python 3.11 a Ctrl-C inside join() marks a running thread as
        # stopped (the bpo-45274 fix), and a later join() returns while it still writes.
        try:
            while not self._done.wait(0.5):
                pass
        except KeyboardInterrupt:
            # The players are in their own process group: the terminal's SIGINT reached only us. Stop after the
            # current frames; the open chunks are dropped, committed ones stay.
            self._stop.set()
            self.reporter.log("interrupted: stopping the players (Ctrl-C again to stop at once)")
            try:
                while not self._done.wait(0.5):
                    pass
            except KeyboardInterrupt:
                raise JobInterrupted(self.root, *self.ledger.kept(), immediate=True) from None
            raise JobInterrupted(self.root, *self.ledger.kept()) from None
        for t in threads:
            t.join()
        if self.failure is not None:
            raise JobError(self.failure_report) from self.failure

    def stopping(self) -> bool:
        if self.cancel.is_set():
            self._stop.set()
        return self._stop.is_set()

    def _fail(self, unit, exc: BaseException) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = exc
                where = f"episode {unit.id} (scene {unit.episode.scene!r})" if unit else "starting a player"
                self.failure_report = f"job {self.spec.name!r} failed in {where}: {type(exc).__name__}: {exc}"
        kept, left = self.ledger.kept()
        if isinstance(exc, _DETERMINISTIC) or isinstance(getattr(exc, "__cause__", None), _DETERMINISTIC):
            advice = "this fails the same way every time: fix the spec (a resume would repeat it)"
        else:
            advice = "run the same job again to resume"
        with self._lock:
            if self.failure is exc:
                self.failure_report += (
                    f"\n  {kept:,} frames are kept in {self.root} ({left} units left); {advice}."
                )
        self._stop.set()

    def _worker(self, wid: int) -> None:
        seat = None
        task = None
        lost = _lost_errors()
        retries = self.spec.max_episode_retries
        try:
            while (task := self.planner.next_task(self.stopping)) is not None:
                attempts = 0
                while True:
                    if self.stopping():
                        raise Cancelled
                    if seat is None:
                        self.reporter.worker(wid, "starting player")
                        seat = self.family.seat(self.open_simulator, self.kwargs)
                    try:
                        self._run_task(wid, seat, task)
                        break
                    except (RestartError, *lost) as exc:
                        attempts += 1
                        if not isinstance(exc, RestartError):
                            _stop_quietly(seat)
                            seat = None
                        if self.stopping():
                            raise Cancelled from None  # a player lost while the job is being cancelled
                        if attempts > retries:
                            raise JobError(
                                f"player failed {attempts} times on this episode "
                                f"(max_episode_retries={retries}); last: {exc}"
                            ) from exc
                        cause = (str(exc).splitlines() or [type(exc).__name__])[0]  # not the log tail
                        self.reporter.log(
                            f"worker {wid}: player lost in {task.unit.id} ({cause}); redoing its open chunk"
                        )
                        self.reporter.worker(wid, f"{task.unit.id}: redoing after a player crash")
                self.reporter.worker(wid, f"{task.unit.id}: done")
            self.reporter.worker(wid, "idle")
        except Cancelled:
            self.reporter.worker(wid, "cancelled")
        except BaseException as exc:
            self.reporter.worker(wid, f"failed: {type(exc).__name__}")
            self._fail(task.unit if task else None, exc)
        finally:
            if seat is not None:
                _stop_quietly(seat)
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self._done.set()
            self.planner.wake()

    # -- one task -------------------------------------------------------------------------------------
    def _run_task(self, wid: int, seat, task: Task) -> None:
        ledger, unit, chunk = self.ledger, task.unit, self.planner.chunk
        start = ledger.first_pending(unit, task.start, task.end)  # a redo starts at its first open chunk
        if task.end is not None and start >= task.end:
            return
        committed = [0]  # frames this task committed (on the write-behind thread)

        def commit(k: int, records: list[dict[str, Any]]) -> None:
            ledger.commit(unit, k, records)
            committed[0] += len(records)

        episode_writer = open_episode_writer(self.root, unit.id, self.spec.output, self.render.depth_format)
        if self.spec.output.video is not None:  # its chunks' video segments too, encoded on threads of their own
            from unirender.jobs.episode_videos import VideoEpisodeWriter

            episode_writer = VideoEpisodeWriter(
                episode_writer, self.root, unit.id, self.spec.output.video, self.family.video_stream
            )
        writer = WriteBehind(
            episode_writer,
            self.render,
            self.spec.output,
            commit=commit,
            annotate=annotator_for(self.render),
            select=self.family.frame_parts,
        )
        written = 0
        step_s = wait_s = 0.0
        end = [task.end]

        def on_total(n: int) -> int:
            ledger.size_known(unit, n)
            end[0] = self.planner.size_known(task, n)
            return end[0]

        frames = self.family.frames(seat, unit, self.spec, start=start, end=task.end, on_total=on_total)
        try:
            first = True
            while True:
                t0 = time.perf_counter()
                try:
                    index, frame = next(frames)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                if first:
                    first = False
                    self._first_frame(wid, seat, frame)
                if index == 0 and not self.allow_flat:
                    self._check_cameras(seat)
                writer.add(index, frame)
                if (index + 1) % chunk == 0 or index + 1 == end[0]:
                    writer.seal()
                step_s += t1 - t0
                wait_s += time.perf_counter() - t1
                written += 1
                self.player_stats[wid]["frames"] += 1
                ledger.advance(1)
                self.reporter.worker(
                    wid, f"{unit.id}: frame {index + 1}/{ledger.unit_totals.get(unit.id, '?')}"
                )
                if self.stopping():
                    raise Cancelled
            t0 = time.perf_counter()
            writer.finish()
            wait_s += time.perf_counter() - t0
        except BaseException:
            writer.discard()
            ledger.advance(-(written - committed[0]))  # the open chunk's frames will be redone
            raise
        finally:
            frames.close()
            ledger.add_times(step_s, wait_s, writer.busy_s)

    def _first_frame(self, wid: int, seat, frame) -> None:
        """A task's first frame: what the player is (for the manifest), and whether it gives what was asked."""
        self._note_player(seat, frame)
        info = getattr(seat.simulator, "info", None)  # a backend's session says where it runs
        if callable(info) and "node" not in self.player_stats[wid]:
            self.player_stats[wid].update(info())
        self.family.check_first_frame(frame, self.spec)

    def _check_cameras(self, seat) -> None:
        """A unit's first frame: a camera that rendered one flat colour fails the job (FlatCameraWarning's text)."""
        from unirender.simulator import flat_camera_message, flat_cameras

        simulator = seat.simulator
        flat = flat_cameras(self.cameras_of(simulator.last_event))
        if flat:
            raise FlatCamerasError(
                f"{flat_camera_message(flat, simulator.describe())}. The job stops here; set "
                f"{self.family.allow_flat_cameras_key}: true in the spec if the scene really is one colour"
            )

    def _note_player(self, seat, frame) -> None:
        if "player_version" in self.player_info:
            return
        version = self.family.player_version(seat, self.spec, frame)
        with self._lock:
            self.player_info["player_version"] = version
            if self.player_info.get("platform") is None:  # not resolved here: where the backend put it
                placement = seat.simulator.describe().placement()
                self.player_info.update(
                    platform=placement.get("platform"),
                    device=placement.get("device"),
                    software=placement.get("software_device"),
                )
            if self.on_player is not None:  # before the frame's chunk can commit
                self.on_player(dict(self.player_info))
