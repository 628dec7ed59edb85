"""Behavior specs, ``DecisionSteps``/``TerminalSteps`` and actions, with mlagents-envs' semantics.

From one behavior's ``AgentInfoProto`` list (wire order kept): the agents with ``done`` false are the decision
steps (the order actions must come back in), those with ``done`` true the terminal steps. The same agent id can be
in both in one output (its episode ended and the next one already wants a decision).

Observations come as ML-Agents does them (``obs``: float32 ``(n, *shape)`` per sensor, pixels /255) and, for every
visual sensor, as exact ``uint8`` frames ``(n, H, W, C)`` (``frames[sensor_name]``, HWC whatever the wire layout):
the PNG bytes decoded, no float round trip. Images are decoded when first read (so a bad PNG raises
``ObservationError`` then), float views only when ``obs[i]`` is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from unirender.protocol.mlagents import observations as O
from unirender.protocol.mlagents.errors import NonFiniteError, ObservationError
from unirender.protocol.mlagents.versions import HWC, dimension_layout

# DimensionPropertyProto flags
UNSPECIFIED, NONE, TRANSLATIONAL_EQUIVARIANCE, VARIABLE_SIZE = 0, 1, 2, 4


@dataclass(frozen=True)
class ObservationSpec:
    shape: tuple[int, ...]  # as declared on the wire (HWC or CHW for cameras)
    dimension_property: tuple[int, ...]
    observation_type: int  # 0 DEFAULT, 1 GOAL_SIGNAL
    name: str
    layout: str | None = None  # rank 3 only: "HWC" | "CHW", how this sensor's shape reads (see behavior_spec_from)

    @property
    def is_visual(self) -> bool:
        return len(self.shape) == 3


@dataclass(frozen=True)
class ActionSpec:
    continuous_size: int
    discrete_branches: tuple[int, ...]

    @property
    def discrete_size(self) -> int:
        return len(self.discrete_branches)

    def empty(self, n_agents: int) -> ActionTuple:
        return ActionTuple(
            np.zeros((n_agents, self.continuous_size), np.float32),
            np.zeros((n_agents, self.discrete_size), np.int32),
        )

    def random(
        self, n_agents: int, rng: np.random.Generator | None = None, action_mask: list[np.ndarray] | None = None
    ) -> ActionTuple:
        """Uniform actions: continuous in [-1, 1], each discrete branch uniform over its choices, or, given the
        decision steps' ``action_mask`` (per branch, bool ``(n, size)``, True = forbidden), over the choices left
        to each agent. A branch with nothing masked draws as without a mask; an agent with every choice of a branch
        masked (which ML-Agents forbids) gets choice 0."""
        rng = rng or np.random.default_rng()
        continuous = rng.uniform(-1.0, 1.0, (n_agents, self.continuous_size)).astype(np.float32)
        discrete = np.zeros((n_agents, self.discrete_size), np.int32)
        for k, size in enumerate(self.discrete_branches):
            forbidden = None if action_mask is None else np.asarray(action_mask[k], bool).reshape(n_agents, size)
            if forbidden is None or not forbidden.any():
                discrete[:, k] = rng.integers(0, size, n_agents)
                continue
            allowed = ~forbidden
            count = allowed.sum(axis=1)
            pick = np.minimum((rng.random(n_agents) * count).astype(np.int64), np.maximum(count - 1, 0))
            # the pick-th allowed choice: the first column where the running count of allowed ones passes pick
            choice = np.argmax(np.cumsum(allowed, axis=1) > pick[:, None], axis=1)
            discrete[:, k] = np.where(count > 0, choice, 0)
        return ActionTuple(continuous, discrete)


@dataclass(frozen=True)
class BehaviorSpec:
    observation_specs: list[ObservationSpec]
    action_spec: ActionSpec

    @property
    def sensor_names(self) -> list[str]:
        return [spec.name for spec in self.observation_specs]


@dataclass
class ActionTuple:
    """Actions for the decision agents of one behavior, in their order: ``continuous`` float32 (n, c),
    ``discrete`` int32 (n, branches)."""

    continuous: np.ndarray | None = None
    discrete: np.ndarray | None = None


def behavior_spec_from(brain, first_agent, layout: str = HWC, override: str | None = None) -> BehaviorSpec:
    """``BrainParametersProto`` + the first AgentInfo of the same message -> :class:`BehaviorSpec`.

    A rank-3 sensor's layout: ``override`` when given, else the one its dimension properties name (``[2, 2, 1]``
    HWC, ``[1, 2, 2]`` CHW: every camera, render-texture and grid sensor since package 2.0 declares them), else
    ``layout`` (the game's package generation)."""
    specs = []
    for obs in first_agent.observations:
        dims = tuple(obs.dimension_properties) or (UNSPECIFIED,) * len(obs.shape)
        sensor_layout = (override or dimension_layout(dims) or layout) if len(obs.shape) == 3 else None
        specs.append(ObservationSpec(tuple(obs.shape), dims, int(obs.observation_type), obs.name, sensor_layout))
    a = brain.action_spec
    if a.num_continuous_actions == 0 and a.num_discrete_actions == 0:  # a pre-1.3 communicator
        sizes = tuple(brain.vector_action_size_deprecated)
        if brain.vector_action_space_type_deprecated == 1:  # continuous
            action_spec = ActionSpec(int(sizes[0]) if sizes else 0, ())
        else:
            action_spec = ActionSpec(0, sizes)
    else:
        action_spec = ActionSpec(int(a.num_continuous_actions), tuple(int(b) for b in a.discrete_branch_sizes))
    return BehaviorSpec(specs, action_spec)


class _Sensors:
    """Observations of n agents for every sensor of a spec; floats decoded eagerly, images kept as pixels. A visual
    sensor reads its shape in its spec's layout (``layout`` for specs that carry none)."""

    def __init__(self, infos, spec: BehaviorSpec, layout: str):
        self._spec = spec
        self._layouts = [obs_spec.layout or layout for obs_spec in spec.observation_specs]
        self._vectors: dict[int, np.ndarray] = {}
        self._encoded: dict[int, list] = {}  # sensor index -> the agents' ObservationProtos, not decoded yet
        self._decoded: dict[int, np.ndarray] = {}
        self._values: dict[int, np.ndarray] = {}
        n = len(infos)
        for index, obs_spec in enumerate(spec.observation_specs):
            for info in infos:
                if len(info.observations) != len(spec.observation_specs):
                    raise ObservationError(
                        f"agent {info.id} sent {len(info.observations)} observations, the behavior has "
                        f"{len(spec.observation_specs)} sensors ({spec.sensor_names})"
                    )
            if obs_spec.is_visual:
                compressed = [info.observations[index].compression_type == O.PNG for info in infos]
                if n and not any(compressed):
                    self._values[index] = self._stack([O.float_values(i.observations[index]) for i in infos],
                                                      obs_spec, n)  # fmt: skip
                else:  # images are decoded on first access (a sensor nobody reads costs nothing)
                    O.hwc_shape(obs_spec.shape, self._layouts[index])  # a rank check now, not at first access
                    self._encoded[index] = [info.observations[index] for info in infos]
            else:
                values = [O.float_values(info.observations[index]) for info in infos]
                batch = self._stack(values, obs_spec, n)
                NonFiniteError.check("observations", batch, f"sensor {obs_spec.name!r}")
                self._vectors[index] = batch

    def _pixels(self, index: int) -> np.ndarray:
        """(n, H, W, C) pixels of a visual sensor, decoded once."""
        if index not in self._decoded:
            obs_spec, layout = self._spec.observation_specs[index], self._layouts[index]
            h, w, c = O.hwc_shape(obs_spec.shape, layout)
            pixels = [O.pixels_of(obs, layout) for obs in self._encoded[index]]
            if any(p.shape != (h, w, c) for p in pixels):
                raise ObservationError(f"sensor {obs_spec.name!r}: an agent's image is not {(h, w, c)}")
            if not pixels:
                self._decoded[index] = np.zeros((0, h, w, c), np.uint8)
            else:
                dtype = np.uint8 if all(p.dtype == np.uint8 for p in pixels) else np.float32
                self._decoded[index] = np.stack(pixels).astype(dtype, copy=False)
            del self._encoded[index]
        return self._decoded[index]

    @staticmethod
    def _stack(values, obs_spec: ObservationSpec, n: int) -> np.ndarray:
        if not n:
            return np.zeros((0, *obs_spec.shape), np.float32)
        if any(v.shape != obs_spec.shape for v in values):
            raise ObservationError(f"sensor {obs_spec.name!r}: an agent's observation is not {obs_spec.shape}")
        return np.stack(values)

    def value(self, index: int) -> np.ndarray:
        if index in self._vectors:
            return self._vectors[index]
        if index in self._values:
            return self._values[index]
        return O.pixels_to_values(self._pixels(index), self._layouts[index])

    def native(self, name: str) -> np.ndarray:
        """One sensor in its native dtype, no other sensor converted: a camera's uint8 ``(n, H, W, C)`` frames, a
        vector's float32 ``(n, *shape)``."""
        index = self.names.index(name)
        if index in self._vectors:
            return self._vectors[index]
        if index in self._values:
            values = self._values[index]
            hwc = values.transpose(0, 2, 3, 1) if self._layouts[index] == O.CHW else values
            return O.to_frame(hwc * np.float32(255.0))
        return O.to_frame(self._pixels(index))

    def __len__(self) -> int:
        return len(self._spec.observation_specs)

    @property
    def names(self) -> list[str]:
        return self._spec.sensor_names

    def frames(self) -> dict[str, np.ndarray]:
        out = {}
        for index, obs_spec in enumerate(self._spec.observation_specs):
            if index in self._encoded or index in self._decoded:
                out[obs_spec.name] = O.to_frame(self._pixels(index))
            elif index in self._values:
                values = self._values[index]
                hwc = values.transpose(0, 2, 3, 1) if self._layouts[index] == O.CHW else values
                out[obs_spec.name] = O.to_frame(hwc * np.float32(255.0))
        return out


class ArraySensors:
    """Observations of n agents given as arrays, as a remote client receives them (numpy only, no protobuf):
    ``frames`` per camera sensor, uint8 ``(n, H, W, C)`` pixels; ``vectors`` per other sensor, float32
    ``(n, *shape)``; ``names``: what ``obs[i]`` is (default: the cameras, then the vectors); ``layouts``: a
    camera's declared layout (``"CHW"`` gives ``obs`` as ``(n, C, H, W)``, as a game's own event does; default
    HWC). The same reading API as the game's sensors: ``obs`` built per sensor on first read, ``frames`` as given."""

    def __init__(self, frames: Mapping[str, np.ndarray] | None = None, vectors: Mapping[str, np.ndarray] | None = None,
                 names: Sequence[str] | None = None, layouts: Mapping[str, str | None] | None = None):
        self._frames = dict(frames or {})
        self._vectors = {name: np.asarray(values, np.float32) for name, values in (vectors or {}).items()}
        self._names = list(names) if names is not None else [*self._frames, *self._vectors]
        self._layouts = dict(layouts or {})
        unknown = [name for name in self._names if name not in self._frames and name not in self._vectors]
        if unknown:
            raise ValueError(f"sensors {unknown} are named but neither frames nor vectors were given for them")

    @property
    def names(self) -> list[str]:
        return self._names

    def value(self, index: int) -> np.ndarray:
        name = self._names[index]
        if name in self._frames:
            return O.pixels_to_values(self._frames[name], self._layouts.get(name) or HWC)
        return self._vectors[name]

    def native(self, name: str) -> np.ndarray:
        """One sensor as given: a camera's uint8 frames, a vector's float32 values."""
        return O.to_frame(self._frames[name]) if name in self._frames else self._vectors[name]

    def __len__(self) -> int:
        return len(self._names)

    def frames(self) -> dict[str, np.ndarray]:
        return {name: O.to_frame(pixels) for name, pixels in self._frames.items()}


class _LazyObs(Sequence):
    def __init__(self, sensors: _Sensors) -> None:
        self._sensors, self._cache = sensors, {}

    def __len__(self) -> int:
        return len(self._sensors)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"sensor index {index} out of range for {len(self)} sensors")
        if index not in self._cache:
            self._cache[index] = self._sensors.value(index)
        return self._cache[index]


