"""The AI2-THOR family's jobs: episodes as work units, how one unit drives a Controller (or a session of one),
and :data:`AI2THOR_JOBS`, the family's entry in the jobs registry (:mod:`unirender.jobs.families`).

A unit is one repeat of one episode. Running it always starts with ``reset`` (and re-adding the third-party
cameras), so a unit's frames do not depend on which player ran it or what it ran before: a redone unit, on
any worker, yields the same frames. That is what makes resume and crash recovery exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unirender.jobs.units import EpisodeFailed, limit_end
from unirender.simulator import AI2THOR
from unirender.spec.models import EpisodeSpec, GridGenerator, JobSpec, PoseSpec, RandomGenerator, RenderSpec

__all__ = ["AI2THOR_JOBS", "EpisodeFailed", "WorkUnit", "expand_units", "run_frames", "run_unit"]


@dataclass(frozen=True)
class WorkUnit:
    id: str
    episode_index: int
    repeat: int
    episode: EpisodeSpec

    @property
    def known_frame_count(self) -> int | None:
        return self.episode.known_frame_count

    @property
    def sequential(self) -> bool:
        """Whether its frames must come from one player in order (each action depends on the ones before)."""
        return self.episode.actions is not None


def expand_units(spec: JobSpec) -> list[WorkUnit]:
    units = []
    for i, episode in enumerate(spec.episodes):
        label = re.sub(r"[^A-Za-z0-9_\-]", "-", episode.name or episode.scene)[:40]
        for r in range(episode.repeat):
            units.append(WorkUnit(f"e{i:04d}-{label}-r{r:03d}", i, r, episode))
    return units


def _step(controller, action: dict[str, Any]):
    return controller.step(dict(action))


def _success(event) -> bool:
    return bool(event.peek_metadata("lastActionSuccess", True))  # a step key: read without decoding the rest


def reachable_positions(controller) -> list[dict[str, float]]:
    event = _step(controller, {"action": "GetReachablePositions"})
    positions = event.metadata.get("actionReturn") if _success(event) else None
    if not positions:
        raise EpisodeFailed(
            f"GetReachablePositions returned no positions in {event.metadata.get('sceneName')!r}: "
            f"{event.metadata.get('errorMessage') or 'empty list'}"
        )
    return [{"x": float(p["x"]), "y": float(p["y"]), "z": float(p["z"])} for p in positions]


def generated_poses(generator: GridGenerator | RandomGenerator, positions, repeat: int) -> list[PoseSpec]:
    if isinstance(generator, GridGenerator):
        chosen = positions[:: generator.every][: generator.max_positions]
        return [
            PoseSpec(position=p, rotation={"y": rot}, horizon=h)
            for p in chosen
            for rot in generator.rotations
            for h in generator.horizons
        ]
    rng = np.random.default_rng(generator.seed + repeat)
    poses = []
    for _ in range(generator.count):
        p = positions[int(rng.integers(len(positions)))]
        if generator.rotations:
            rot = float(generator.rotations[int(rng.integers(len(generator.rotations)))])
        else:
            rot = round(float(rng.uniform(0.0, 360.0)), 3)
        h = float(generator.horizons[int(rng.integers(len(generator.horizons)))])
        poses.append(PoseSpec(position=p, rotation={"y": rot}, horizon=h))
    return poses


def run_unit(
    controller, unit: WorkUnit, render: RenderSpec, *, on_total: Callable[[int], None] | None = None
) -> Iterator[Any]:
    """Drive ``controller`` through the whole of ``unit``; yields the Event of every frame to record, in order.

    ``on_total(n)`` is called once the unit's frame count is known (after the reachable positions for a grid).
    """

    def total(n: int) -> None:
        if on_total is not None:
            on_total(n)

    for _index, event in run_frames(controller, unit, render, on_total=total):
        yield event


def run_frames(
    controller,
    unit: WorkUnit,
    render: RenderSpec,
    *,
    start: int = 0,
    end: int | None = None,
    on_total: Callable[[int], int | None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Drive ``controller`` through frames ``start .. end-1`` of ``unit``; yields ``(frame index, Event)``.

    ``on_total(n)`` is called once the unit's frame count is known (after the reachable positions for a grid);
    it may return a smaller ``end`` (the runner hands the rest of a large episode to other players).

    Starting inside the unit gives the frames an uninterrupted run gives: an action sequence replays the
    actions before ``start`` without recording them (each action depends on the state the previous ones left);
    poses are absolute, so the player is teleported to pose ``start - 1`` (unrecorded) and flow, measured
    against the previous step's frame, comes out the same.
    """
    episode = unit.episode
    event = controller.reset(episode.scene)
    for camera in render.cameras:
        event = _step(controller, camera.add_action())
        if not _success(event):
            raise EpisodeFailed(f"camera {camera.name!r}: {event.metadata.get('errorMessage')}")
    if episode.actions is not None:
        actions = episode.action_dicts()
        end = limit_end(len(actions) + 1, end, on_total)
        if start == 0 and end > 0:
            yield 0, event
        for j, action in enumerate(actions[: max(0, end - 1)]):  # frame j+1 is the one after action j
            event = _step(controller, action)
            if j + 1 >= start:
                yield j + 1, event
        return
    if episode.poses is not None:
        poses = episode.poses
    else:
        poses = generated_poses(episode.generator, reachable_positions(controller), unit.repeat)
    end = limit_end(len(poses), end, on_total)
    first = start - 1 if start > 0 else start  # unrecorded: the frame flow is measured against
    for n in range(first, end):
        pose = poses[n]
        event = _step(controller, pose.teleport_action())
        if not _success(event):
            raise EpisodeFailed(
                f"{unit.id}: pose {n} ({pose.teleport_action()}) failed: {event.metadata.get('errorMessage')}"
            )
        if n >= start:
            yield n, event


