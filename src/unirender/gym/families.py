"""The gym layer's family registry: ``environment.protocol`` -> the Gymnasium env class of that family.

Each family's env is a :class:`~unirender.gym.session_env.SessionEnv` (launch, close, reuse after close, restart
-> truncated step, ``max_episode_steps``: written once there) with the family's three parts:

- its **spaces**, derived at creation from ``session.describe()`` (the :class:`unirender.simulator.Description`):
  ML-Agents: the behavior's sensors and action branches; AI2-THOR: the declared modalities' shapes from the first
  event, actions checked against the names the player declares;
- its **event reader** (event -> observation, reward, terminated, truncated, info) and
- its **action converter** (a point of ``action_space`` -> what ``session.step`` takes),

both in ``_advance``. The family is looked up once, when an env is made (:func:`make_env`, ``UnityVectorEnv``,
``unirender.gym.sb3.make_vec_env``), from the environment's ``protocol`` (AI2-THOR when absent); nothing per step.
A third family adds its env class (the hooks of ``SessionEnv``) and one line to :data:`GYM_FAMILIES`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, family_of, load_target

if TYPE_CHECKING:
    from unirender.gym.session_env import SessionEnv


@dataclass(frozen=True)
class GymFamily:
    """One family's part of the gym layer."""

    env: str  # "module:Class" of its SessionEnv subclass (spaces, event reader, action converter)
    sb3_env_kwargs: Mapping[str, Any] = field(default_factory=dict)  # defaults make_vec_env gives that env
    agents_vector_env: str | None = None  # "module:Class": a VectorEnv whose slots are one session's agents


GYM_FAMILIES: dict[str, GymFamily] = {
    # uint8 depth: SB3 puts it through a CNN as an image (float32 metres would be flattened into an MLP)
    AI2THOR: GymFamily("unirender.gym.env:UnityEnv", {"depth_dtype": "uint8"}),
    MLAGENTS: GymFamily(
        "unirender.gym.mlagents_env:MLAgentsEnv",
        agents_vector_env="unirender.gym.mlagents_vector:MLAgentsVectorEnv",
    ),
    WEBGL: GymFamily("unirender.gym.webgl_env:WebGLEnv"),
}


def gym_family(family: str) -> GymFamily:
    try:
        return GYM_FAMILIES[family]
    except KeyError:
        raise ValueError(
            f"no Gymnasium env for protocol {family!r}; the gym layer knows {', '.join(GYM_FAMILIES)}"
        ) from None


def env_class(family: str) -> type[SessionEnv]:
    return load_target(gym_family(family).env)


def agents_vector_env_class(family: str) -> type:
    """The family's vector env over the agents of one session (``slots="agents"``), or a ValueError saying why
    the family has none."""
    target = gym_family(family).agents_vector_env
    if target is None:
        raise ValueError(
            f"a {family} session has one agent to drive, so its agents cannot be a vector's slots: use "
            "slots='games' (one session per slot)"
        )
    return load_target(target)


def environment_family(controller_kwargs: Mapping[str, Any] | None = None, environment: Any = None) -> str:
    """The family of what an env is asked to launch: ``controller_kwargs["protocol"]``, or the ``protocol`` of
    ``environment`` (a mapping, a document with an ``environment`` section, a spec model or a spec file);
    AI2-THOR when none is named."""
    if controller_kwargs is not None:
        return family_of(controller_kwargs)
    if environment is None:
        return AI2THOR
    if isinstance(environment, str | os.PathLike):
        from unirender.spec.loader import read_source

        environment, _ = read_source(environment)
    if isinstance(environment, Mapping):
        section = environment.get("environment", environment)
        return family_of(section if isinstance(section, Mapping) else {})
    return family_of({"protocol": getattr(environment, "protocol", None)})


def make_env(controller_kwargs: dict | None = None, **env_kwargs: Any) -> SessionEnv:
    """The env of the environment's family (``UnityEnv`` or ``MLAgentsEnv``) with its own keyword arguments;
    what ``gymnasium.make("unirender.gym:unirender/Unity-v0", ...)`` calls."""
    family = environment_family(controller_kwargs, env_kwargs.get("environment"))
    return env_class(family)(controller_kwargs, **env_kwargs)
