"""Episodes as work units, and how one unit drives a Controller.

A unit is one repeat of one episode. Running it always starts with ``reset`` (and re-adding the third-party
cameras), so a unit's frames do not depend on which player ran it or what it ran before: a redone unit, on
any worker, yields the same frames. That is what makes resume and crash recovery exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from unirender.errors import UnirenderError
from unirender.spec.models import EpisodeSpec, GridGenerator, JobSpec, PoseSpec, RandomGenerator, RenderSpec


class EpisodeFailed(UnirenderError):
    """The episode cannot be rendered as specified (a pose the player refuses, no reachable positions, ...).

    Not a crash: redoing it would fail the same way, so the job stops with this message."""


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
    from unirender.spec.mlagents import MLAgentsJobSpec

    if isinstance(spec, MLAgentsJobSpec):
        from unirender.jobs.mlagents_episodes import expand_mlagents_units

        return expand_mlagents_units(spec)  # type: ignore[return-value]
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
        end = _limit(len(actions) + 1, end, on_total)
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
    end = _limit(len(poses), end, on_total)
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


def _limit(total: int, end: int | None, on_total: Callable[[int], int | None] | None) -> int:
    limits = [total] + ([end] if end is not None else [])
    if on_total is not None:
        asked = on_total(total)
        if asked is not None:
            limits.append(asked)
    return min(limits)


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
