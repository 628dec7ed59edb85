"""Gymnasium environments over unirender sessions, on any session backend.

- ``session_env.py``: :class:`SessionEnv`, what every family's env shares (launch, close and reuse, restart ->
  truncated step, ``max_episode_steps``); ``families.py``: the registry, ``protocol`` -> the family's env class,
  and :func:`make_env` (the env of an environment's family).
- :class:`UnityEnv` (``env.py``): one AI2-THOR session as a ``gymnasium.Env``; observations declared by modality
  (``observations="rgb"``: a ``Box`` image; a list: a ``Dict``), built in ``observations.py``.
- :class:`MLAgentsEnv` (``mlagents_env.py``): one agent of one behavior of an ML-Agents game; spaces from the
  game's ``describe()``.
- :class:`WebGLEnv` (``webgl_env.py``): a Unity WebGL build in headless Chromium; the canvas, the declared actions.
- :class:`UnityVectorEnv` (``vector.py``): N sessions of any family stepped concurrently behind Gymnasium's
  ``VectorEnv`` (next-step, same-step or no autoreset); one game per slot for ML-Agents, one browser for WebGL.
- :class:`MLAgentsVectorEnv` (``mlagents_vector.py``): the other ML-Agents layout, the agents of one game as
  the slots (same-step autoreset).
- :class:`VideoRecorder`, :class:`VectorVideoRecorder` (``video.py``): episodes streamed to mp4 files with
  ``RecordVideo``'s triggers; :func:`game_fps`, every env's ``render_fps``.
- ``unirender.gym.sb3`` (needs the ``[sb3]`` extra, imported only there): the Stable-Baselines3 path,
  ``make_vec_env`` and the ``VecEnv`` adapter.

Registered as ``unirender/Unity-v0``: ``gymnasium.make("unirender.gym:unirender/Unity-v0", ...)`` imports this
package on the way and makes the env of the environment's family (:func:`make_env`); ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`` gives the vector env.
"""

import gymnasium

from unirender.gym.env import DEFAULT_ACTIONS, UnityEnv, environment_controller_kwargs
from unirender.gym.families import GYM_FAMILIES, make_env
from unirender.gym.mlagents_env import MLAgentsEnv
from unirender.gym.mlagents_vector import MLAgentsVectorEnv
from unirender.gym.observations import DEPTH_DTYPES, MODALITY_ATTRIBUTE, ObservationLayout, observation_layout
from unirender.gym.session_env import SessionEnv
from unirender.gym.vector import UnityVectorEnv
from unirender.gym.video import VectorVideoRecorder, VideoRecorder, game_fps
from unirender.gym.webgl_env import WebGLEnv

ENV_ID = "unirender/Unity-v0"

__all__ = [
    "DEFAULT_ACTIONS",
    "DEPTH_DTYPES",
    "ENV_ID",
    "GYM_FAMILIES",
    "MODALITY_ATTRIBUTE",
    "MLAgentsEnv",
    "MLAgentsVectorEnv",
    "ObservationLayout",
    "SessionEnv",
    "UnityEnv",
    "UnityVectorEnv",
    "VectorVideoRecorder",
    "VideoRecorder",
    "WebGLEnv",
    "environment_controller_kwargs",
    "game_fps",
    "make_env",
    "observation_layout",
]

if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID,
        entry_point="unirender.gym:make_env",
        vector_entry_point="unirender.gym:UnityVectorEnv",
        disable_env_checker=False,
    )
