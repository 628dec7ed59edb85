"""ML-Agents episodes as work units, and how one unit drives a game (``environment.protocol: mlagents``).

A unit is one repeat of one episode. It always runs on a freshly launched game: the handshake seeds the game
(Unity's ``Random.InitState``) with the unit's seed and carries its environment parameters (samplers seeded from
the same seed), then a reset and ``steps`` steps. A Unity game's state after a reset depends on every episode it
played before, so a fresh game per unit is what makes a unit's frames the same on any worker, after a crash and
on a resume. The action policy draws each step's actions from ``(policy seed, unit seed, step)``, so a redone
chunk replays the steps before it (unrecorded) and yields byte-identical frames.

A frame (the one after the reset, then one per step) holds per recorded behavior and per agent: the camera
sensors' images (frame keys ``<sensor>.<i>``, ``i`` the agent's position in the frame's ``agents`` list; with
several behaviors ``<behavior>.<sensor>.<i>``) and, in its metadata, the agent's id, decision/terminal flags,
rewards, vector observations and the actions it is sent after this frame.

The game is a :class:`unirender.simulator.Simulator` (``cluster.simulators.launch``, or a session of the job's
backend, local or Ray): its first event is the reset's, and its ``describe()`` gives the behaviors' action spaces
and sensors. :data:`MLAGENTS_JOBS` is the family's entry in the jobs registry (:mod:`unirender.jobs.families`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unirender.errors import UnirenderError
from unirender.jobs.units import EpisodeFailed, limit_end
from unirender.simulator import MLAGENTS, Description
from unirender.spec.errors import did_you_mean
from unirender.spec.mlagents import (
    MLAgentsEpisodeSpec,
    MLAgentsJobSpec,
    RandomPolicy,
    RecordSpec,
    ScriptedPolicy,
    ZerosPolicy,
    resolve_parameters,
)
from unirender.spec.models import RenderSpec


@dataclass(frozen=True)
class MLAgentsUnit:
    id: str
    episode_index: int
    repeat: int
    episode: MLAgentsEpisodeSpec

    sequential = True  # each step depends on the ones before: one game per unit

    @property
    def known_frame_count(self) -> int:
        return self.episode.known_frame_count

    @property
    def seed(self) -> int:
        return self.episode.seed + self.repeat


def expand_mlagents_units(spec: MLAgentsJobSpec) -> list[MLAgentsUnit]:
    units = []
    for i, episode in enumerate(spec.episodes):
        label = re.sub(r"[^A-Za-z0-9_\-]", "-", episode.scene)[:40]
        for r in range(episode.repeat):
            units.append(MLAgentsUnit(f"e{i:04d}-{label}-r{r:03d}", i, r, episode))
    return units


@dataclass
class MLAgentsFrame:
    """One recorded frame: ``metadata`` (``step``, ``behaviors``: per behavior its ``agents``) and the camera
    images, ``frames()`` -> ``{key: uint8 (H, W, C)}``. What jobs write and ``load_dataset`` gives back."""

    metadata: dict[str, Any]
    images: dict[str, np.ndarray] = field(default_factory=dict)

    def frames(self) -> dict[str, np.ndarray]:
        return dict(self.images)


def frame_parts(frame: MLAgentsFrame, output) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What the dataset writer stores of a frame: its images, and its metadata as ``output.metadata`` keeps."""
    from unirender.jobs.chunks import select_metadata

    return frame.frames(), select_metadata(dict(frame.metadata), output.metadata)


class MLAgentsSeat:
    """A worker's place for games: ``open(seed, parameters)`` launches a fresh game for a unit (stopping the
    previous one) with ``open_simulator(kwargs)``; ``stop()`` stops it. ``version``: the last game's ML-Agents
    package version."""

    def __init__(self, open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]):
        self.kwargs = {**kwargs, "protocol": MLAGENTS}  # a backend picks the family by it
        self.open_simulator = open_simulator
        self.simulator = None
        self.version: str | None = None

    def open(self, seed: int, parameters: dict[str, Any]):
        self.stop()
        self.simulator = self.open_simulator({**self.kwargs, "seed": seed, "environment_parameters": parameters})
        return self.simulator

    def stop(self) -> None:
        simulator, self.simulator = self.simulator, None
        if simulator is not None:
            simulator.stop()


