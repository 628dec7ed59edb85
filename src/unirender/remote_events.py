"""Typed ML-Agents events on the client side, rebuilt from the service's event documents (numpy only).

A remote ML-Agents session's ``step()``/``reset()`` (``unirender.client.RemoteMLAgentsSession``) and a one-shot
``Client.render`` of an ML-Agents episode return a :class:`RemoteMLAgentsEvent`: the reading API of
:class:`unirender.mlagents.MLAgentsEvent` (``behavior_names``, ``steps(behavior)``, ``frames(behavior)``,
``decision_steps[b]`` / ``terminal_steps[b]`` with ``agent_id``, ``reward``, ``obs``, ``frames``,
``agent_id_to_index``, ``frame(agent_id, sensor)``, ``interrupted``), built from plain arrays. It is its own class,
not an ``MLAgentsEvent``: that one is made from the game's protobuf messages (the ``mlagents`` extra), and the thin
client needs only the core dependencies.

What an event document carries, and so what a remote event has (docs/mlagents.md):

- the behaviors and sensors the session records (``record``); ``obs`` lists the recorded sensors in the behavior's
  sensor order (the session's ``describe()``; without a description, cameras first, then vectors, each in document
  order), cameras as float32 in [0, 1] in the sensor's layout as the description gives it, as an ``MLAgentsEvent``
  has them (``(n, C, H, W)`` for a CHW sensor of a current game; without a description ``(n, H, W, C)``, as the
  frames are);
- one record per agent: its id, rewards and decision/terminal flags (an agent in both the decision and the
  terminal steps, whose episode ended and whose next one already wants a decision, carries the decision step's
  camera frames and observations in both); ``group_id``, ``group_reward``, ``action_mask``, ``stats``
  and side-channel messages stay on the service (``action_mask`` is None);
- ``metadata``: the document's metadata as sent (``step``, ``behaviors``), for code that reads the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np


@dataclass
class RemoteSteps:
    """Agents of one behavior in one event, in order: ``agent_id`` int32 ``(n,)``, ``reward`` float32 ``(n,)``,
    ``obs`` (per recorded sensor, float32 ``(n, *shape)``), ``frames`` (per camera sensor, uint8 ``(n, H, W, C)``)."""

    agent_id: np.ndarray
    reward: np.ndarray
    obs: list[np.ndarray] = field(default_factory=list)
    frames: dict[str, np.ndarray] = field(default_factory=dict)
    sensor_names: list[str] = field(default_factory=list)  # what obs[i] is

    def __len__(self) -> int:
        return len(self.agent_id)

    @cached_property
    def agent_id_to_index(self) -> dict[int, int]:
        return {int(a): i for i, a in enumerate(self.agent_id)}

    def frame(self, agent_id: int, sensor: str) -> np.ndarray:
        """One agent's uint8 (H, W, C) frame of one camera sensor."""
        return self.frames[sensor][self.agent_id_to_index[int(agent_id)]]


@dataclass
class RemoteDecisionSteps(RemoteSteps):
    """Agents waiting for an action, in the order their actions must be given (``action_mask`` is not sent)."""

    action_mask: list[np.ndarray] | None = None


@dataclass
class RemoteTerminalSteps(RemoteSteps):
    """Agents whose episode ended in this step; ``interrupted`` = ended by max_step, not a true terminal."""

    interrupted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


@dataclass
class RemoteMLAgentsEvent:
    """One ML-Agents event from the service, with ``MLAgentsEvent``'s reading API (see the module doc)."""

    decision_steps: dict[str, RemoteDecisionSteps]
    terminal_steps: dict[str, RemoteTerminalSteps]
    metadata: dict[str, Any]

    @property
    def behavior_names(self) -> list[str]:
        return list(self.decision_steps)

    @property
    def step(self) -> int:
        """How many steps the session had taken at this event (``metadata["step"]``; a reset does not count)."""
        return int(self.metadata.get("step", 0))

    def _name(self, behavior: str | None) -> str:
        if behavior is None:
            if len(self.decision_steps) != 1:
                raise ValueError(f"pass a behavior name; this environment has {self.behavior_names}")
            return next(iter(self.decision_steps))
        if behavior not in self.decision_steps:
            raise KeyError(f"unknown behavior {behavior!r}; known: {self.behavior_names}")
        return behavior

    def frames(self, behavior: str | None = None) -> dict[str, np.ndarray]:
        """``{sensor name: uint8 (n, H, W, C)}`` for the decision agents of ``behavior`` (default: the only one)."""
        return self.decision_steps[self._name(behavior)].frames

    def steps(self, behavior: str | None = None) -> tuple[RemoteDecisionSteps, RemoteTerminalSteps]:
        name = self._name(behavior)
        return self.decision_steps[name], self.terminal_steps[name]

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], description: Mapping[str, Any] | None = None
                      ) -> RemoteMLAgentsEvent:
        """An event document (``{"metadata": {"step", "behaviors"}, "frames": {"<sensor>.<i>": image}}``, the
        service's ``mlagents_sessions.mlagents_document``) -> the typed event. ``description``: the session's
        ``describe()`` as a dict (its sensors' order and shapes)."""
        behaviors = doc["metadata"].get("behaviors") or {}
        frames = doc.get("frames") or {}
        order, shapes, layouts = _sensors_described(description)
        decision, terminal = {}, {}
        for name, record in behaviors.items():
            prefix = f"{name}." if len(behaviors) > 1 else ""
            agents = record.get("agents") or []
            cameras, vectors = _sensors_of(agents, frames, prefix)
            known = order.get(name, [])
            sensors = [s for s in known if s in cameras or s in vectors]
            sensors += [s for s in [*cameras, *vectors] if s not in sensors]
            reader = _Rows(frames, prefix, sensors, cameras, {s: shapes.get((name, s)) for s in vectors},
                           {s: layouts.get((name, s)) for s in cameras})
            decided = [(slot, a) for slot, a in enumerate(agents) if a.get("decision")]
            ended = [(slot, a) for slot, a in enumerate(agents) if a.get("terminal")]
            decision[name] = RemoteDecisionSteps(*reader(decided, "reward"))
            terminal[name] = RemoteTerminalSteps(
                *reader(ended, "terminal_reward"), interrupted=np.array([bool(a.get("interrupted")) for _, a in ended],
                                                                         bool))  # fmt: skip
        return cls(decision, terminal, dict(doc["metadata"]))