def modality_of(key: str) -> str:
    """Which spec modality an ``Event.frames()`` key belongs to (``depth_frame``, ``third_party_depth_frames.0``
    -> ``depth``); colour images are everything that names no other modality."""
    lowered = key.lower()
    for word, modality in (
        ("depth", "depth"),
        ("instance", "instance_segmentation"),
        ("semantic", "semantic_segmentation"),
        ("class", "semantic_segmentation"),
        ("normal", "normals"),
        ("flow", "flow"),
    ):
        if word in lowered:
            return modality
    return "rgb"


def video_stream(key: str) -> tuple[str, str]:
    """``(camera, modality)`` of a frame key, naming its video: ``frame`` -> ``("agent", "rgb")``,
    ``third_party_depth_frames.corner`` -> ``("corner", "depth")``."""
    camera = key.partition(".")[2] if key.startswith("third_party_") else "agent"
    return camera, modality_of(key)


def frames_to_record(event, render: RenderSpec) -> dict[str, np.ndarray]:
    """The event's decoded images that the spec asks for. Keys are ``Event.frames()`` names; a third-party
    stack ``(N, H, W, ...)`` is split into one image per camera, keyed ``<name>.<camera name>`` in camera
    order (so each camera image is its own PNG; :func:`group_camera_frames` undoes it)."""
    wanted = set(render.modalities)
    names = [c.name for c in render.cameras]
    out: dict[str, np.ndarray] = {}
    for key, array in event.frames().items():
        if modality_of(key) not in wanted:
            continue
        if key.startswith("third_party_"):
            for i, image in enumerate(array):
                out[f"{key}.{names[i] if i < len(names) else i}"] = image
        else:
            out[key] = array
    return out


def group_camera_frames(frames: dict[str, np.ndarray]) -> dict[str, np.ndarray | list[np.ndarray]]:
    """Inverse of the split in :func:`frames_to_record`: per-camera keys back into lists in camera order."""
    out: dict[str, np.ndarray | list[np.ndarray]] = {}
    for key, array in frames.items():
        base, dot, _camera = key.partition(".")
        if dot and base.startswith("third_party_"):
            out.setdefault(base, []).append(array)
        else:
            out[key] = array
    return out


