"""``WebGLEnv``: a Unity WebGL build (the ``webgl`` family, docs/webgl.md) as a ``gymnasium.Env``; launch, close,
reuse after close and restarts are :class:`~unirender.gym.session_env.SessionEnv`'s.

Spaces come from ``session.describe()``: the observation is the canvas, ``Box(0, 255, (H, W, 3), uint8)``; the
action space is ``Discrete(n)`` over the build's declared actions (``noop`` is 0). Reward and termination are
what the build posts through ``window.unirender.emit`` (``reward``, summed over the step's messages; ``done``);
``info`` carries the step's ``messages`` and merged ``metadata``. ``metadata["render_fps"]`` is the page's virtual
clock per step, ``fps / frames_per_step`` (:func:`~unirender.gym.video.game_fps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from unirender.cluster.base import Resources, SessionBackend
from unirender.gym.session_env import SessionEnv
from unirender.gym.video import game_fps


class WebGLEnv(SessionEnv):
    """``WebGLEnv(controller_kwargs={"executable": build folder, "actions": {...}, ...})`` (the
    ``WebGLController``'s keywords; ``protocol: webgl`` is implied) or ``WebGLEnv(environment=...)``: a webgl
    environment as in a job spec (a mapping, a spec file such as ``examples/webgl_game.yaml``, or the model),
    loaded by the spec port (errors are SpecErrors with key paths)."""

    def __init__(
        self,
        controller_kwargs: dict | None = None,
        *,
        environment: Any = None,
        max_episode_steps: int | None = None,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        resources: Resources | None = None,
        render_mode: str | None = None,
    ):
        if (environment is None) == (controller_kwargs is None):
            raise ValueError("give either environment or controller_kwargs")
        if environment is not None:
            controller_kwargs = _environment_controller_kwargs(environment)
        self._open({**dict(controller_kwargs), "protocol": "webgl"}, backend=backend,
                   backend_options=backend_options, resources=resources, render_mode=render_mode,
                   max_episode_steps=max_episode_steps)
        self.metadata = {**self.metadata, "render_fps": game_fps(self._controller_kwargs)}  # the page's clock
        try:
            self._launch()
            description = self.session.describe()
        except BaseException:
            self.close()
            raise
        (camera,) = description.cameras()
        self.action_names = description.actions.names
        self.observation_space = spaces.Box(0, 255, camera.shape, np.uint8)
        self.action_space = spaces.Discrete(len(self.action_names))
        self.last_event = self.session.last_event

    def render(self):
        if self.render_mode != "rgb_array" or self.last_event is None:
            return None
        return self.last_event.frame

    # -- the family's part (SessionEnv's hooks) ---------------------------------------------------------------
    def _start_episode(self, seed: int | None, options: dict, launched: bool):
        event = self.session.last_event if launched else self.session.reset()
        self.last_event = event
        return event.frame, self._info(event)

    def _session_action(self, action: Any) -> str:
        return self.action_names[int(action)]

    def _advance(self, action, event):
        self.last_event = event
        return event.frame, event.reward, event.done, False, self._info(event)

    def _restarted(self, action):
        return self._start_episode(None, {}, launched=False)

    @staticmethod
    def _info(event) -> dict:
        return {"messages": event.messages, "metadata": event.metadata}


def _environment_controller_kwargs(environment: Any) -> dict:
    """``WebGLController`` kwargs from a webgl environment (``protocol: webgl`` may be left out of a mapping)."""
    from unirender.spec import load_environment
    from unirender.spec.webgl import WebGLEnvironmentSpec

    env = load_environment(environment, default="webgl")
    if not isinstance(env, WebGLEnvironmentSpec):
        raise ValueError(f"WebGLEnv drives Unity WebGL builds; this environment is protocol "
                         f"{getattr(env, 'protocol', 'ai2thor')!r}: "
                         "use unirender.gym.make_env, which picks the env of the environment's family")
    return env.controller_kwargs()
