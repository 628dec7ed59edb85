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
    def side_channel(self) -> dict[str, Any]:
        return self.env.side_channel
