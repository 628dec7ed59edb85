"""``UnityEnv``: one unirender session as a ``gymnasium.Env``.

Observations are what ``observations`` declares (built in :mod:`unirender.gym.observations`): one modality name
gives a plain ``Box`` image, a list a ``Dict``. Actions are a ``Discrete`` index into a declared action list;
reward and termination come from user callables. A closed env relaunches its player on the next ``reset()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from unirender.cluster.base import Resources, Session, SessionBackend
from unirender.cluster.registry import create_backend
from unirender.errors import RestartError
from unirender.gym.observations import modality_list, observation_layout

DEFAULT_ACTIONS = ("MoveAhead", "RotateLeft", "RotateRight", "LookUp", "LookDown")

# (previous_event, action dict, event) -> reward;  event -> terminated
RewardFn = Callable[[Any, dict, Any], float]
TerminationFn = Callable[[Any], bool]


def _callable(value: Any, name: str) -> Callable | None:
    """A task callable, or its ``"module:function"`` name (a spec or config file can name it)."""
    if value is None or callable(value):
        return value
    if isinstance(value, str) and ":" in value:
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


def environment_controller_kwargs(
    environment: Any = None, controller_kwargs: dict | None = None, modalities: str | Sequence[str] = ("rgb",)
) -> dict:
    """Controller kwargs from an environment spec (``EnvironmentSpec``, mapping, or YAML/JSON/TOML path; loaded by
    ``unirender.spec.load_environment``, so errors are ``SpecError`` with key paths) or given as is, plus the
    Initialize flags that make the player render ``modalities``."""
    from unirender.spec.models import MODALITY_INITIALIZE_FLAG

    modalities, _ = modality_list(modalities)
    if environment is not None and controller_kwargs is not None:
        raise ValueError("give either environment or controller_kwargs, not both")
    if environment is not None:
        from unirender.spec import load_environment

        kwargs = load_environment(environment).controller_kwargs()
    else:
        kwargs = dict(controller_kwargs or {"executable": "builtin"})
    for modality in modalities:
        flag = MODALITY_INITIALIZE_FLAG[modality]
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


class UnityEnv(gymnasium.Env):
    """One unirender session as a Gymnasium environment.

    ``environment`` (an ``EnvironmentSpec``, mapping or spec file) or ``controller_kwargs`` say what to launch.
    ``observations``: a modality name (``"rgb"``: a ``Box`` image, what ``CnnPolicy`` takes) or a list of them (a
    ``Dict``; default ``["rgb"]``); ``modalities`` is the older name of the list form. Depth is ``(H, W, 1)`` in
    ``[0, max_depth]`` metres (default bound: the camera's far clipping plane) as ``depth_dtype`` ``"float32"``
    (metres), ``"uint16"`` (millimetres) or ``"uint8"`` (the range over 0..255: an image to SB3's CNNs).
    ``actions``: the action list (names or action dicts). ``reward_fn(previous_event, action, event)`` and
    ``termination_fn(event)``: the task (defaults: 0 reward, never terminates), as callables or, for configs, as
    ``"module:function"`` names. ``max_episode_steps`` truncates. ``scenes``: reset picks one with the env's
    seeded RNG (or ``options={"scene": ...}``). ``backend``: a ``SessionBackend`` to share (not closed by the env)
    or a kind for a private one (``backend_options``).

    ``close()`` stops the player (and a private backend); a later ``reset()`` launches a new one, so a closed env
    can be used again (Stable-Baselines3's render check closes, then resets). ``step()`` on a closed env raises
    ``gymnasium.error.ClosedEnvironmentError``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: Any = None,
        observations: str | Sequence[str] | None = None,
        modalities: Sequence[str] | None = None,
        depth_dtype: str = "float32",
        max_depth: float | None = None,
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
        if observations is not None and modalities is not None:
            raise ValueError("give observations or modalities (its older name), not both")
        self._observations = observations if observations is not None else (modalities or ["rgb"])
        self.modalities, _ = modality_list(self._observations)
        self.render_mode = render_mode
        self.actions = _action_dicts(actions)
        self.reward_fn = _callable(reward_fn, "reward_fn")
        self.termination_fn = _callable(termination_fn, "termination_fn")
        self.max_episode_steps = max_episode_steps
        self.scenes = list(scenes) if scenes else None
        self._controller_kwargs = environment_controller_kwargs(
            environment, controller_kwargs, self.modalities
        )
        self._resources = resources
        self._backend_kind = backend if isinstance(backend, str) else None
        self._backend_options = backend_options or {}
        self.backend: SessionBackend | None = None if self._backend_kind else backend
        self.session: Session | None = None
        try:
            self._launch(session)
            self.layout = observation_layout(
                self._observations, self.session.last_event, depth_dtype=depth_dtype, max_depth=max_depth
            )
        except BaseException:
            self.close()
            raise
        self.observation_space = self.layout.space
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
        if self.session is None:
            self._launch(None)
        self.last_event = self.session.reset(scene)
        self._elapsed = 0
        return self._observe(self.last_event), self._info(self.last_event, None)

    def step(self, action):
        if self.session is None:
            raise gymnasium.error.ClosedEnvironmentError(
                "this UnityEnv was closed: call reset() to launch a new player before step()"
            )
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
        try:
            if session is not None:
                session.stop()
        finally:
            if getattr(self, "_backend_kind", None) and self.backend is not None:
                backend, self.backend = self.backend, None
                backend.close()

    # -- internals ----------------------------------------------------------------------------------------
    def _launch(self, session: Session | None) -> None:
        """Start the player (a private backend first, if this env owns one)."""
        if self.backend is None:
            self.backend = create_backend(self._backend_kind, **self._backend_options)
        self.session = session or self.backend.create_session(
            self._controller_kwargs, resources=self._resources
        )

    def _observe(self, event: Any):
        return self.layout.observe(event)

    @staticmethod
    def _info(event: Any, action: dict | None) -> dict:
        if event is None:
            success, error = True, ""
        else:  # step keys: read without decoding the rest of the metadata (~0.4 ms at AI2-THOR sizes)
            success, error = event.peek_metadata("lastActionSuccess", True), event.peek_metadata("errorMessage")
        return {
            "last_action_success": bool(success),
            "error_message": str(error or ""),
            "action": action["action"] if action else "",
        }