def missing_modalities(event, render: RenderSpec) -> list[str]:
    """Requested images the player did not send (a build that ignores a render flag): ``["normals",
    "depth (cameras)"]``. Checked on a unit's first frame, so a dataset never silently lacks a modality."""
    frames = event.frames()
    agent = {modality_of(k) for k in frames if not k.startswith("third_party_")}
    cameras = {modality_of(k): len(v) for k, v in frames.items() if k.startswith("third_party_")}
    missing = [m for m in render.modalities if m not in agent]
    if render.cameras:
        missing += [f"{m} (cameras)" for m in render.modalities if cameras.get(m, 0) < len(render.cameras)]
    return missing


class PlayerSeat:
    """A worker's player, started once and kept for every unit it runs (each unit starts with a reset)."""

    def __init__(self, open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]):
        self.simulator = open_simulator(dict(kwargs))

    def stop(self) -> None:
        simulator, self.simulator = self.simulator, None
        if simulator is not None:
            simulator.stop()


class AI2THORJobs:
    """The AI2-THOR family in the jobs registry: its units, seat, frames and dataset frames (``Event``)."""

    name = AI2THOR
    manifest_protocol = None  # AI2-THOR manifests have never had a "protocol" key
    frame_parts = None  # the writer stores the frames the render section asks for (write_behind)

    units = staticmethod(expand_units)
    video_stream = staticmethod(video_stream)  # a frame key's (camera, modality): its video (jobs.episode_videos)

    @staticmethod
    def render_section(spec: JobSpec) -> RenderSpec:
        return spec.render

    allow_flat_cameras_key = "render.allow_flat_cameras"  # named by the error a flat first frame fails a job with

    @staticmethod
    def allows_flat_cameras(spec: JobSpec) -> bool:
        return spec.render.allow_flat_cameras

    @staticmethod
    def seat(open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]) -> PlayerSeat:
        return PlayerSeat(open_simulator, kwargs)

    @staticmethod
    def frames(seat: PlayerSeat, unit: WorkUnit, spec: JobSpec, **kwargs: Any) -> Iterator[tuple[int, Any]]:
        return run_frames(seat.simulator, unit, spec.render, **kwargs)

    @staticmethod
    def check_first_frame(event, spec: JobSpec) -> None:
        missing = missing_modalities(event, spec.render)
        if missing:
            raise EpisodeFailed(
                f"the player did not produce {', '.join(missing)} (asked for through Initialize "
                f"{sorted(k for k, v in spec.render.initialize_params().items() if v)})"
            )

    @staticmethod
    def player_version(seat: PlayerSeat, spec: JobSpec, event) -> str | None:
        if spec.environment.is_builtin:
            from unirender import __version__

            return f"unirender-player {__version__}"
        # Unity builds do not report a version; their folder is named thor-<Platform>-<commit>
        return event.metadata.get("buildVersion") or Path(spec.environment.executable).resolve().parent.name

    @staticmethod
    def dataset_frame(metadata: dict[str, Any], frames: dict[str, np.ndarray]):
        from unirender.protocol.event import Event

        return Event.from_frames(metadata, group_camera_frames(frames))

    @staticmethod
    def describe_plan(spec: JobSpec, plan) -> str:
        frames = f"{plan.frames}" + (
            f" + {plan.grid_units} grid episode(s) sized by their scenes' reachable positions"
            if plan.grid_units
            else ""
        )
        render = spec.render
        modalities = ", ".join(render.modalities)
        cameras = ", ".join(c.name for c in render.cameras) or "none"
        return "\n".join(
            [
                f"job          {spec.name} (spec hash {spec.content_hash()[:12]})",
                f"executable   {spec.environment.executable} over {spec.environment.transport}",
                f"platform     {plan.platform or '?'} on {plan.device or '?'}"
                + (" (software)" if plan.software else ""),
                f"players      {plan.workers}",
                f"episodes     {len(spec.episodes)} ({plan.units} with repeats)",
                f"frames       {frames}",
                f"size         {spec.environment.width}x{spec.environment.height}, modalities: {modalities}; "
                f"cameras: {cameras}",
                f"output       {spec.output.directory} ({spec.output.format}; committed every "
                f"{spec.output.frames_per_shard} frames; metadata: {spec.output.metadata}"
                + (f"; annotations: {', '.join(render.annotations)}" if render.annotations else "")
                + ")",
            ]
        )


AI2THOR_JOBS = AI2THORJobs()