@dataclass(frozen=True)
class _Observation:
    name: str
    is_visual: bool


@dataclass(frozen=True)
class BehaviorView:
    """What the episode driver reads of a behavior (as an ML-Agents ``BehaviorSpec`` has it), made from a
    :class:`~unirender.simulator.Description`: its action spec and its sensors in observation order."""

    action_spec: Any
    observation_specs: tuple[_Observation, ...]

    @property
    def sensor_names(self) -> list[str]:
        return [o.name for o in self.observation_specs]


def behavior_views(description: Description) -> dict[str, BehaviorView]:
    """``{behavior: BehaviorView}`` from a game's description (observations listed in the game's order)."""
    from unirender.protocol.mlagents.steps import ActionSpec

    sensors: dict[str, list[_Observation]] = {name: [] for name in description.actions.behaviors}
    for obs in description.observations:
        if obs.behavior is not None:
            sensors.setdefault(obs.behavior, []).append(_Observation(obs.key[len(obs.behavior) + 1 :], obs.camera))
    return {
        name: BehaviorView(ActionSpec(space.continuous, tuple(space.discrete)), tuple(sensors[name]))
        for name, space in description.actions.behaviors.items()
    }


def _rows(values, n: int, width: int, dtype) -> np.ndarray:
    """A scripted action: one row for every agent, or rows per agent (the last row repeated past the end)."""
    if not values:
        return np.zeros((n, width), dtype)
    rows = values if isinstance(values[0], list) else [values]
    rows = [rows[min(i, len(rows) - 1)] for i in range(n)]
    return np.asarray(rows, dtype).reshape(n, -1)


def policy_actions(episode: MLAgentsEpisodeSpec, unit_seed: int, step: int, event, specs) -> dict[str, Any]:
    """``{behavior: ActionTuple}`` for the decision agents of ``event`` at ``step`` (0: the action after the
    reset's frame). Deterministic in (policy, unit seed, step): a replay draws the same actions."""
    from unirender.protocol.mlagents.steps import ActionTuple

    policy = episode.policy
    rng = np.random.default_rng([policy.seed, unit_seed, step]) if isinstance(policy, RandomPolicy) else None
    out = {}
    for name in sorted(event.decision_steps):
        n = len(event.decision_steps[name])
        action_spec = specs[name].action_spec
        if isinstance(policy, ZerosPolicy) or n == 0:
            out[name] = action_spec.empty(n)
        elif rng is not None:
            out[name] = action_spec.random(n, rng, event.decision_steps[name].action_mask)
        else:
            assert isinstance(policy, ScriptedPolicy)
            row = policy.actions[step]
            continuous = _rows(row.continuous, n, action_spec.continuous_size, np.float32)
            discrete = _rows(row.discrete, n, action_spec.discrete_size, np.int32)
            for kind, array, width in (
                ("continuous", continuous, action_spec.continuous_size),
                ("discrete", discrete, action_spec.discrete_size),
            ):
                if array.shape[1] != width:
                    raise EpisodeFailed(
                        f"policy.actions.{step}.{kind}: {array.shape[1]} values, behavior {name!r} takes {width}"
                    )
            out[name] = ActionTuple(continuous, discrete)
    return out


