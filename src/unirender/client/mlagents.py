"""The ML-Agents family's client adapter: :class:`RemoteMLAgentsSession`, registered in ``client.REMOTE_SESSIONS``,
whose events are the core :class:`unirender.protocol.mlagents.MLAgentsEvent` with
:class:`~unirender.protocol.mlagents.DecisionSteps` / :class:`~unirender.protocol.mlagents.TerminalSteps`, built
from the arrays of the service's event documents (:func:`event_from_document`; numpy only: the event and steps
modules load no protobuf, no grpc, no trainer).

What an event document carries, and so what a remote event has (docs/mlagents.md):

- the behaviors and sensors the session records (``record``); ``obs`` lists the recorded sensors in the behavior's
  sensor order (the session's ``describe()``; without a description, cameras first, then vectors, each in document
  order; ``sensor_names`` says which), cameras as float32 in [0, 1] in the sensor's layout as the description
  gives it (``(n, C, H, W)`` for a CHW sensor of a current game; without a description ``(n, H, W, C)``, as the
  frames are);
- one record per agent: its id, rewards and decision/terminal flags (an agent in both the decision and the
  terminal steps, whose episode ended and whose next one already wants a decision, carries the decision step's
  camera frames and observations in both); ``group_id`` and ``group_reward`` are not sent (zeros: no group),
  ``action_mask`` is None, ``stats`` and side-channel messages stay on the service (empty);
- ``metadata``: the document's metadata as sent (``step``, ``behaviors``), for code that reads the records.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from unirender.client import RemoteSessionBase
from unirender.http_format import BATCHED, BODY_HEADER, MSGPACK
from unirender.protocol.mlagents.events import MLAgentsEvent
from unirender.protocol.mlagents.steps import ArraySensors, DecisionSteps, TerminalSteps
from unirender.simulator import MLAGENTS

if TYPE_CHECKING:
    from unirender.client import Client


class RemoteMLAgentsSession(RemoteSessionBase[MLAgentsEvent]):
    """An ML-Agents session: ``step({behavior: {"continuous": rows, "discrete": rows}})`` (arrays or lists, one
    row per decision agent; a behavior left out gets zeros) and ``reset(**environment_parameters)`` return an
    :class:`MLAgentsEvent` (``steps(behavior)``, ``frames(behavior)``, ``decision_steps``, ...; ``metadata``: the
    records as sent, ``step``: the service's step count)."""

    family = MLAGENTS
    request_format = MSGPACK  # actions go up as arrays (raw bytes), never as Python numbers
    batched = True  # ask for the batched body (``Unirender-Body: batched``); False: the per-agent records

    def __init__(self, client: Client, info: dict, modalities: list[str] | None = None):
        super().__init__(client, info, modalities)
        self._described = info.get("description")  # the sensors' order and shapes, once

    def request_headers(self) -> dict:
        return {BODY_HEADER: BATCHED} if self.batched else {}

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> MLAgentsEvent:
        return event_from_document(doc, description)

    def _description(self) -> dict | None:
        if self._described is None:
            self._described = self.describe()
        return self._described

    def step(self, actions: Mapping | None = None) -> MLAgentsEvent:
        return self._event("step", self.action_body(actions))

    def action_body(self, actions: Mapping | None) -> dict:
        """``{"actions": {behavior: {kind: rows}}}``: rows of numbers as numpy arrays (continuous float32,
        discrete int32: msgpack sends their bytes; JSON, lists), anything else (ragged rows, bools, a kind the
        service does not know) as given, for the service to say what is wrong, as it always has."""
        return {"actions": {name: {kind: action_rows(kind, rows)
                                   for kind, rows in action_parts(given).items() if rows is not None}
                            for name, given in (actions or {}).items()}}  # fmt: skip

    def reset(self, scene: None = None, **environment_parameters: float) -> MLAgentsEvent:
        """New episodes with ``environment_parameters``; ``scene`` is there for the port's ``reset(scene, ...)``
        (an ML-Agents game has none)."""
        if scene is not None:
            raise ValueError("an ML-Agents game has no scenes: reset(None, **environment_parameters)")
        return self._event("reset", {"environment_parameters": environment_parameters})

    def __enter__(self) -> RemoteMLAgentsSession:
        return self


def action_parts(given: Any) -> dict:
    """A behavior's actions as ``{"continuous": rows, "discrete": rows}``: a mapping, or an object with those
    attributes (mlagents-envs' ``ActionTuple``, what the jobs' policies give)."""
    if isinstance(given, Mapping):
        return dict(given)
    return {"continuous": getattr(given, "continuous", None), "discrete": getattr(given, "discrete", None)}


_INT32 = np.iinfo(np.int32)


def action_rows(kind: str, rows: Any) -> Any:
    """One kind of a behavior's actions for the wire: a 2-D numeric array (float32 continuous; int32 discrete,
    when its values fit) without copying one that already is; anything else as it came."""
    if kind not in ("continuous", "discrete"):
        return rows
    try:
        array = np.asarray(rows)
    except (ValueError, TypeError):  # ragged rows: the service's 422 says which
        return rows.tolist() if isinstance(rows, np.ndarray) else rows
    if array.ndim != 2 or array.dtype.kind not in ("iuf" if kind == "continuous" else "iu"):
        return rows  # the service checks it (a list, or an array it refuses with the same words)
    if kind == "continuous":
        return array.astype(np.float32, copy=False)
    if array.dtype == np.int32:
        return array
    if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
        return array  # out of int32's range: sent as it is, refused by the service for its branch
    return array.astype(np.int32, copy=False)


def event_from_document(doc: Mapping[str, Any], description: Mapping[str, Any] | None = None) -> MLAgentsEvent:
    """An event document (``{"metadata": {"step", "behaviors"}, "frames": {"<sensor>.<i>": image}}``, the
    service's ``mlagents_sessions.mlagents_document``, or the batched body, ``metadata.batched``: see
    :func:`event_from_batched`) -> the core :class:`MLAgentsEvent` (see the module doc). ``description``: the
    session's ``describe()`` as a dict (its sensors' order, shapes and layouts)."""
    if doc["metadata"].get("batched"):
        return event_from_batched(doc)
    behaviors = doc["metadata"].get("behaviors") or {}
    frames = doc.get("frames") or {}
    order, shapes, layouts = _sensors_described(description)
    decision, terminal = {}, {}
    for name, record in behaviors.items():
        prefix = f"{name}." if len(behaviors) > 1 else ""
        agents = record.get("agents") or []
        cameras, vectors = _sensors_of(agents, frames, prefix)
        sensors = [s for s in order.get(name, []) if s in cameras or s in vectors]
        sensors += [s for s in [*cameras, *vectors] if s not in sensors]
        rows = _Rows(frames, prefix, sensors, cameras, {s: shapes.get((name, s)) for s in vectors},
                     {s: layouts.get((name, s)) for s in cameras})
        decided = [(slot, a) for slot, a in enumerate(agents) if a.get("decision")]
        ended = [(slot, a) for slot, a in enumerate(agents) if a.get("terminal")]
        decision[name] = DecisionSteps.from_arrays(*rows(decided, "reward"))
        terminal[name] = TerminalSteps.from_arrays(
            *rows(ended, "terminal_reward"), interrupted=[bool(a.get("interrupted")) for _, a in ended])
    return MLAgentsEvent(decision, terminal, metadata=dict(doc["metadata"]))


def event_from_batched(doc: Mapping[str, Any]) -> MLAgentsEvent:
    """The batched body (``Unirender-Body: batched``: ``mlagents_sessions.batched_document``) -> the core
    :class:`MLAgentsEvent`: its arrays taken as they came (read-only; the cameras views of the response body), the
    sensors' order and layouts from its metadata (no description needed)."""
    frames = doc.get("frames") or {}
    decision, terminal = {}, {}
    for name, behavior in (doc["metadata"].get("behaviors") or {}).items():
        sensors, cameras = behavior.get("sensors") or [], set(behavior.get("cameras") or [])
        layouts, branches = behavior.get("layouts") or {}, behavior.get("action_branches") or []
        for kind, out in (("decision", decision), ("terminal", terminal)):
            at = f"{name}/{kind}/"
            if at + "agent_id" in frames:
                arrays = {key: frames[at + key] for key in ("agent_id", "reward", *sensors)}
                fields: dict[str, Any] = {"group_id": frames.get(at + "group_id"),
                                          "group_reward": frames.get(at + "group_reward")}
                if kind == "terminal":
                    fields["interrupted"] = frames[at + "interrupted"]
                elif at + "action_mask" in frames:
                    fields["action_mask"] = _split_branches(frames[at + "action_mask"], branches)
            else:  # no agent of this kind, not sent: empty arrays shaped as the decision steps' (no group)
                other = f"{name}/decision/"
                arrays = {key: _none_like(frames[other + key]) for key in ("agent_id", "reward", *sensors)}
                fields = {"group_id": None, "group_reward": None}
                if kind == "terminal":
                    fields["interrupted"] = np.zeros(0, bool)
            sensor_arrays = ArraySensors({s: arrays[s] for s in sensors if s in cameras},
                                         {s: arrays[s] for s in sensors if s not in cameras}, sensors, layouts)
            steps_type = DecisionSteps if kind == "decision" else TerminalSteps
            out[name] = steps_type.from_arrays(arrays["agent_id"], arrays["reward"], sensor_arrays, **fields)
    return MLAgentsEvent(decision, terminal, metadata=dict(doc["metadata"]))


def _none_like(array: Any) -> np.ndarray:
    """No row of ``array``: ``(0, *its row shape)`` in its dtype."""
    array = np.asarray(array)
    return np.zeros((0, *array.shape[1:]), array.dtype)


def _split_branches(mask: Any, branches: Sequence[int]) -> list[np.ndarray]:
    """An ``(n, sum(branches))`` action mask -> one ``(n, branch)`` view per branch (``np.split`` at the branches'
    ends, without its per-call cost)."""
    mask = np.asarray(mask)
    ends = list(itertools.accumulate(branches))[:-1]
    return [mask[:, start:end] for start, end in zip([0, *ends], [*ends, None], strict=True)]


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
        """-> ``(agent_id, reward, ArraySensors)`` of ``rows``."""
        agent_id = np.array([a["id"] for _, a in rows], np.int32)
        rewards = np.array([a.get(reward_key, a["reward"]) for _, a in rows], np.float32)
        images = {}
        for sensor, sample in self.cameras.items():
            sample = np.asarray(sample)
            images[sensor] = (np.stack([np.asarray(self.frames[f"{self.prefix}{sensor}.{slot}"]) for slot, _ in rows])
                              if rows else np.zeros((0, *sample.shape), sample.dtype))  # fmt: skip
        vectors = {}
        for sensor in self.sensors:
            if sensor in images:
                continue
            shape = self.shapes.get(sensor)
            if not rows:
                vectors[sensor] = np.zeros((0, *(shape or (0,))), np.float32)
                continue
            values = np.array([a.get("observations", {}).get(sensor, []) for _, a in rows], np.float32)
            vectors[sensor] = values.reshape(len(rows), *shape) if shape is not None else values.reshape(len(rows), -1)
        return agent_id, rewards, ArraySensors(images, vectors, self.sensors, self.layouts)


__all__ = ["RemoteMLAgentsSession", "action_parts", "action_rows", "event_from_batched", "event_from_document"]