@dataclass
class _Steps:
    agent_id: np.ndarray  # int32 (n,)
    reward: np.ndarray  # float32 (n,)
    group_id: np.ndarray  # int32 (n,)
    group_reward: np.ndarray  # float32 (n,)
    _sensors: _Sensors | ArraySensors = field(repr=False)

    @classmethod
    def from_arrays(cls, agent_id, reward, sensors: ArraySensors | None = None, *, group_id=None, group_reward=None,
                    **fields: Any):
        """Steps from arrays (a remote client's, numpy only): ``agent_id`` ``(n,)``, ``reward`` ``(n,)``, the
        agents' observations as :class:`ArraySensors`; ``group_id``/``group_reward`` default to zeros (no group);
        ``fields``: ``action_mask`` (decision steps, default None) or ``interrupted`` (terminal steps, bool
        ``(n,)``, default all False)."""
        agent_id = np.asarray(agent_id, np.int32).reshape(-1)
        n = len(agent_id)
        if cls is TerminalSteps:
            fields["interrupted"] = np.asarray(fields.get("interrupted", np.zeros(n, bool)), bool).reshape(n)
        return cls(agent_id=agent_id, reward=np.asarray(reward, np.float32).reshape(n),
                   group_id=np.zeros(n, np.int32) if group_id is None else np.asarray(group_id, np.int32),
                   group_reward=(np.zeros(n, np.float32) if group_reward is None
                                 else np.asarray(group_reward, np.float32)),
                   _sensors=sensors if sensors is not None else ArraySensors(), **fields)  # fmt: skip

    def __len__(self) -> int:
        return len(self.agent_id)

    @property
    def sensor_names(self) -> list[str]:
        """What ``obs[i]`` is: the sensors' names, in order."""
        return list(self._sensors.names)

    @cached_property
    def obs(self) -> Sequence[np.ndarray]:
        """Per sensor, float32 ``(n, *shape)`` as mlagents-envs gives it (images /255, declared layout). Each
        sensor's array is built on first access: reading ``obs[1]`` does not convert the camera images."""
        return _LazyObs(self._sensors)

    @cached_property
    def frames(self) -> dict[str, np.ndarray]:
        """Per visual sensor name, exact uint8 ``(n, H, W, C)`` frames (HWC, row 0 = top)."""
        return self._sensors.frames()

    def sensor_array(self, name: str) -> np.ndarray:
        """One sensor's array in its native dtype, without converting any other: a camera's exact uint8
        ``(n, H, W, C)`` frames (as ``frames[name]``), another sensor's float32 ``(n, *shape)`` (as its ``obs``)."""
        if "frames" in self.__dict__ and name in self.frames:
            return self.frames[name]
        return self._sensors.native(name)

    @cached_property
    def agent_id_to_index(self) -> dict[int, int]:
        return {int(a): i for i, a in enumerate(self.agent_id)}

    def frame(self, agent_id: int, sensor: str) -> np.ndarray:
        """One agent's uint8 (H, W, C) frame of one visual sensor."""
        return self.frames[sensor][self.agent_id_to_index[int(agent_id)]]


