"""The Stable-Baselines3 path: an SB3 ``VecEnv`` over a Gymnasium vector env, and ``make_vec_env``.

Needs the ``[sb3]`` extra (Stable-Baselines3 and torch; see docs/gym.md for a CPU-only torch). Only this module
imports SB3, so ``unirender.gym`` works without it.

SB3 resets an env in the step that ended its episode and reports the finished episode's last observation as
``info["terminal_observation"]`` and a time-limit end as ``info["TimeLimit.truncated"]``: that is Gymnasium's
``SAME_STEP`` autoreset plus a per-env info list, which :class:`SB3VecEnv` converts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

try:
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.env_util import make_vec_env as _sb3_make_vec_env
    from stable_baselines3.common.vec_env import VecEnv, VecMonitor
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "unirender.gym.sb3 needs Stable-Baselines3: pip install 'unirender[sb3]' "
        "(install a CPU-only torch first unless you want CUDA; see docs/gym.md)"
    ) from exc

from unirender.cluster.base import SessionBackend
from unirender.gym.families import agents_vector_env_class, env_class, environment_family, gym_family
from unirender.gym.session_env import SessionEnv
from unirender.gym.vector import UnityVectorEnv


def split_vector_info(infos: dict, num_envs: int) -> list[dict]:
    """Gymnasium's batched ``info`` (arrays plus ``_key`` masks, nested dicts alike) -> one dict per env."""
    out: list[dict] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        per_env = split_vector_info(value, num_envs) if isinstance(value, dict) else None
        for i in range(num_envs):
            if mask is not None and not mask[i]:
                continue
            item = per_env[i] if per_env is not None else value[i]
            out[i][key] = item.item() if isinstance(item, np.generic) else item
    return out