def _sensors_described(description: Mapping[str, Any] | None) -> tuple[dict[str, list[str]], dict, dict]:
    """``{behavior: [sensor, ...]}`` in the game's order, ``{(behavior, sensor): shape}`` and ``{(behavior,
    sensor): layout}`` (where the description says), from a ``Description.to_dict()``."""
    order: dict[str, list[str]] = {}
    shapes: dict[tuple[str, str], tuple[int, ...]] = {}
    layouts: dict[tuple[str, str], str] = {}
    for obs in (description or {}).get("observations") or []:
        behavior = obs.get("behavior")
        if behavior is not None:
            sensor = obs["key"][len(behavior) + 1:]
            order.setdefault(behavior, []).append(sensor)
            shapes[behavior, sensor] = tuple(obs["shape"])
            if obs.get("layout"):
                layouts[behavior, sensor] = obs["layout"]
    return order, shapes, layouts


def _sensors_of(agents: Sequence[Mapping], frames: Mapping[str, Any], prefix: str) -> tuple[dict, list[str]]:
    """A behavior's camera sensors (name -> one of its images, in document order) and vector sensors."""
    cameras: dict[str, Any] = {}
    for key, image in frames.items():
        if key.startswith(prefix):
            sensor, _, slot = key[len(prefix):].rpartition(".")
            if sensor and slot.isdigit():
                cameras.setdefault(sensor, image)
    vectors: list[str] = []
    for agent in agents:
        for sensor in agent.get("observations") or {}:
            if sensor not in vectors:
                vectors.append(sensor)
    return cameras, vectors


class _Rows:
    """The arrays of some of a behavior's agents (their slots in the document's ``agents`` list)."""

    def __init__(self, frames, prefix: str, sensors: list[str], cameras: Mapping[str, Any], shapes: Mapping,
                 layouts: Mapping):
        self.frames, self.prefix, self.sensors, self.cameras = frames, prefix, sensors, cameras
        self.shapes, self.layouts = shapes, layouts

    def __call__(self, rows: list[tuple[int, Mapping]], reward_key: str) -> tuple:
        agent_id = np.array([a["id"] for _, a in rows], np.int32)
        rewards = np.array([a.get(reward_key, a["reward"]) for _, a in rows], np.float32)
        images = {}
        for sensor, sample in self.cameras.items():
            sample = np.asarray(sample)
            images[sensor] = (np.stack([np.asarray(self.frames[f"{self.prefix}{sensor}.{slot}"]) for slot, _ in rows])
                              if rows else np.zeros((0, *sample.shape), sample.dtype))  # fmt: skip
        obs = []
        for sensor in self.sensors:
            if sensor in images:
                values = images[sensor].astype(np.float32) / np.float32(255.0)
                obs.append(values.transpose(0, 3, 1, 2) if self.layouts.get(sensor) == "CHW" else values)
                continue
            shape = self.shapes.get(sensor)
            if not rows:
                obs.append(np.zeros((0, *(shape or (0,))), np.float32))
                continue
            values = np.array([a.get("observations", {}).get(sensor, []) for _, a in rows], np.float32)
            obs.append(values.reshape(len(rows), *shape) if shape is not None else values.reshape(len(rows), -1))
        return agent_id, rewards, obs, images, list(self.sensors)


__all__ = ["RemoteDecisionSteps", "RemoteMLAgentsEvent", "RemoteSteps", "RemoteTerminalSteps"]
