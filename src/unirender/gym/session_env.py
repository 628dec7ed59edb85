"""``SessionEnv``: what every family's ``gymnasium.Env`` shares, written once.

A session env owns (or borrows) a session backend, launches its player on creation and again on the first
``reset()`` after ``close()``, refuses ``step()`` on a closed env, checks actions against its space, counts steps
for ``max_episode_steps`` and turns a player restart (``RestartError``: the controller restarted a crashed player,
or Ray a dead actor; the episode is lost) into a *truncated* step showing the new player's first view, with
``info["restarted"] = True``. The family's parts are the hooks below, implemented by the family's env class
(``UnityEnv``: AI2-THOR; ``MLAgentsEnv``: ML-Agents), which ``unirender.gym.families`` names per family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium

from unirender.cluster.base import Resources, Session, SessionBackend
from unirender.cluster.registry import create_backend
from unirender.errors import RestartError


class SessionEnv(gymnasium.Env):
    """One session as a Gymnasium env; a family's env subclasses it and implements:

    - ``_start_episode(seed, options, launched) -> (obs, info)``: new episode(s) on ``self.session``
      (``launched``: just launched by this reset, with :meth:`_launch_overrides`; the hook may relaunch itself);
    - ``_session_action(action)``: what the session's ``step`` is given for an action inside ``action_space``
      (checked here);
    - ``_advance(action, event) -> (obs, reward, terminated, truncated, info)``: the step's outcome from the
      event the session's step of ``_session_action(action)`` returned (the hook may step the session again);
      ``max_episode_steps`` is applied here;
    - ``_restarted(action) -> (obs, info)``: the new player's first view after a restart during that step.

    and sets ``observation_space`` and ``action_space`` (from ``session.describe()`` where it can) in its
    ``__init__``, after :meth:`_open` and :meth:`_launch`.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    session: Session | None = None
    backend: SessionBackend | None = None
    _backend_kind: str | None = None

    def _open(
        self,
        controller_kwargs: dict,
        *,
        backend: SessionBackend | str,
        backend_options: dict | None,
        resources: Resources | None,
        render_mode: str | None,
        max_episode_steps: int | None,
    ) -> None:
        """Check and keep the shared arguments (nothing is launched yet)."""
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError("max_episode_steps must be >= 1")
        self.render_mode = render_mode
        self.max_episode_steps = max_episode_steps
        self._controller_kwargs = controller_kwargs
        self._resources = resources
        self._backend_kind = backend if isinstance(backend, str) else None
        self._backend_options = backend_options or {}
        self.backend = None if self._backend_kind else backend
        self.session = None
        self._elapsed = 0

    # -- gymnasium.Env -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        launched = self.session is None
        if launched:
            self._launch(**self._launch_overrides(seed))
        obs, info = self._start_episode(seed, options or {}, launched)
        self._elapsed = 0
        return obs, info

    def step(self, action):
        session_action = self.plan_step(action)
        return self.finish_step(action, lambda: self.session.step(session_action))

    def plan_step(self, action) -> Any:
        """The first half of :meth:`step`: check ``action`` and count the step; returns what the session's
        ``step`` is to be given. :meth:`finish_step` is the second half. A vector env whose backend steps several
        sessions in one call (the service's ``step_many``) plans each env's step, steps them together, then
        finishes each with its own outcome."""
        if self.session is None:
            raise gymnasium.error.ClosedEnvironmentError(
                f"this {type(self).__name__} was closed: call reset() to launch a new player before step()"
            )
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self._elapsed += 1
        return self._session_action(action)

    def finish_step(self, action, stepped: Callable[[], Any]):
        """The second half of :meth:`step`: ``stepped()`` is the session's step of the planned action (its event,
        or what it raised); returns ``(obs, reward, terminated, truncated, info)``."""
        try:
            obs, reward, terminated, truncated, info = self._advance(action, stepped())
        except RestartError as exc:
            # The player (or its actor) died and a new one took over: the episode is lost, so it ends here as
            # truncated, showing the new player's first view; the next reset() starts over.
            obs, info = self._restarted(action)
            # restart_cause: "player" (a crash), or the outage a service backend rode through (service_restart...)
            cause = getattr(exc, "cause", "player")
            return obs, 0.0, False, True, {**info, "restarted": True, "restart_cause": cause, "error_message": str(exc)}
        if self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps:
            truncated = True
        return obs, reward, terminated, truncated, info

    def close(self):
        try:
            self._stop_session()
        finally:
            if self._backend_kind and self.backend is not None:
                backend, self.backend = self.backend, None
                backend.close()

    # -- for the family envs -----------------------------------------------------------------------------
    def _launch(self, session: Session | None = None, **overrides: Any) -> None:
        """Start the player (a private backend first, if this env owns one); ``overrides`` change controller
        kwargs for this launch only (ML-Agents: the seed)."""
        if self.backend is None:
            self.backend = create_backend(self._backend_kind, **self._backend_options)
        self.session = session or self.backend.create_session(
            {**self._controller_kwargs, **overrides}, resources=self._resources
        )

    def _stop_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.stop()

    def _launch_overrides(self, seed: int | None) -> dict:
        """Controller kwargs for a launch by ``reset(seed=seed)`` of a closed env (none by default)."""
        return {}

    def _start_episode(self, seed: int | None, options: dict, launched: bool) -> tuple[Any, dict]:
        raise NotImplementedError

    def _session_action(self, action: Any) -> Any:
        raise NotImplementedError

    def _advance(self, action: Any, event: Any) -> tuple[Any, float, bool, bool, dict]:
        raise NotImplementedError

    def _restarted(self, action: Any) -> tuple[Any, dict]:
        raise NotImplementedError