def check_record(record: RecordSpec, specs) -> list[str]:
    """The behaviors to record, after checking the recorded names against what the game declared."""
    names = sorted(specs)
    for behavior in record.behaviors or []:
        if behavior not in specs:
            guess = did_you_mean(behavior, names)
            hint = f"did you mean {guess!r}? " if guess else ""
            raise EpisodeFailed(
                f"record.behaviors: the game has no behavior {behavior!r}; {hint}(it has {names})"
            )
    chosen = [n for n in names if record.behaviors is None or n in record.behaviors]
    sensors = sorted({s for n in chosen for s in specs[n].sensor_names})
    for sensor in record.sensors or []:
        if sensor not in sensors:
            guess = did_you_mean(sensor, sensors)
            hint = f"did you mean {guess!r}? " if guess else ""
            raise EpisodeFailed(
                f"record.sensors: no behavior has a sensor {sensor!r}; {hint}(sensors: {sensors})"
            )
    return chosen


def _floats(array) -> list[float]:
    return [float(x) for x in np.asarray(array).reshape(-1)]


def frame_of(step: int, event, specs, behaviors: list[str], sensors, actions: dict[str, Any] | None):
    """The record of one event: per behavior its agents (decision agents first, in decision order, then agents
    only in the terminal steps), their camera images under ``<sensor>.<i>`` and the rest in the metadata."""
    metadata: dict[str, Any] = {"step": step, "behaviors": {}}
    images: dict[str, np.ndarray] = {}
    for name in behaviors:
        decision, terminal = event.decision_steps[name], event.terminal_steps[name]
        spec = specs[name]
        wanted = [
            (i, o) for i, o in enumerate(spec.observation_specs) if sensors is None or o.name in sensors
        ]
        terminal_index = {int(a): k for k, a in enumerate(terminal.agent_id)}
        agents = []
        rows = [(decision, k) for k in range(len(decision))]
        decided = {int(a) for a in decision.agent_id}
        rows += [(terminal, k) for k, a in enumerate(terminal.agent_id) if int(a) not in decided]
        for slot, (steps, k) in enumerate(rows):
            agent_id = int(steps.agent_id[k])
            in_decision = steps is decision
            t = terminal_index.get(agent_id)
            entry: dict[str, Any] = {
                "id": agent_id,
                "decision": in_decision,
                "terminal": t is not None,
                "reward": float(steps.reward[k]),
            }
            if t is not None:
                entry["terminal_reward"] = float(terminal.reward[t])
                entry["interrupted"] = bool(terminal.interrupted[t])
            observations = {}
            for i, obs_spec in wanted:
                if obs_spec.is_visual:
                    key = (
                        f"{obs_spec.name}.{slot}" if len(behaviors) == 1 else f"{name}.{obs_spec.name}.{slot}"
                    )
                    images[key] = steps.frames[obs_spec.name][k]
                else:
                    observations[obs_spec.name] = _floats(steps.obs[i][k])
            if observations:
                entry["observations"] = observations
            if in_decision and actions is not None and name in actions:
                taken = actions[name]
                entry["action"] = {
                    "continuous": _floats(taken.continuous[k]) if taken.continuous is not None else [],
                    "discrete": [int(x) for x in np.asarray(taken.discrete[k]).reshape(-1)]
                    if taken.discrete is not None
                    else [],
                }
            agents.append(entry)
        metadata["behaviors"][name] = {"agents": agents}
    return MLAgentsFrame(metadata, images)


def run_mlagents_frames(
    seat: MLAgentsSeat,
    unit: MLAgentsUnit,
    spec: MLAgentsJobSpec,
    *,
    start: int = 0,
    end: int | None = None,
    on_total: Callable[[int], int | None] | None = None,
) -> Iterator[tuple[int, MLAgentsFrame]]:
    """Frames ``start .. end-1`` of ``unit`` on a fresh game: ``(frame index, MLAgentsFrame)``. Frames before
    ``start`` are stepped through (their actions are a function of the step) but not recorded."""
    episode = unit.episode
    parameters = {**spec.environment.environment_parameters, **episode.environment_parameters}
    game = seat.open(unit.seed, resolve_parameters(parameters, unit.seed))
    event = game.last_event  # a game is reset once when it starts
    description = game.describe()
    specs = behavior_views(description)
    seat.version = description.build_version
    behaviors = check_record(spec.record, specs)
    sensors = set(spec.record.sensors) if spec.record.sensors else None
    end = limit_end(episode.known_frame_count, end, on_total)
    for step in range(end):
        actions = policy_actions(episode, unit.seed, step, event, specs) if step < episode.steps else None
        if step >= start:
            yield step, frame_of(step, event, specs, behaviors, sensors, actions)
        if step + 1 < end:
            try:
                event = game.step(actions)
            except ValueError as exc:  # actions the game's spec refuses: the spec's problem, not a crash
                if isinstance(exc, UnirenderError):
                    raise
                raise EpisodeFailed(f"{unit.id}: step {step}: {exc}") from exc


