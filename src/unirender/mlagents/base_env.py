"""mlagents-envs' low-level API types (``mlagents_envs.base_env``), same names, fields and semantics.

Specs and steps are views of what the protocol core (:mod:`unirender.protocol.mlagents.steps`) decoded:
:meth:`DecisionSteps.from_core` wraps the core's steps without copying, so observations are still decoded only
when ``obs`` is first read, and the exact ``uint8`` camera frames stay available as ``frames`` (a unirender
extra; mlagents-envs only has the ``/255`` floats).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from enum import Enum, IntFlag
from typing import Any, NamedTuple

import numpy as np

from unirender.mlagents.exception import UnityActionException, UnityObservationException
from unirender.protocol.mlagents.actions import ActionError, check_behavior_action
from unirender.protocol.mlagents.errors import ObservationError
from unirender.protocol.mlagents.steps import ActionSpec as _CoreActionSpec
from unirender.protocol.mlagents.steps import ActionTuple as _CoreActionTuple

AgentId = int
GroupId = int
BehaviorName = str


class DecisionStep(NamedTuple):
    """One agent's data since the last simulation step (``DecisionSteps[agent_id]``)."""

    obs: list[np.ndarray]
    reward: float
    agent_id: AgentId
    action_mask: list[np.ndarray] | None
    group_id: int
    group_reward: float


class TerminalStep(NamedTuple):
    """One agent's data when its episode ended (``TerminalSteps[agent_id]``)."""

    obs: list[np.ndarray]
    reward: float
    interrupted: bool
    agent_id: AgentId
    group_id: GroupId
    group_reward: float


class _Steps(Mapping):
    """A batch of agents of one behavior: a Mapping ``agent_id -> step``, iterating over agent ids in order."""

    _core = None  # the protocol core's steps this wraps, when it came from a game

    def _init_fields(self, obs, reward, agent_id, group_id, group_reward) -> None:
        self._obs = obs
        self.reward: np.ndarray = reward
        self.agent_id: np.ndarray = agent_id
        self.group_id: np.ndarray = group_id
        self.group_reward: np.ndarray = group_reward
        self._agent_id_to_index: dict[AgentId, int] | None = None

    @classmethod
    def _wrap(cls, core):
        steps = cls.__new__(cls)
        steps._init_fields(None, core.reward, core.agent_id, core.group_id, core.group_reward)
        steps._core = core
        return steps

    @property
    def obs(self) -> list[np.ndarray]:
        """Per sensor, float32 ``(n_agents, *shape)`` in the declared layout (images /255), as mlagents-envs
        gives them; built on first access."""
        if self._obs is None:
            try:
                self._obs = list(self._core.obs)
            except ObservationError as exc:  # images are decoded here, on first read
                raise UnityObservationException(str(exc)) from exc
        return self._obs

    @obs.setter
    def obs(self, value: list[np.ndarray]) -> None:
        self._obs = value

    @property
    def frames(self) -> dict[str, np.ndarray]:
        """unirender extra: per visual sensor name, the exact ``uint8 (n_agents, H, W, C)`` frames (HWC, row 0 =
        top, whatever the wire layout); ``{}`` for steps not read from a game."""
        return self._core.frames if self._core is not None else {}

    @property
    def agent_id_to_index(self) -> dict[AgentId, int]:
        """A dict mapping each agent_id to the index of that agent in this batch."""
        if self._agent_id_to_index is None:
            self._agent_id_to_index = {a_id: a_idx for a_idx, a_id in enumerate(self.agent_id)}
        return self._agent_id_to_index

    def __len__(self) -> int:
        return len(self.agent_id)

    def __iter__(self) -> Iterator[Any]:
        yield from self.agent_id

    def _index_of(self, agent_id: AgentId) -> int:
        if agent_id not in self.agent_id_to_index:
            raise KeyError(f"agent_id {agent_id} is not present in the {type(self).__name__}")
        return self.agent_id_to_index[agent_id]


class DecisionSteps(_Steps):
    """The agents of one behavior that wait for an action, in the order their actions must be given.

    ``obs`` (list, per sensor ``(n, *shape)``), ``reward``, ``agent_id``, ``action_mask`` (per discrete branch, bool
    ``(n, branch size)``, True = not available; None without discrete actions or agents), ``group_id``,
    ``group_reward``.
    """

    def __init__(self, obs, reward, agent_id, action_mask, group_id, group_reward):
        self._init_fields(obs, reward, agent_id, group_id, group_reward)
        self.action_mask: list[np.ndarray] | None = action_mask

    @classmethod
    def from_core(cls, core) -> DecisionSteps:
        steps = cls._wrap(core)
        steps.action_mask = core.action_mask if len(core) else None  # mlagents-envs: None without agents
        return steps

    def __getitem__(self, agent_id: AgentId) -> DecisionStep:
        index = self._index_of(agent_id)
        mask = None if self.action_mask is None else [m[index] for m in self.action_mask]
        return DecisionStep(
            obs=[batch[index] for batch in self.obs],
            reward=self.reward[index],
            agent_id=agent_id,
            action_mask=mask,
            group_id=self.group_id[index],
            group_reward=self.group_reward[index],
        )

    @staticmethod
    def empty(spec: BehaviorSpec) -> DecisionSteps:
        return DecisionSteps(
            obs=[np.zeros((0, *s.shape), np.float32) for s in spec.observation_specs],
            reward=np.zeros(0, np.float32),
            agent_id=np.zeros(0, np.int32),
            action_mask=None,
            group_id=np.zeros(0, np.int32),
            group_reward=np.zeros(0, np.float32),
        )


