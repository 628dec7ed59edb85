"""``UnityEnvironment``: mlagents-envs 1.1's low-level API over :class:`MLAgentsController` (see
``docs/mlagents.md``, "Drop-in for mlagents-envs"). Code written against ``mlagents_envs.environment`` runs with
the import changed to ``unirender.mlagents``.

The launch, the gRPC server, the protocol and the observation decoding are the controller's; this module only
maps mlagents-envs' arguments onto it, keeps mlagents-envs' per-behavior state (``get_steps``, ``set_actions``),
routes side channels, and raises mlagents-envs' exceptions with its messages (plus what unirender knows: the
player's exit status and the last lines of its log).
"""

from __future__ import annotations

import glob
import logging
import os
import socket
import sys
import types
import warnings
import weakref
from collections.abc import Mapping

import numpy as np

from unirender.errors import PlayerCrashedError, PlayerError, PlayerTimeoutError, UnirenderError
from unirender.mlagents.base_env import (
    ActionTuple,
    AgentId,
    BaseEnv,
    BehaviorMapping,
    BehaviorName,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from unirender.mlagents.controller import BUILTIN, MLAgentsController
from unirender.mlagents.exception import (
    UnityActionException,
    UnityCommunicationException,
    UnityCommunicatorStoppedException,
    UnityEnvironmentException,
    UnityException,
    UnityObservationException,
    UnityTimeOutException,
    UnityWorkerInUseException,
)
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.mlagents.side_channel.side_channel_manager import SideChannelManager

logger = logging.getLogger(__name__)

TIMEOUT_MESSAGE = (  # mlagents-envs' text; unirender adds the player's state and log tail below it
    "The Unity environment took too long to respond. Make sure that :\n"
    "\t The environment does not need user interaction to launch\n"
    '\t The Agents\' Behavior Parameters > Behavior Type is set to "Default"\n'
    "\t The environment and the Python interface have compatible versions.\n"
    "\t If you're running on a headless server without graphics support, turn off display "
    "by either passing --no-graphics option or build your Unity executable as server build."
)


class _DropInController(MLAgentsController):
    """The controller as mlagents-envs drives a game: no engine settings of its own (mlagents-envs sends them
    only through an ``EngineConfigurationChannel``), and no restarts (mlagents-envs' ``UnityEnvironment`` raises
    when the game dies; restarting is the trainer's business)."""

    def _settings_messages(self) -> list:
        return []


def resolve_executable(file_name: str) -> str | None:
    """mlagents-envs' ``validate_environment_path``: the name with or without its extension (``.x86_64``,
    ``.x86``, ``.app``, ``.exe``), relative to the working directory or not; None when nothing matches."""
    env_path = file_name.strip()
    for extension in (".app", ".exe", ".x86_64", ".x86"):
        env_path = env_path.replace(extension, "")
    if not (glob.glob(env_path) or glob.glob(env_path + ".*")):
        return None
    cwd = os.getcwd()
    if sys.platform == "darwin":
        name = os.path.basename(os.path.normpath(env_path))
        patterns = [os.path.join(root, env_path + ".app", "Contents", "MacOS", leaf)
                    for leaf in (name, "*") for root in (cwd, "")]  # fmt: skip
    elif sys.platform == "win32":
        patterns = [os.path.join(cwd, env_path + ".exe"), env_path + ".exe"]
    else:
        patterns = [os.path.join(cwd, env_path) + ".x86_64", os.path.join(cwd, env_path) + ".x86",
                    env_path + ".x86_64", env_path + ".x86"]  # fmt: skip
    for pattern in patterns:
        candidates = glob.glob(pattern)
        if candidates:
            return candidates[0]
    return env_path if os.path.isfile(env_path) else None


def _store_or_path(file_name: str) -> str | None:
    """A build-store reference (``name:tag``, ``sha256:<digest>``) -> its executable; else mlagents-envs' lookup."""
    from unirender.builds import BuildError, is_reference, resolve_build

    if not is_reference(file_name):
        return resolve_executable(file_name)
    try:
        return resolve_build(file_name).executable
    except BuildError as exc:
        raise UnityEnvironmentException(f"Couldn't launch the {file_name} environment. {exc}") from None


def _check_port(port: int, worker_id: int) -> None:
    """mlagents-envs' ``check_port``: a port someone listens on is a worker still in use."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to reuse
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise UnityWorkerInUseException(worker_id) from None


def _exit_message(crash: PlayerCrashedError) -> str:
    signal_name = f" ({crash.signal_name})" if crash.signal_name else ""
    return f"Environment shut down with return code {crash.returncode}{signal_name}."


class UnityEnvironment(BaseEnv):
    """A Unity ML-Agents game (or ``file_name="builtin"``: the reference player's ReachTarget) driven through
    mlagents-envs 1.1's low-level API.

    ``file_name=None`` waits for the Unity Editor (Play mode) on ``base_port`` or 5004. With a build and
    ``base_port=None``, unirender picks a free port, so environments never collide whatever their
    ``worker_id``; with ``base_port`` set the port is ``base_port + worker_id`` exactly, as mlagents-envs has it
    (``UnityWorkerInUseException`` when it is taken). ``timeout_wait`` bounds the connection and every wait for
    the game (``UnityTimeOutException``, with the player log's last lines); a crashed game raises
    ``UnityEnvironmentException`` within a second, with its exit status and log tail.
    """

    API_VERSION = "1.5.0"
    DEFAULT_EDITOR_PORT = 5004
    BASE_ENVIRONMENT_PORT = 5005
    _PORT_COMMAND_LINE_ARG = "--mlagents-port"

    def __init__(
        self,
        file_name: str | None = None,
        worker_id: int = 0,
        base_port: int | None = None,
        seed: int = 0,
        no_graphics: bool = False,
        no_graphics_monitor: bool = False,
        timeout_wait: int = 60,
        additional_args: list[str] | None = None,
        side_channels: list[SideChannel] | None = None,
        log_folder: str | None = None,
        num_areas: int = 1,
    ):
        self._loaded = False
        self._worker_id = worker_id
        self._timeout_wait = timeout_wait
        self._no_graphics = bool(no_graphics or (no_graphics_monitor and worker_id != 0))
        self._additional_args = list(additional_args or [])
        self._log_folder = log_folder
        self._side_channel_manager = SideChannelManager(side_channels)
        if file_name is None and worker_id != 0:
            raise UnityEnvironmentException(
                "If the environment name is None, the worker-id must be 0 in order to connect with the Editor."
            )
        if file_name is None:
            executable = None
            port = (self.DEFAULT_EDITOR_PORT if base_port is None else base_port) + worker_id
        else:
            executable = BUILTIN if str(file_name) == BUILTIN else _store_or_path(os.fspath(file_name))
            if executable is None:
                raise UnityEnvironmentException(
                    f"Couldn't launch the {file_name} environment. Provided filename does not match any environments."
                )
            if executable != BUILTIN and not os.access(executable, os.X_OK):
                raise UnityEnvironmentException(
                    "Error when trying to launch environment - make sure permissions are set correctly. "
                    f'For example "chmod -R 755 {executable}"'
                )
            port = None if base_port is None else base_port + worker_id
        if port is not None:
            _check_port(port, worker_id)
            logger.info(f"Listening on port {port}.")
        self._port = port
        try:
            self._controller = _DropInController(
                executable, port=port, seed=seed, no_graphics=self._no_graphics, timeout=timeout_wait,
                start_timeout=timeout_wait, max_restarts=0, args=self._additional_args, log_dir=log_folder,
                num_areas=num_areas, allow_blank_cameras=True,  # mlagents-envs allows it: warned below
            )  # fmt: skip
        except PlayerError as exc:
            if port is not None and "cannot listen" in str(exc):
                raise UnityWorkerInUseException(worker_id) from exc
            raise self._translated(exc) from exc
        except Exception as exc:
            translated = self._translated(exc)
            if translated is exc:
                raise
            raise translated from exc
        self._finalizer = weakref.finalize(self, self._controller.close)  # also at interpreter exit
        self._loaded = True
        caps = self._controller.unity.capabilities if self._controller.unity else {}
        self.academy_capabilities = types.SimpleNamespace(**caps)
        self._env_state: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self._env_specs: dict[str, BehaviorSpec] = {}
        self._env_actions: dict[str, ActionTuple] = {}
        self._is_first_message = True

    # -- the low-level API -----------------------------------------------------------------------------------
    def reset(self) -> None:
        if not self._loaded:
            raise UnityEnvironmentException("No Unity environment is loaded.")
        self._queue_side_channels()
        self._update_state(self._call(self._controller.reset))
        if self._is_first_message and self._no_graphics:
            self._warn_blank_cameras()
        self._is_first_message = False
        self._env_actions.clear()

    def _warn_blank_cameras(self) -> None:
        """mlagents-envs runs a camera game with no_graphics (black images) silently; unirender says so once."""
        cameras = [f"{name}/{obs.name}" for name, spec in self._env_specs.items()
                   for obs in spec.observation_specs if len(obs.shape) == 3]  # fmt: skip
        if cameras:
            from unirender.simulator import FlatCameraWarning

            warnings.warn(f"no_graphics=True with camera sensors ({', '.join(cameras)}): every camera observation "
                          "is black; leave no_graphics off to train on them (unirender renders headless)",
                          FlatCameraWarning, stacklevel=3)
    def step(self) -> None:
        if self._is_first_message:
            return self.reset()
        if not self._loaded:
            raise UnityEnvironmentException("No Unity environment is loaded.")
        from unirender.protocol.mlagents.steps import ActionTuple as CoreActions

        # behaviors without actions get zeros from the controller, as mlagents-envs fills them in
        actions = {name: CoreActions(a.continuous, a.discrete) for name, a in self._env_actions.items()}
        self._queue_side_channels()
        self._update_state(self._call(lambda: self._controller.step(actions)))
        self._env_actions.clear()

    @property
    def behavior_specs(self) -> Mapping[str, BehaviorSpec]:
        return BehaviorMapping(self._env_specs)

    def set_actions(self, behavior_name: BehaviorName, action: ActionTuple) -> None:
        self._assert_behavior_exists(behavior_name)
        if behavior_name not in self._env_state:
            return
        action_spec = self._env_specs[behavior_name].action_spec
        n_agents = len(self._env_state[behavior_name][0])
        self._env_actions[behavior_name] = action_spec._validate_action(action, n_agents, behavior_name)

    def set_action_for_agent(self, behavior_name: BehaviorName, agent_id: AgentId, action: ActionTuple) -> None:
        self._assert_behavior_exists(behavior_name)
        if behavior_name not in self._env_state:
            return
        action_spec = self._env_specs[behavior_name].action_spec
        action = action_spec._validate_action(action, 1, behavior_name)
        if behavior_name not in self._env_actions:
            n_agents = len(self._env_state[behavior_name][0])
            self._env_actions[behavior_name] = action_spec.empty_action(n_agents)
        try:
            index = np.where(self._env_state[behavior_name][0].agent_id == agent_id)[0][0]
        except IndexError as ie:
            raise IndexError(f"agent_id {agent_id} is did not request a decision at the previous step") from ie
        if action_spec.continuous_size > 0:
            self._env_actions[behavior_name].continuous[index] = action.continuous[0, :]
        if action_spec.discrete_size > 0:
            self._env_actions[behavior_name].discrete[index] = action.discrete[0, :]

    def get_steps(self, behavior_name: BehaviorName) -> tuple[DecisionSteps, TerminalSteps]:
        self._assert_behavior_exists(behavior_name)
        return self._env_state[behavior_name]

    def close(self) -> None:
        """Tell the game to quit, then stop it; frees the port, the log and any X server."""
        if not self._loaded:
            raise UnityEnvironmentException("No Unity environment is loaded.")
        self._loaded = False
        self._finalizer()

    # -- unirender extras ------------------------------------------------------------------------------------
    @property
    def controller(self) -> MLAgentsController:
        """The :class:`MLAgentsController` underneath (its ``port``, ``log_path``, ``last_event``, ``unity``)."""
        return self._controller

    @property
    def port(self) -> int | None:
        return self._controller.port

    @property
    def log_path(self) -> str:
        return self._controller.log_path

    def __enter__(self) -> UnityEnvironment:
        return self

    def __exit__(self, *exc) -> None:
        if self._loaded:
            self.close()

    # -- internals ------------------------------------------------------------------------------------------
    def _assert_behavior_exists(self, behavior_name: str) -> None:
        if behavior_name not in self._env_specs:
            raise UnityActionException(
                f"The group {behavior_name} does not correspond to an existing agent group in the environment"
            )

    def _queue_side_channels(self) -> None:
        for record in self._side_channel_manager.outgoing_records():
            self._controller.send_side_channel(record.channel_id, record.payload)

    def _update_state(self, event) -> None:
        if event.new_behaviors:
            core_specs = self._controller.behavior_specs
            for name in event.new_behaviors:
                self._env_specs[name] = BehaviorSpec.from_core(core_specs[name])
                logger.info(f"Connected new brain: {name}")
        for name, spec in self._env_specs.items():
            if name in event.decision_steps:
                self._env_state[name] = (DecisionSteps.from_core(event.decision_steps[name]),
                                         TerminalSteps.from_core(event.terminal_steps[name]))  # fmt: skip
            else:
                self._env_state[name] = (DecisionSteps.empty(spec), TerminalSteps.empty(spec))
        if event.stats or event.side_channel_messages:
            from unirender.protocol.mlagents.side_channels import stats_message

            stats = [stats_message(key, value, aggregation)
                     for key, values in event.stats.items() for value, aggregation in values]  # fmt: skip
            self._side_channel_manager.deliver(stats + list(event.side_channel_messages))

    def _call(self, operation):
        try:
            return operation()
        except Exception as exc:
            translated = self._translated(exc)
            if translated is exc:
                raise
            raise translated from exc

    @staticmethod
    def _translated(exc: BaseException) -> BaseException:
        """unirender's error -> the mlagents-envs exception a user's code catches (the original is its cause)."""
        from unirender.protocol.errors import ProtocolError
        from unirender.protocol.mlagents.errors import (
            CommunicatorStoppedError,
            NonFiniteError,
            ObservationError,
            SideChannelError,
            VersionMismatchError,
        )

        if isinstance(exc, PlayerTimeoutError):
            return UnityTimeOutException(f"{TIMEOUT_MESSAGE}\n{exc}")
        if isinstance(exc, PlayerCrashedError):
            return UnityEnvironmentException(f"{_exit_message(exc)}\n{exc}")
        if isinstance(exc, CommunicatorStoppedError):
            return UnityCommunicatorStoppedException("Communicator has exited.")
        if isinstance(exc, VersionMismatchError):
            return UnityEnvironmentException(
                "The communication API version is not compatible between Unity and python. "
                f"Python API: {exc.ours}, Unity API: {exc.theirs}.\n "
                "Please find the versions that work best together from our release page.\n"
                "https://github.com/Unity-Technologies/ml-agents/releases"
            )
        if isinstance(exc, NonFiniteError):  # mlagents-envs' rpc_utils raises a bare RuntimeError, with this text
            return RuntimeError(f"The {exc.source} provided had {exc.kind} values.")
        if isinstance(exc, ObservationError):
            return UnityObservationException(str(exc))
        if isinstance(exc, SideChannelError):
            return UnityEnvironmentException(
                "There was a problem reading a message in a SideChannel. Please make sure the version of MLAgents "
                f"in Unity is compatible with the Python version. ({exc})"
            )
        if isinstance(exc, ProtocolError):
            return UnityCommunicationException(str(exc))
        if isinstance(exc, PlayerError):
            return UnityEnvironmentException(str(exc))
        if isinstance(exc, UnirenderError) and not isinstance(exc, UnityException):  # e.g. no platform can run it
            return UnityEnvironmentException(str(exc))
        if isinstance(exc, ValueError):  # an action the core refused (NaN, a discrete value out of range)
            return UnityActionException(str(exc))
        return exc