class MLAgentsJobs:
    """The ML-Agents family in the jobs registry: a fresh seeded game per unit, frames as :class:`MLAgentsFrame`."""

    name = MLAGENTS
    manifest_protocol = MLAGENTS  # an ML-Agents manifest says so ("protocol"); dataset.py reads it back
    frame_parts = staticmethod(frame_parts)

    units = staticmethod(expand_mlagents_units)

    @staticmethod
    def video_stream(key: str) -> tuple[str, str]:
        """A camera sensor's image of one agent (``<sensor>.<i>``) is a camera of its own, in colour."""
        return key, "rgb"

    @staticmethod
    def render_section(spec: MLAgentsJobSpec) -> RenderSpec:
        """What the shared writer, annotations and manifest read: colour images, no cameras, no annotations."""
        return RenderSpec()

    allow_flat_cameras_key = "record.allow_flat_cameras"  # named by the error a flat first frame fails a job with

    @staticmethod
    def allows_flat_cameras(spec: MLAgentsJobSpec) -> bool:
        return spec.record.allow_flat_cameras

    @staticmethod
    def seat(open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]) -> MLAgentsSeat:
        return MLAgentsSeat(open_simulator, kwargs)

    @staticmethod
    def frames(seat: MLAgentsSeat, unit: MLAgentsUnit, spec: MLAgentsJobSpec, **kwargs: Any):
        return run_mlagents_frames(seat, unit, spec, **kwargs)

    @staticmethod
    def check_first_frame(frame: MLAgentsFrame, spec: MLAgentsJobSpec) -> None:
        return None  # the recorded sensors were checked against the game's (check_record)

    @staticmethod
    def player_version(seat: MLAgentsSeat, spec: MLAgentsJobSpec, frame: MLAgentsFrame) -> str | None:
        package = f"com.unity.ml-agents {seat.version}" if seat.version else None
        if spec.environment.is_builtin:
            from unirender import __version__

            return f"unirender-player {__version__} ({package})"
        return package

    @staticmethod
    def dataset_frame(metadata: dict[str, Any], frames: dict[str, np.ndarray]) -> MLAgentsFrame:
        return MLAgentsFrame(metadata, frames)

    @staticmethod
    def describe_plan(spec: MLAgentsJobSpec, plan) -> str:
        env = spec.environment
        return "\n".join(
            [
                f"job          {spec.name} (spec hash {spec.content_hash()[:12]})",
                f"executable   {env.executable} over ML-Agents (gRPC), time scale {env.time_scale:g}",
                f"platform     {plan.platform or '?'} on {plan.device or '?'}"
                + (" (software)" if plan.software else ""),
                f"players      {plan.workers} (a fresh game per episode repeat)",
                f"episodes     {len(spec.episodes)} ({plan.units} with repeats)",
                f"frames       {plan.frames} (the reset's frame + one per step)",
                f"size         {env.width}x{env.height}; sensors: "
                f"{', '.join(spec.record.sensors or ['all'])}; behaviors: "
                f"{', '.join(spec.record.behaviors or ['all'])}",
                f"output       {spec.output.directory} ({spec.output.format}; committed every "
                f"{spec.output.frames_per_shard} frames)",
            ]
        )


MLAGENTS_JOBS = MLAgentsJobs()