class TerminalSteps(_Steps):
    """The agents of one behavior whose episode ended; ``interrupted`` (bool per agent) = ended by max_step."""

    def __init__(self, obs, reward, interrupted, agent_id, group_id, group_reward):
        self._init_fields(obs, reward, agent_id, group_id, group_reward)
        self.interrupted: np.ndarray = interrupted

    @classmethod
    def from_core(cls, core) -> TerminalSteps:
        steps = cls._wrap(core)
        steps.interrupted = core.interrupted
        return steps

    def __getitem__(self, agent_id: AgentId) -> TerminalStep:
        index = self._index_of(agent_id)
        return TerminalStep(
            obs=[batch[index] for batch in self.obs],
            reward=self.reward[index],
            interrupted=self.interrupted[index],
            agent_id=agent_id,
            group_id=self.group_id[index],
            group_reward=self.group_reward[index],
        )

    @staticmethod
    def empty(spec: BehaviorSpec) -> TerminalSteps:
        return TerminalSteps(
            obs=[np.zeros((0, *s.shape), np.float32) for s in spec.observation_specs],
            reward=np.zeros(0, np.float32),
            interrupted=np.zeros(0, bool),
            agent_id=np.zeros(0, np.int32),
            group_id=np.zeros(0, np.int32),
            group_reward=np.zeros(0, np.float32),
        )


class _ActionTupleBase(ABC):
    """Continuous (float32 ``(n, continuous_size)``) and discrete (``(n, branches)``) actions; adding one kind
    fills the other with an empty ``(n, 0)`` array, as mlagents-envs does."""

    def __init__(self, continuous: np.ndarray | None = None, discrete: np.ndarray | None = None):
        self._continuous: np.ndarray | None = None
        self._discrete: np.ndarray | None = None
        if continuous is not None:
            self.add_continuous(continuous)
        if discrete is not None:
            self.add_discrete(discrete)

    @property
    def continuous(self) -> np.ndarray:
        return self._continuous

    @property
    def discrete(self) -> np.ndarray:
        return self._discrete

    def add_continuous(self, continuous: np.ndarray) -> None:
        continuous = np.asarray(continuous)
        if continuous.dtype != np.float32:
            continuous = continuous.astype(np.float32, copy=False)
        if self._discrete is None:
            self._discrete = np.zeros((continuous.shape[0], 0), dtype=self.discrete_dtype)
        self._continuous = continuous

    def add_discrete(self, discrete: np.ndarray) -> None:
        discrete = np.asarray(discrete)
        if discrete.dtype != self.discrete_dtype:
            discrete = discrete.astype(self.discrete_dtype, copy=False)
        if self._continuous is None:
            self._continuous = np.zeros((discrete.shape[0], 0), dtype=np.float32)
        self._discrete = discrete

    @property
    @abstractmethod
    def discrete_dtype(self) -> np.dtype: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(continuous={self._continuous!r}, discrete={self._discrete!r})"


class ActionTuple(_ActionTupleBase, _CoreActionTuple):
    """Actions of both kinds for the agents of one behavior: continuous float32, discrete int32. Also a
    :class:`unirender.protocol.mlagents.ActionTuple`, so ``MLAgentsController.step`` takes it too."""

    __eq__ = object.__eq__  # identity, as mlagents-envs' (the core dataclass's field-wise == is ambiguous on arrays)
    __hash__ = object.__hash__

    @property
    def discrete_dtype(self) -> np.dtype:
        return np.int32


