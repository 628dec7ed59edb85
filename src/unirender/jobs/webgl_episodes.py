"""WebGL episodes as work units, and how one unit drives a build (``environment.protocol: webgl``).

A unit is one repeat of one episode, on a freshly booted page (a fresh ``WebGLController``: its browser, its
virtual clock from 0): the frame after boot, then one step per listed action. A fresh page per unit is what makes
a unit's frames the same on any worker, after a crash and on a resume (a reload would do for most builds, but a
build's own state may outlive it in the browser's storage); a redone chunk steps through the actions before it
unrecorded and yields byte-identical frames.

A frame is the canvas (frame key ``rgb``) and, in its metadata, the step, the action taken into it (None for the
boot's frame), and what the game emitted through ``window.unirender.emit`` during it: ``messages``, their summed
``reward``, ``done`` and their mappings merged (``emitted``). :data:`WEBGL_JOBS` is the family's entry in the jobs
registry (:mod:`unirender.jobs.families`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unirender.errors import UnirenderError
from unirender.jobs.units import EpisodeFailed, limit_end
from unirender.protocol.webgl_event import FRAME_KEY
from unirender.simulator import WEBGL
from unirender.spec.models import RenderSpec
from unirender.spec.webgl import WebGLEpisodeSpec, WebGLJobSpec


@dataclass(frozen=True)
class WebGLUnit:
    id: str
    episode_index: int
    repeat: int
    episode: WebGLEpisodeSpec

    sequential = True  # each step depends on the ones before: one page per unit

    @property
    def known_frame_count(self) -> int:
        return self.episode.known_frame_count


def expand_webgl_units(spec: WebGLJobSpec) -> list[WebGLUnit]:
    units = []
    for i, episode in enumerate(spec.episodes):
        label = re.sub(r"[^A-Za-z0-9_\-]", "-", episode.scene)[:40]
        for r in range(episode.repeat):
            units.append(WebGLUnit(f"e{i:04d}-{label}-r{r:03d}", i, r, episode))
    return units


@dataclass
class WebGLFrame:
    """One recorded frame: ``metadata`` (``step``, ``action``, ``messages``, ``reward``, ``done``, ``emitted``)
    and the canvas, ``frame`` (H, W, 3) uint8; ``frames()`` -> ``{"rgb": frame}``. What jobs write and
    ``load_dataset`` gives back."""

    metadata: dict[str, Any]
    images: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def frame(self) -> np.ndarray | None:
        return self.images.get(FRAME_KEY)

    def frames(self) -> dict[str, np.ndarray]:
        return dict(self.images)


def frame_of(step: int, action: str | None, event) -> WebGLFrame:
    metadata = {
        "step": step,
        "action": action,
        "messages": list(event.messages),
        "reward": float(event.reward),
        "done": bool(event.done),
        "emitted": dict(event.metadata),
    }
    return WebGLFrame(metadata, {FRAME_KEY: np.asarray(event.frame)})


def frame_parts(frame: WebGLFrame, output) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from unirender.jobs.chunks import select_metadata

    return frame.frames(), select_metadata(dict(frame.metadata), output.metadata)


class WebGLSeat:
    """A worker's place for pages: ``open()`` boots a fresh build for a unit (stopping the previous one) with
    ``open_simulator(kwargs)``; ``stop()`` stops it. ``renderer``: the last page's WebGL renderer string."""

    def __init__(self, open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]):
        self.kwargs = {**kwargs, "protocol": WEBGL}  # a backend picks the family by it
        self.open_simulator = open_simulator
        self.simulator = None

    def open(self):
        self.stop()
        self.simulator = self.open_simulator(dict(self.kwargs))
        return self.simulator

    def stop(self) -> None:
        simulator, self.simulator = self.simulator, None
        if simulator is not None:
            simulator.stop()


def run_webgl_frames(
    seat: WebGLSeat,
    unit: WebGLUnit,
    spec: WebGLJobSpec,
    *,
    start: int = 0,
    end: int | None = None,
    on_total: Callable[[int], int | None] | None = None,
) -> Iterator[tuple[int, WebGLFrame]]:
    """Frames ``start .. end-1`` of ``unit`` on a fresh page: ``(frame index, WebGLFrame)``. Frames before
    ``start`` are stepped through but not recorded."""
    game = seat.open()
    event = game.last_event  # a page is booted and reset once when it starts
    actions = unit.episode.actions
    end = limit_end(unit.known_frame_count, end, on_total)
    for step in range(end):
        if step >= start:
            yield step, frame_of(step, actions[step - 1] if step else None, event)
        if step + 1 < end:
            try:
                event = game.step(actions[step])
            except ValueError as exc:  # an action the page refuses: the spec's problem, not a crash
                if isinstance(exc, UnirenderError):
                    raise
                raise EpisodeFailed(f"{unit.id}: step {step}: {exc}") from exc


class WebGLJobs:
    """The WebGL family in the jobs registry: a fresh page per unit, frames as :class:`WebGLFrame`."""

    name = WEBGL
    manifest_protocol = WEBGL
    frame_parts = staticmethod(frame_parts)
    units = staticmethod(expand_webgl_units)
    allow_flat_cameras_key = "record.allow_flat_cameras"

    @staticmethod
    def video_stream(key: str) -> tuple[str, str]:
        """The canvas is one camera, in colour: its video is ``canvas.rgb``."""
        return "canvas", "rgb"

    @staticmethod
    def render_section(spec: WebGLJobSpec) -> RenderSpec:
        return RenderSpec()

    @staticmethod
    def allows_flat_cameras(spec: WebGLJobSpec) -> bool:
        return spec.record.allow_flat_cameras

    @staticmethod
    def seat(open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]) -> WebGLSeat:
        return WebGLSeat(open_simulator, kwargs)

    @staticmethod
    def frames(seat: WebGLSeat, unit: WebGLUnit, spec: WebGLJobSpec, **kwargs: Any):
        return run_webgl_frames(seat, unit, spec, **kwargs)

    @staticmethod
    def check_first_frame(frame: WebGLFrame, spec: WebGLJobSpec) -> None:
        return None

    @staticmethod
    def player_version(seat: WebGLSeat, spec: WebGLJobSpec, frame: WebGLFrame) -> str | None:
        simulator = seat.simulator
        renderer = getattr(simulator, "renderer", None) if simulator is not None else None
        return f"webgl ({renderer})" if renderer else None

    @staticmethod
    def dataset_frame(metadata: dict[str, Any], frames: dict[str, np.ndarray]) -> WebGLFrame:
        return WebGLFrame(metadata, frames)

    @staticmethod
    def describe_plan(spec: WebGLJobSpec, plan) -> str:
        env = spec.environment
        return "\n".join(
            [
                f"job          {spec.name} (spec hash {spec.content_hash()[:12]})",
                f"build        {env.build or env.executable} (Unity WebGL) in headless Chromium",
                f"platform     {plan.platform or '?'} on {plan.device or '?'}"
                + (" (software)" if plan.software else ""),
                f"players      {plan.workers} (a freshly booted page per episode repeat)",
                f"episodes     {len(spec.episodes)} ({plan.units} with repeats)",
                f"frames       {plan.frames} (the boot's frame + one per action)",
                f"size         {env.width}x{env.height}; {env.frames_per_step} frame(s) per step at {env.fps:g} fps; "
                f"actions: {', '.join(env.action_names)}",
                f"output       {spec.output.directory} ({spec.output.format}; committed every "
                f"{spec.output.frames_per_shard} frames)",
            ]
        )


WEBGL_JOBS = WebGLJobs()
