"""``UnityParallelEnv``: every agent of a Unity game as a PettingZoo ``ParallelEnv`` (mlagents-envs' class, on
PettingZoo 1.24+'s API)."""

from __future__ import annotations

from typing import Any

from pettingzoo import ParallelEnv

from unirender.mlagents.base_env import BaseEnv
from unirender.mlagents.envs.unity_pettingzoo_base_env import UnityPettingzooBaseEnv


class UnityParallelEnv(UnityPettingzooBaseEnv, ParallelEnv):
    """All agents act at once: ``step({agent: action}) -> (observations, rewards, terminations, truncations,
    infos)``. ``seed`` seeds the agents' action spaces."""

    def __init__(self, env: BaseEnv, seed: int | None = None):
        super().__init__(env, seed)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], dict]:
        """New episodes for every agent (``seed`` reseeds the action spaces; the game's own seed is the
        environment's). Returns ``(observations, infos)``."""
        self._reset(seed)
        agents = self.agents
        return ({agent: self._observations[agent] for agent in agents},
                {agent: self._infos.get(agent, {}) for agent in agents})  # fmt: skip

    def step(self, actions: dict[str, Any]):
        return self._step(actions)