@dataclass
class DecisionSteps(_Steps):
    """Agents waiting for an action, in the order their actions must be given."""

    action_mask: list[np.ndarray] | None = None  # per discrete branch, bool (n, branch_size); True = forbidden


@dataclass
class TerminalSteps(_Steps):
    """Agents whose episode ended in this step; ``interrupted`` = ended by max_step, not a true terminal."""

    interrupted: np.ndarray | None = None  # bool (n,)


def _common(infos, spec: BehaviorSpec, layout: str) -> dict:
    reward = np.array([i.reward for i in infos], np.float32)
    NonFiniteError.check("rewards", reward)
    group_reward = np.array([i.group_reward for i in infos], np.float32)
    NonFiniteError.check("group_rewards", group_reward)
    return dict(
        agent_id=np.array([i.id for i in infos], np.int32),
        reward=reward,
        group_id=np.array([i.group_id for i in infos], np.int32),
        group_reward=group_reward,
        _sensors=_Sensors(infos, spec, layout),
    )


def split_steps(infos, spec: BehaviorSpec, layout: str) -> tuple[DecisionSteps, TerminalSteps]:
    """One behavior's AgentInfo list -> (DecisionSteps, TerminalSteps), wire order kept in each."""
    deciding = [i for i in infos if not i.done]
    done = [i for i in infos if i.done]
    mask = None
    branches = spec.action_spec.discrete_branches
    if branches:
        total = int(sum(branches))
        rows = np.zeros((len(deciding), total), bool)
        for row, info in zip(rows, deciding, strict=True):
            if len(info.action_mask) == total:  # an empty or wrong-length mask means nothing is masked
                row[:] = info.action_mask
        mask = np.split(rows, np.cumsum(branches)[:-1], axis=1)
    decision = DecisionSteps(**_common(deciding, spec, layout), action_mask=mask)
    terminal = TerminalSteps(
        **_common(done, spec, layout), interrupted=np.array([i.max_step_reached for i in done], bool)
    )
    return decision, terminal


def fill_action_list(target, actions: ActionTuple) -> None:
    """Append one ``AgentActionProto`` per agent to ``target`` (a ``ListAgentActionProto.value``), also filling
    ``vector_actions_deprecated`` (continuous + discrete as floats) for communicators older than 1.3."""
    continuous = actions.continuous.tolist()
    discrete = actions.discrete.tolist()
    for c, d in zip(continuous, discrete, strict=True):
        target.add(continuous_actions=c, discrete_actions=d, vector_actions_deprecated=c + [float(x) for x in d])
