"""The Gymnasium and PettingZoo wrappers of mlagents-envs (``mlagents_envs.envs``), on today's APIs: Gymnasium 1.x
(``reset(seed=, options=) -> (obs, info)``, ``step -> (obs, reward, terminated, truncated, info)``) and PettingZoo
1.24+. They wrap any :class:`~unirender.mlagents.base_env.BaseEnv`, normally a ``UnityEnvironment``.

- :mod:`.unity_gym_env`: ``UnityToGymWrapper`` (one agent; the ``gym`` extra); ``old_gym_api=True`` gives
  mlagents-envs' own ``reset() -> obs`` and ``step() -> (obs, reward, done, info)``.
- :mod:`.unity_parallel_env` / :mod:`.unity_aec_env`: ``UnityParallelEnv`` / ``UnityAECEnv`` (the ``pettingzoo``
  extra).
"""
