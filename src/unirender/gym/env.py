"""``UnityEnv``: one unirender session as a ``gymnasium.Env``.

Observations are what ``observations`` declares (built in :mod:`unirender.gym.observations`): one modality name
gives a plain ``Box`` image, a list a ``Dict``. Actions are a ``Discrete`` index into a declared action list;
reward and termination come from user callables. Launch, close, reuse after close and restarts are
:class:`~unirender.gym.session_env.SessionEnv`'s; this module is the AI2-THOR family's part of the gym layer
(``unirender.gym.families``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from unirender.cluster.base import Resources, Session, SessionBackend
from unirender.gym.observations import modality_list, observation_layout
from unirender.gym.session_env import SessionEnv
from unirender.gym.video import game_fps
from unirender.simulator import AI2THOR, Description

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


class UnityEnv(SessionEnv):
    """One unirender session of an AI2-THOR build (or the reference player) as a Gymnasium environment.

    ``environment`` (an ``EnvironmentSpec``, mapping or spec file) or ``controller_kwargs`` say what to launch.
    ``observations``: a modality name (``"rgb"``: a ``Box`` image, what ``CnnPolicy`` takes) or a list of them (a
    ``Dict``; default ``["rgb"]``); ``modalities`` is the older name of the list form. Depth is ``(H, W, 1)`` in
    ``[0, max_depth]`` metres (default bound: the camera's far clipping plane) as ``depth_dtype`` ``"float32"``
    (metres), ``"uint16"`` (millimetres) or ``"uint8"`` (the range over 0..255: an image to SB3's CNNs).
    ``actions``: the action list (names or action dicts; checked against the actions the player says it has,
    ``session.describe()``, when it says). ``reward_fn(previous_event, action, event)`` and
    ``termination_fn(event)``: the task (defaults: 0 reward, never terminates), as callables or, for configs, as
    ``"module:function"`` names. ``max_episode_steps`` truncates. ``scenes``: reset picks one with the env's
    seeded RNG (or ``options={"scene": ...}``). ``backend``: a ``SessionBackend`` to share (not closed by the env)
    or a kind for a private one (``backend_options``).

    ``close()`` stops the player (and a private backend); a later ``reset()`` launches a new one, so a closed env
    can be used again (Stable-Baselines3's render check closes, then resets). ``step()`` on a closed env raises
    ``gymnasium.error.ClosedEnvironmentError``. An ML-Agents environment (``protocol: mlagents``) is refused with
    a pointer to :class:`~unirender.gym.MLAgentsEnv` (``unirender.gym.make_env`` picks the env by family).
    """

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
        _refuse_other_families(controller_kwargs, environment)
        if observations is not None and modalities is not None:
            raise ValueError("give observations or modalities (its older name), not both")
        self._observations = observations if observations is not None else (modalities or ["rgb"])
        self.modalities, _ = modality_list(self._observations)
        self.actions = _action_dicts(actions)
        self.reward_fn = _callable(reward_fn, "reward_fn")
        self.termination_fn = _callable(termination_fn, "termination_fn")
        self.scenes = list(scenes) if scenes else None
        self._open(
            environment_controller_kwargs(environment, controller_kwargs, self.modalities),
            backend=backend,
            backend_options=backend_options,
            resources=resources,
            render_mode=render_mode,
            max_episode_steps=max_episode_steps,
        )
        self.metadata = {**self.metadata, "render_fps": game_fps(self._controller_kwargs)}  # the game's clock
        try:
            self._launch(session)
            _check_actions(self.actions, self.session.describe())
            self.layout = observation_layout(
                self._observations, self.session.last_event, depth_dtype=depth_dtype, max_depth=max_depth
            )
        except BaseException:
            self.close()
            raise
        self.observation_space = self.layout.space
        self.action_space = spaces.Discrete(len(self.actions))
        self.last_event = self.session.last_event

    def render(self):
        if self.render_mode == "rgb_array" and self.last_event is not None:
            return np.asarray(self.last_event.frame)
        return None

    # -- the family's part (SessionEnv's hooks) ---------------------------------------------------------------
    def _start_episode(self, seed: int | None, options: dict, launched: bool):
        scene = options.get("scene")
        if scene is None and self.scenes:
            scene = self.scenes[int(self.np_random.integers(len(self.scenes)))]
        self.last_event = self.session.reset(scene)
        return self._observe(self.last_event), self._info(self.last_event, None)

    def _session_action(self, action):
        return self.actions[int(action)]

    def _advance(self, action, event):
        act = self.actions[int(action)]
        previous, self.last_event = self.last_event, event
        reward = float(self.reward_fn(previous, act, event)) if self.reward_fn else 0.0
        terminated = bool(self.termination_fn(event)) if self.termination_fn else False
        return self._observe(event), reward, terminated, False, self._info(event, act)

    def _restarted(self, action):
        self.last_event = self.session.last_event  # the new player's first event
        return self._observe(self.last_event), self._info(self.last_event, self.actions[int(action)])

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


def _refuse_other_families(controller_kwargs: dict | None, environment: Any) -> None:
    from unirender.gym.families import environment_family

    family = environment_family(controller_kwargs, environment)
    if family != AI2THOR:
        raise ValueError(
            f"UnityEnv drives AI2-THOR builds (named actions, frame modalities); this environment is protocol "
            f"{family!r}: use unirender.gym.MLAgentsEnv for an ML-Agents game, or unirender.gym.make_env, which "
            "picks the env of the environment's family"
        )


def _check_actions(actions: list[dict], description: Description) -> None:
    """The declared actions against those the player says it implements (the reference player's table; a Unity
    build says nothing, and then anything goes)."""
    known = description.actions.names
    unknown = sorted({a["action"] for a in actions} - set(known)) if known else []
    if unknown:
        raise ValueError(f"actions {unknown} are not actions of this player; it has {list(known)}")