class ActionSpec(NamedTuple):
    """``continuous_size`` floats and one discrete choice per branch of ``discrete_branches``."""

    continuous_size: int
    discrete_branches: tuple[int, ...]

    def __eq__(self, other):
        return self.continuous_size == other.continuous_size and self.discrete_branches == other.discrete_branches

    def __hash__(self):
        return hash((self.continuous_size, self.discrete_branches))

    def __str__(self):
        return f"Continuous: {self.continuous_size}, Discrete: {self.discrete_branches}"

    def is_discrete(self) -> bool:
        return self.discrete_size > 0 and self.continuous_size == 0

    def is_continuous(self) -> bool:
        return self.discrete_size == 0 and self.continuous_size > 0

    @property
    def discrete_size(self) -> int:
        return len(self.discrete_branches)

    def empty_action(self, n_agents: int) -> ActionTuple:
        return ActionTuple(
            continuous=np.zeros((n_agents, self.continuous_size), dtype=np.float32),
            discrete=np.zeros((n_agents, self.discrete_size), dtype=np.int32),
        )

    def random_action(self, n_agents: int) -> ActionTuple:
        """Continuous uniform in [-1, 1], each branch uniform over its choices (numpy's global generator, as
        mlagents-envs: seed it with ``np.random.seed``)."""
        continuous = np.random.uniform(low=-1.0, high=1.0, size=(n_agents, self.continuous_size))
        discrete = np.zeros((n_agents, self.discrete_size), dtype=np.int32)
        if self.discrete_size > 0:
            discrete = np.column_stack(
                [np.random.randint(0, size, size=n_agents, dtype=np.int32) for size in self.discrete_branches]
            )
        return ActionTuple(continuous=continuous, discrete=discrete)

    def _validate_action(self, actions: ActionTuple, n_agents: int, name: str) -> ActionTuple:
        """The one action check every way in shares (``protocol.mlagents.actions``: a wrong shape in
        mlagents-envs' own words), its failure as ``UnityActionException``; float32 and int32 out."""
        spec = _CoreActionSpec(self.continuous_size, tuple(self.discrete_branches))
        try:
            checked = check_behavior_action(actions, spec, n_agents, name)
        except ActionError as exc:
            raise UnityActionException(str(exc)) from None
        return ActionTuple(continuous=checked.continuous, discrete=checked.discrete)

    @staticmethod
    def create_continuous(continuous_size: int) -> ActionSpec:
        return ActionSpec(continuous_size, ())

    @staticmethod
    def create_discrete(discrete_branches: tuple[int, ...]) -> ActionSpec:
        return ActionSpec(0, tuple(discrete_branches))

    @staticmethod
    def create_hybrid(continuous_size: int, discrete_branches: tuple[int, ...]) -> ActionSpec:
        return ActionSpec(continuous_size, tuple(discrete_branches))


class DimensionProperty(IntFlag):
    """The property of one dimension of an observation."""

    UNSPECIFIED = 0
    NONE = 1
    TRANSLATIONAL_EQUIVARIANCE = 2
    VARIABLE_SIZE = 4


class ObservationType(Enum):
    """The kind of information an observation carries."""

    DEFAULT = 0
    GOAL_SIGNAL = 1


class ObservationSpec(NamedTuple):
    """``shape`` (as declared: HWC or CHW for cameras), one :class:`DimensionProperty` per dimension, the
    :class:`ObservationType` and the sensor's ``name``."""

    shape: tuple[int, ...]
    dimension_property: tuple[DimensionProperty, ...]
    observation_type: ObservationType
    name: str


class BehaviorSpec(NamedTuple):
    """The observation specs (in the agents' observation order) and the action spec of one behavior."""

    observation_specs: list[ObservationSpec]
    action_spec: ActionSpec

    @staticmethod
    def from_core(core) -> BehaviorSpec:
        """From :class:`unirender.protocol.mlagents.BehaviorSpec`."""
        observations = [
            ObservationSpec(
                tuple(spec.shape),
                tuple(DimensionProperty(p) for p in spec.dimension_property),
                ObservationType(spec.observation_type),
                spec.name,
            )
            for spec in core.observation_specs
        ]
        action = core.action_spec
        return BehaviorSpec(observations, ActionSpec(action.continuous_size, tuple(action.discrete_branches)))


class BehaviorMapping(Mapping):
    """A read-only ``{behavior name: BehaviorSpec}`` view."""

    def __init__(self, specs: dict[BehaviorName, BehaviorSpec]):
        self._dict = specs

    def __len__(self) -> int:
        return len(self._dict)

    def __getitem__(self, behavior: BehaviorName) -> BehaviorSpec:
        return self._dict[behavior]

    def __iter__(self) -> Iterator[Any]:
        yield from self._dict


class BaseEnv(ABC):
    """The low-level API every environment implements (mlagents-envs' ``BaseEnv``)."""

    @abstractmethod
    def step(self) -> None:
        """Move the simulation forward (until at least one agent asks for a decision)."""

    @abstractmethod
    def reset(self) -> None:
        """Start new episodes."""

    @abstractmethod
    def close(self) -> None:
        """Close the environment."""

    @property
    @abstractmethod
    def behavior_specs(self) -> Mapping[str, BehaviorSpec]:
        """``{behavior name: BehaviorSpec}``; new behaviors may appear after any step."""

    @abstractmethod
    def set_actions(self, behavior_name: BehaviorName, action: ActionTuple) -> None:
        """Actions for all the decision agents of a behavior, in the order of its ``DecisionSteps``."""

    @abstractmethod
    def set_action_for_agent(self, behavior_name: BehaviorName, agent_id: AgentId, action: ActionTuple) -> None:
        """The action of one agent (arrays of first dimension 1)."""

    @abstractmethod
    def get_steps(self, behavior_name: BehaviorName) -> tuple[DecisionSteps, TerminalSteps]:
        """The decision and terminal steps of a behavior since the last step."""
