"""Run a job: its family's adapter, the plan of tasks, the executor, the commits, the manifest.

:class:`JobRunner` puts the parts together once per job: the family adapter (:mod:`unirender.jobs.families`,
looked up by ``spec.family``), the :class:`~unirender.jobs.ledger.Ledger` (commits, counts, resume), the
:class:`~unirender.jobs.tasks.TaskPlanner` (units -> tasks, splitting) and the
:class:`~unirender.jobs.executor.Executor` (workers, seats, retries, Ctrl-C). It resolves the platform once for
players it launches itself; a backend (local or Ray) places its sessions itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirender.errors import SpecError
from unirender.jobs.executor import Executor, JobInterrupted
from unirender.jobs.families import job_family
from unirender.jobs.ledger import Ledger
from unirender.jobs.manifest import build_manifest, write_annotations, write_manifest
from unirender.jobs.plan import resolve_platform
from unirender.jobs.progress import Reporter
from unirender.jobs.state import MANIFEST, JobError, JobState
from unirender.jobs.tasks import TaskPlanner, worker_count

__all__ = ["JobError", "JobInterrupted", "JobResult", "JobRunner", "render"]

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


def _pinned_kwargs(spec, resolution) -> dict[str, Any]:
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
    """One run of a job spec into ``output_dir`` (see :func:`render`).

    ``backend``: a session backend (``cluster.create_backend("local" | "ray")``) whose sessions are the players;
    ``player_factory(kwargs)``: makes a started simulator itself (tests); neither: players are launched here
    (``cluster.simulators.launch``) on a platform resolved once for the job."""

    def __init__(
        self,
        spec,
        *,
        output_dir: str | os.PathLike | None = None,
        workers: int | None = None,
        resume: bool = True,
        reporter: Reporter | None = None,
        progress: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None,
        backend=None,
        player_factory: Callable[[dict], Any] | None = None,
        allow_build_change: bool = False,
    ):
        self.spec = spec
        self.allow_build_change = allow_build_change
        self.family = job_family(spec.family)
        self.root = Path(output_dir if output_dir is not None else spec.output.directory)
        self.requested_workers = workers if workers is not None else spec.workers
        self.resume = resume
        self.reporter = reporter or Reporter()
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.backend = backend
        self.player_factory = player_factory

    def _open_simulator(self) -> Callable[[dict], Any]:
        if self.player_factory is not None:
            return self.player_factory
        if self.backend is not None:
            return self.backend.create_session
        from unirender.cluster.simulators import launch, launcher

        launcher(self.family.name)  # load the family's modules here, once, not first in several threads at once
        return launch

    def run(self) -> JobResult:
        started = time.monotonic()
        if self.spec.output.video is not None:
            from unirender.jobs.episode_videos import check_video_spec

            check_video_spec(self.spec.output.video)  # a missing codec fails before anything starts
        units = self.family.units(self.spec)
        chunk = self.spec.output.frames_per_shard
        build_digest = self._build_digest()
        state = JobState.open(self.root, self.spec, resume=self.resume, build_digest=build_digest,
                              allow_build_change=self.allow_build_change)  # fmt: skip
        try:
            ledger = Ledger(self.root, state, units, chunk, self.reporter, self.progress)
            runs, kept = ledger.resume()
            result = JobResult(directory=self.root, manifest_path=self.root / MANIFEST, units=len(units))
            result.units_resumed = ledger.units_done
            player_info: dict[str, Any] = state.recorded_player()  # a run with nothing left renders nothing
            if runs:
                player_info = self._render(runs, ledger, result, state)
            result.elapsed_s = time.monotonic() - started
            result.step_s, result.write_s, result.encode_s = ledger.step_s, ledger.write_s, ledger.encode_s
            result.frames_written = ledger.frames_done - kept
            if result.cancelled:
                return result
            result.frames = ledger.frames_committed()
            render = self.family.render_section(self.spec)
            write_annotations(self.root, self.spec, render, units, ledger.committed)
            manifest = build_manifest(
                self.spec, self.family, render, self.root, units, ledger.committed, result, player_info,
                build_digest=build_digest,
            )
            if self.spec.output.video is not None:
                from unirender.jobs.episode_videos import finish_videos

                manifest["videos"] = finish_videos(
                    self.root, self.spec.output.video, units, ledger.committed, chunk
                )
            write_manifest(self.root, manifest)
            return result
        finally:
            state.close()

    def _build_digest(self) -> str | None:
        """The digest of the bytes the job's build names (docs/builds.md): the dataset is pinned to it. A path
        that is not here, for a backend whose players start elsewhere, is not pinned (logged)."""
        from unirender.builds import BuildError
        from unirender.builds.resolve import named_build_digest

        environment = self.spec.environment
        try:
            return named_build_digest(environment.build_name, environment.platform)
        except (BuildError, OSError) as exc:
            if self.backend is None and self.player_factory is None:
                raise JobError(f"environment: {exc}") from exc
            log.warning("the job's build is not pinned to a digest here (%s); its players start elsewhere", exc)
            return None

    def _render(self, runs, ledger: Ledger, result: JobResult, state: JobState) -> dict[str, Any]:
        resolution = None if (self.backend or self.player_factory) else resolve_platform(self.spec)
        player_info: dict[str, Any] = {}
        try:
            software = bool(getattr(getattr(resolution, "device", None), "software", True))
            if resolution is not None:
                result.platform = resolution.platform.name
                result.device = getattr(resolution.device, "name", None)
                player_info.update(platform=result.platform, device=result.device, software=software)
            n = result.workers = worker_count(runs, self.requested_workers, software)
            planner = TaskPlanner(self.spec.output.frames_per_shard, n)
            planner.plan(runs, ledger.unit_total)
            executor = Executor(
                self.spec,
                self.family,
                self.root,
                ledger,
                planner,
                self.reporter,
                self.cancel,
                self._open_simulator(),
                _pinned_kwargs(self.spec, resolution),
            )
            executor.player_info.update(player_info)
            executor.on_player = state.record_player
            result.players = executor.player_stats
            self.reporter.start(total=ledger.frames_total, done=ledger.frames_done, workers=n)  # grows with grids
            try:
                # Only players this process launches itself inherit the setting (not a backend's).
                with _software_threads(n, software and resolution is not None):
                    executor.run(n)
            except JobError:
                result.failed = True
                result.errors.append(executor.failure_report)
                raise
            finally:
                result.platform = result.platform or executor.player_info.get("platform")
                result.device = result.device or executor.player_info.get("device")
        finally:
            self.reporter.stop()
            if resolution is not None:
                resolution.release()
        if self.cancel.is_set() and ledger.kept()[1]:
            result.cancelled = True
        return executor.player_info


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
    allow_build_change: bool = False,
) -> JobResult:
    """Run a job spec (a ``JobSpec``, a mapping, or a YAML/JSON/TOML path) into a dataset directory.

    ``output_dir`` overrides ``output.directory``; ``workers`` overrides ``workers``; ``resume=False``
    discards what an earlier run left there. ``progress(dict)`` is called after every frame; setting
    ``cancel`` stops the job after the current frames (the result has ``cancelled=True``; run it again to
    resume). Raises ``SpecError`` before anything starts, ``JobError`` when an episode fails for good, and
    ``BuildChangedError`` when a resume finds other build bytes than the dataset was started with (unless
    ``allow_build_change``).
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
        allow_build_change=allow_build_change,
    ).run()
