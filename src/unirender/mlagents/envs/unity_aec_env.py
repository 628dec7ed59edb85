"""``UnityAECEnv``: a Unity game as a PettingZoo ``AECEnv`` (agents act in turn; the game steps once every live
agent has acted). It is PettingZoo's own parallel-to-AEC conversion of :class:`UnityParallelEnv`."""

from __future__ import annotations

from typing import Any

from pettingzoo.utils.conversions import parallel_to_aec_wrapper

from unirender.mlagents.base_env import BaseEnv
from unirender.mlagents.envs.unity_parallel_env import UnityParallelEnv


class UnityAECEnv(parallel_to_aec_wrapper):
    def __init__(self, env: BaseEnv, seed: int | None = None):
        super().__init__(UnityParallelEnv(env, seed))

    @property
    def possible_agents(self) -> list[str]:
        """The parallel env's, read each time: a Unity game's agents are known once it steps, and agents spawn
        during an episode (PettingZoo's wrapper copies the list once, when it is built)."""
        return self.env.possible_agents

    @possible_agents.setter
    def possible_agents(self, _value) -> None:
        pass  # PettingZoo's __init__ assigns its copy; the live list above is kept

    @property
    def side_channel(self) -> dict[str, Any]:
        return self.env.side_channel