class SB3VecEnv(VecEnv):
    """A Gymnasium ``VectorEnv`` in ``SAME_STEP`` autoreset mode (e.g. ``UnityVectorEnv(...,
    autoreset_mode="SAME_STEP")``) as a Stable-Baselines3 ``VecEnv``. Wrap it in ``VecMonitor`` for episode
    statistics (``make_vec_env`` does). Closing it closes the vector env."""

    def __init__(self, venv: VectorEnv):
        mode = venv.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SB3 resets an env in the step that ends its episode: build the vector env with "
                f"autoreset_mode=SAME_STEP (this one has {mode})"
            )
        self.venv = venv
        self._actions: np.ndarray | None = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    def reset(self):
        options = self._options
        if any(o != options[0] for o in options):
            raise ValueError("per-env reset options differ; this vector env takes one options dict for all")
        obs, infos = self.venv.reset(seed=list(self._seeds), options=dict(options[0]) or None)
        self.reset_infos = split_vector_info(infos, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self):
        step_per_env = getattr(self.venv, "step_per_env", None)  # UnityVectorEnv: infos already per env
        if step_per_env is not None:
            obs, rewards, terminations, truncations, per_env = step_per_env(self._actions)
            per_env = [dict(info) for info in per_env]
        else:
            obs, rewards, terminations, truncations, infos = self.venv.step(self._actions)
            per_env = split_vector_info(infos, self.num_envs)
        dones = terminations | truncations
        for i in np.flatnonzero(dones):
            reset_info = per_env[i]
            final_obs = reset_info.pop("final_obs")
            info = dict(reset_info.pop("final_info", {}))
            info["terminal_observation"] = final_obs
            info["TimeLimit.truncated"] = bool(truncations[i] and not terminations[i])
            self.reset_infos[i] = reset_info
            per_env[i] = info
        return obs, rewards.astype(np.float32), dones, per_env

    def close(self) -> None:
        self.venv.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        return list(self.venv.render())

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(env, attr_name) for env in self._envs(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        for env in self._envs(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return [getattr(env, method_name)(*method_args, **method_kwargs) for env in self._envs(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._envs(indices)]

    def _envs(self, indices) -> list:
        envs = getattr(self.venv, "envs", None)
        if envs is None:
            raise AttributeError(f"{type(self.venv).__name__} does not expose its envs (.envs)")
        return [envs[i] for i in self._get_indices(indices)]


def make_vec_env(
    num_envs: int = 1,
    controller_kwargs: dict | None = None,
    *,
    vec_env_cls: type | None = None,
    seed: int | None = None,
    backend: SessionBackend | str = "local",
    backend_options: dict | None = None,
    vec_env_kwargs: dict | None = None,
    slots: str = "games",
    **env_kwargs: Any,
) -> VecEnv:
    """A monitored SB3 ``VecEnv`` of ``num_envs`` envs of the environment's family (:class:`UnityEnv` for
    AI2-THOR, :class:`MLAgentsEnv` for an ML-Agents game, :class:`WebGLEnv` for a WebGL build: ``protocol`` in
    ``controller_kwargs`` or ``environment=``), ``env_kwargs`` as that env takes them.

    ``vec_env_cls=None`` (default): one :class:`UnityVectorEnv` (threads in this process, players in parallel)
    through :class:`SB3VecEnv` under ``VecMonitor``; the cheapest in memory and as fast as any. ``DummyVecEnv``
    or ``SubprocVecEnv``: SB3's own ``make_vec_env`` over the family's env (``Monitor`` per env);
    ``SubprocVecEnv`` runs each env in a worker process (which imports torch: see docs/gym.md), so give
    ``backend`` as a kind (``"local"``), not an instance. ``seed``: env ``i`` is reset with ``seed + i``. AI2-THOR
    depth defaults to ``depth_dtype="uint8"`` here, which SB3 treats as an image (a CNN in ``MultiInputPolicy``).
    SB3 has no ``Dict`` action space: an ML-Agents behavior with continuous and discrete actions needs
    ``action_parts="continuous"`` or ``"discrete"`` (refused with that advice otherwise).

    ``slots``: ``"games"`` (default): one session (player, game) per env. ``"agents"`` (ML-Agents): the agents of
    one game are the envs (:class:`~unirender.gym.mlagents_vector.MLAgentsVectorEnv`); ``num_envs`` must be the
    number of agents the game has.
    """
    family = environment_family(controller_kwargs, env_kwargs.get("environment"))
    env_kwargs = {**gym_family(family).sb3_env_kwargs, **env_kwargs}
    if slots not in ("games", "agents"):
        raise ValueError(f"slots must be 'games' (a session per env) or 'agents' (one game's agents), not {slots!r}")
    if slots == "agents" and vec_env_cls is not None:
        raise ValueError("slots='agents' is one vector env over one game: it takes no vec_env_cls")
    if vec_env_cls is None:
        if vec_env_kwargs:
            raise ValueError("vec_env_kwargs are for vec_env_cls; the default vector env takes env_kwargs")
        if slots == "agents":
            venv: VectorEnv = agents_vector_env_class(family)(
                controller_kwargs, backend=backend, backend_options=backend_options, **env_kwargs
            )
        else:
            venv = UnityVectorEnv(
                num_envs,
                controller_kwargs,
                backend=backend,
                backend_options=backend_options,
                autoreset_mode=AutoresetMode.SAME_STEP,
                **env_kwargs,
            )
        try:
            if venv.num_envs != num_envs:
                raise ValueError(
                    f"num_envs={num_envs}, but the game has {venv.num_envs} agents deciding (slots='agents')"
                )
            _check_action_space(venv.single_action_space)
            vec_env: VecEnv = VecMonitor(SB3VecEnv(venv))
        except BaseException:
            venv.close()
            raise
        if seed is not None:
            vec_env.seed(seed)
        return vec_env

    cls = env_class(family)

    def make_env() -> SessionEnv:
        return cls(controller_kwargs, backend=backend, backend_options=backend_options, **env_kwargs)

    vec_env = _sb3_make_vec_env(
        make_env, n_envs=num_envs, seed=seed, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs
    )
    try:
        _check_action_space(vec_env.action_space)
    except BaseException:
        vec_env.close()
        raise
    return vec_env


def _check_action_space(space: spaces.Space) -> None:
    if isinstance(space, spaces.Dict):
        raise ValueError(
            f"Stable-Baselines3 takes no Dict action space ({space}): for an ML-Agents behavior with continuous "
            "and discrete actions give action_parts='continuous' or 'discrete' (the other part is held at zero)"
        )
