"""Gymnasium environments over unirender sessions, on any session backend.

``UnityEnv`` is one session as a ``gymnasium.Env``: observations are a ``Dict`` of the requested modalities
(``rgb``, ``depth``, ``instance_segmentation``, ``semantic_segmentation``, ``normals``, ``flow``), actions a
``Discrete`` index into a declared action list, reward and termination from user callables. ``UnityVectorEnv``
steps N such sessions concurrently behind Gymnasium's ``VectorEnv`` API (next-step autoreset).

Registered as ``unirender/Unity-v0``: ``gymnasium.make("unirender.gym:unirender/Unity-v0", ...)`` imports this
module on the way; ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`` gives the vector env.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from unirender.cluster.base import Resources, Session, SessionBackend
from unirender.cluster.registry import create_backend
from unirender.errors import RestartError

ENV_ID = "unirender/Unity-v0"

# Modality -> the Event attribute holding it (AI2-THOR names).
MODALITY_ATTRIBUTE = {
    "rgb": "frame",
    "depth": "depth_frame",
    "instance_segmentation": "instance_segmentation_frame",
    "semantic_segmentation": "semantic_segmentation_frame",
    "normals": "normals_frame",
    "flow": "flow_frame",
}

DEFAULT_ACTIONS = ("MoveAhead", "RotateLeft", "RotateRight", "LookUp", "LookDown")

# (previous_event, action dict, event) -> reward;  event -> terminated
RewardFn = Callable[[Any, dict, Any], float]
TerminationFn = Callable[[Any], bool]


def _callable(value: Any, name: str) -> Callable | None:
    """A task callable, or its ``"module:function"`` name (a spec or config file can name it)."""
    if value is None or callable(value):
        return value
    if isinstance(value, str) and ":" in value:
        import importlib

        module, _, attr = value.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for part in attr.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{name} {value!r} cannot be imported: {exc}") from None
        if callable(found):
            return found
    raise ValueError(f"{name} must be a callable or a 'module:function' name, not {value!r}")


def _initialize_flag(modality: str) -> str | None:
    from unirender.spec.models import MODALITY_INITIALIZE_FLAG

    return MODALITY_INITIALIZE_FLAG[modality]


def environment_controller_kwargs(
    environment: Any = None, controller_kwargs: dict | None = None, modalities: Sequence[str] = ("rgb",)
) -> dict:
    """Controller kwargs from an environment spec (``EnvironmentSpec``, mapping, or YAML/JSON/TOML path; loaded by
    ``unirender.spec.load_environment``, so errors are ``SpecError`` with key paths) or given as is, plus the
    Initialize flags that make the player render ``modalities``."""
    unknown = [m for m in modalities if m not in MODALITY_ATTRIBUTE]
    if unknown or not modalities:
        raise ValueError(f"unknown modalities {unknown}; choose from {list(MODALITY_ATTRIBUTE)}")
    if environment is not None and controller_kwargs is not None:
        raise ValueError("give either environment or controller_kwargs, not both")
    if environment is not None:
        from unirender.spec import load_environment

        kwargs = load_environment(environment).controller_kwargs()
    else:
        kwargs = dict(controller_kwargs or {"executable": "builtin"})
    for modality in modalities:
        flag = _initialize_flag(modality)
        if flag:
            kwargs[flag] = True
    return kwargs


def _action_dicts(actions: Sequence[str | dict]) -> list[dict]:
    if not actions:
        raise ValueError("the action list is empty")
    out = []
    for i, action in enumerate(actions):
        if isinstance(action, str):
            action = {"action": action}
        if not isinstance(action, dict) or not isinstance(action.get("action"), str):
            raise ValueError(f"action {i}: give a name or a mapping with an 'action' name, not {action!r}")
        out.append(dict(action))
    return out


def _space_for(modality: str, array: np.ndarray) -> spaces.Box:
    if array.dtype == np.uint8:
        return spaces.Box(0, 255, array.shape, np.uint8)
    low = 0.0 if modality == "depth" else -np.inf
    return spaces.Box(low, np.inf, array.shape, array.dtype)


class UnityEnv(gymnasium.Env):
    """One unirender session as a Gymnasium environment.

    ``environment`` (an ``EnvironmentSpec``, mapping or spec file) or ``controller_kwargs`` say what to launch; ``modalities`` what
    to observe; ``actions`` the action list (names or action dicts); ``reward_fn(previous_event, action, event)``
    and ``termination_fn(event)`` the task (defaults: 0 reward, never terminates), as callables or, for configs,
    as ``"module:function"`` names imported here; ``max_episode_steps`` truncates.
    ``scenes``: reset picks one with the env's seeded RNG (or ``options={"scene": ...}``). ``backend``: a
    ``SessionBackend`` to share (not closed by the env) or a kind for a private one (``backend_options``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: Any = None,
        modalities: Sequence[str] = ("rgb",),
        actions: Sequence[str | dict] = DEFAULT_ACTIONS,
        reward_fn: RewardFn | str | None = None,
        termination_fn: TerminationFn | str | None = None,
        max_episode_steps: int | None = None,
        scenes: Sequence[str] | None = None,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        resources: Resources | None = None,
        render_mode: str | None = None,
        session: Session | None = None,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError("max_episode_steps must be >= 1")
        self.render_mode = render_mode
        self.modalities = tuple(modalities)
        self.actions = _action_dicts(actions)
        self.reward_fn = _callable(reward_fn, "reward_fn")
        self.termination_fn = _callable(termination_fn, "termination_fn")
        self.max_episode_steps = max_episode_steps
        self.scenes = list(scenes) if scenes else None
        kwargs = environment_controller_kwargs(environment, controller_kwargs, self.modalities)

        self._owns_backend = isinstance(backend, str)
        self.backend = create_backend(backend, **(backend_options or {})) if self._owns_backend else backend
        self.session: Session | None = None
        try:
            self.session = session or self.backend.create_session(kwargs, resources=resources)
            self.observation_space = self._observation_space(kwargs, self.session.last_event)
        except BaseException:
            self.close()
            raise
        self.action_space = spaces.Discrete(len(self.actions))
        self.last_event = self.session.last_event
        self._elapsed = 0

    # -- gymnasium.Env -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        scene = options.get("scene")
        if scene is None and self.scenes:
            scene = self.scenes[int(self.np_random.integers(len(self.scenes)))]
        self.last_event = self.session.reset(scene)
        self._elapsed = 0
        return self._observe(self.last_event), self._info(self.last_event, None)

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        act = self.actions[int(action)]
        previous = self.last_event
        try:
            event = self.session.step(act)
        except RestartError as exc:
            # The player (or its actor) died and a new one took over: the episode is lost, so it ends here as
            # truncated, showing the new player's first view; the next reset() starts over.
            self.last_event = self.session.last_event
            info = {**self._info(self.last_event, act), "restarted": True, "error_message": str(exc)}
            return self._observe(self.last_event), 0.0, False, True, info
        self.last_event = event
        self._elapsed += 1
        reward = float(self.reward_fn(previous, act, event)) if self.reward_fn else 0.0
        terminated = bool(self.termination_fn(event)) if self.termination_fn else False
        truncated = self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps
        return self._observe(event), reward, terminated, bool(truncated), self._info(event, act)

    def render(self):
        if self.render_mode == "rgb_array" and self.last_event is not None:
            return np.asarray(self.last_event.frame)
        return None

    def close(self):
        session, self.session = getattr(self, "session", None), None
        if session is not None:
            session.stop()
        if getattr(self, "_owns_backend", False) and self.backend is not None:
            self.backend.close()
            self.backend = None

    # -- internals ----------------------------------------------------------------------------------------
    def _observation_space(self, kwargs: dict, event: Any) -> spaces.Dict:
        """Shapes and dtypes as the player delivers them, read from the session's first event."""
        if event is None:
            raise RuntimeError("the session has no first event to read the observation layout from")
        boxes = {}
        for modality in self.modalities:
            array = getattr(event, MODALITY_ATTRIBUTE[modality], None)
            if array is None:
                raise ValueError(
                    f"the player sent no {modality!r} frame although {_initialize_flag(modality) or 'it'} was "
                    "requested; this executable may not support that modality"
                )
            boxes[modality] = _space_for(modality, np.asarray(array))
        return spaces.Dict(boxes)

    def _observe(self, event: Any) -> dict[str, np.ndarray]:
        obs = {}
        for modality, box in self.observation_space.spaces.items():
            array = np.asarray(getattr(event, MODALITY_ATTRIBUTE[modality]))
            if array.shape != box.shape:
                raise ValueError(
                    f"{modality} frame has shape {array.shape}, the observation space {box.shape}"
                )
            obs[modality] = array.astype(box.dtype, copy=False)
        return obs

    @staticmethod
    def _info(event: Any, action: dict | None) -> dict:
        metadata = event.metadata if event is not None else {}
        return {
            "last_action_success": bool(metadata.get("lastActionSuccess", True)),
            "error_message": str(metadata.get("errorMessage") or ""),
            "action": action["action"] if action else "",
        }


class UnityVectorEnv(VectorEnv):
    """``num_envs`` :class:`UnityEnv` sessions on one backend, stepped concurrently (one thread per env; each
    session is a separate player or actor, so the work overlaps). Next-step autoreset: after an episode ends, the
    following ``step`` resets that env and returns its first observation with reward 0."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        num_envs: int,
        controller_kwargs: dict | None = None,
        *,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        **env_kwargs: Any,
    ):
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.num_envs = num_envs
        self._owns_backend = isinstance(backend, str)
        self.backend = create_backend(backend, **(backend_options or {})) if self._owns_backend else backend
        # Long-lived threads: a player the Controller restarts inside step() is a child of the stepping thread.
        self._pool = ThreadPoolExecutor(max_workers=num_envs, thread_name_prefix="unirender-vec")
        self.envs: list[UnityEnv] = []
        futures = [
            self._pool.submit(UnityEnv, controller_kwargs, backend=self.backend, **env_kwargs)
            for _ in range(num_envs)
        ]
        errors = []
        for future in futures:
            try:
                self.envs.append(future.result())
            except BaseException as exc:
                errors.append(exc)
        if errors:
            self.close()
            raise errors[0]
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = first.render_mode
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"{len(seed)} seeds given for {self.num_envs} envs")
            seeds = list(seed)
        results = list(
            self._pool.map(lambda i: self.envs[i].reset(seed=seeds[i], options=options), range(self.num_envs))
        )
        self._autoreset[:] = False
        infos: dict = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        return self._batch([obs for obs, _ in results]), infos

    def step(self, actions):
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected {self.num_envs} actions, got shape {actions.shape}")

        def one(i: int):
            env = self.envs[i]
            if self._autoreset[i]:
                obs, info = env.reset()
                return obs, 0.0, False, False, info
            return env.step(int(actions[i]))

        results = list(self._pool.map(one, range(self.num_envs)))
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminations = np.array([r[2] for r in results], dtype=bool)
        truncations = np.array([r[3] for r in results], dtype=bool)
        infos: dict = {}
        for i, result in enumerate(results):
            infos = self._add_info(infos, result[4], i)
        self._autoreset = terminations | truncations
        return self._batch([r[0] for r in results]), rewards, terminations, truncations, infos

    def render(self):
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any):
        for env in self.envs:
            try:
                env.close()
            except Exception:
                pass
        self._pool.shutdown(wait=True)
        if self._owns_backend and self.backend is not None:
            self.backend.close()
            self.backend = None

    def _batch(self, observations: list[dict]) -> dict[str, np.ndarray]:
        return {
            key: np.stack([obs[key] for obs in observations]) for key in self.single_observation_space.spaces
        }


gymnasium.register(
    id=ENV_ID,
    entry_point="unirender.gym:UnityEnv",
    vector_entry_point="unirender.gym:UnityVectorEnv",
    disable_env_checker=False,
)
