"""``UnityVectorEnv``: N env sessions behind Gymnasium's ``VectorEnv`` API, stepped concurrently; the slots are
envs of the environment's family (:class:`UnityEnv` for AI2-THOR, :class:`MLAgentsEnv` for ML-Agents: one game per
slot, :class:`WebGLEnv` for a WebGL build: one browser per slot), picked once through ``unirender.gym.families``."""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from unirender.cluster.base import SessionBackend
from unirender.cluster.registry import create_backend
from unirender.gym.families import env_class, environment_family
from unirender.gym.session_env import SessionEnv


class UnityVectorEnv(VectorEnv):
    """``num_envs`` env sessions on one backend, stepped concurrently (one long-lived thread per env; each session
    is a separate player or actor, so the work overlaps). The envs are of the environment's family (its
    ``protocol`` in ``controller_kwargs`` or ``environment=``): :class:`UnityEnv` (AI2-THOR),
    :class:`MLAgentsEnv` (ML-Agents: each slot is one game, driving its first agent) or :class:`WebGLEnv` (a WebGL
    build: each slot its own browser), built with ``env_kwargs``.

    ``autoreset_mode`` (Gymnasium's ``AutoresetMode`` or its name), as in ``SyncVectorEnv``:

    - ``NEXT_STEP`` (default): the step after an episode ended resets that env and returns its first observation
      with reward 0 and no termination (the action is ignored).
    - ``SAME_STEP``: the ending step resets the env at once; it returns the new episode's first observation,
      the ending step's reward/terminated/truncated, and the last observation and info of the finished episode in
      ``info["final_obs"]`` / ``info["final_info"]`` (masked by ``info["_final_obs"]`` / ``info["_final_info"]``).
    - ``DISABLED``: no automatic reset; reset the ended envs with ``reset(options={"reset_mask": mask})``.

    ``reset(seed=...)``: ``None``, an int ``s`` (env ``i`` gets ``s + i``) or one seed (or None) per env.
    ``reset(options={"reset_mask": bool array})`` resets only those envs; the others keep their observation.

    Asynchronous stepping (docs/gym.md), for players whose step times differ: ``step_async(actions)`` then
    ``step_wait()`` (Gymnasium's pair: a whole vector step, the caller free in between), and EnvPool's
    ``send(actions, env_ids=None)`` / ``recv()``: ``recv()`` returns the first ``batch_size`` envs to finish
    (``info["env_id"]`` says which, in the order they finished), so fast envs step again while slow ones are
    still busy. Each env's autoreset follows ``autoreset_mode`` as in ``step``.

    Over the ``service`` backend one vector step is one HTTP request (``POST /v1/steps``: the backend's
    ``step_many``, from the stepping thread); ``send``/``recv`` step each env on its own.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        num_envs: int,
        controller_kwargs: dict | None = None,
        *,
        backend: SessionBackend | str = "local",
        backend_options: dict | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        batch_size: int | None = None,
        **env_kwargs: Any,
    ):
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        if batch_size is not None and not 1 <= batch_size <= num_envs:
            raise ValueError(f"batch_size must be between 1 and num_envs ({num_envs}), not {batch_size!r}")
        self.batch_size = num_envs if batch_size is None else int(batch_size)
        self.autoreset_mode = autoreset_mode_of(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.num_envs = num_envs
        self._owns_backend = isinstance(backend, str)
        self.backend = create_backend(backend, **(backend_options or {})) if self._owns_backend else backend
        # Long-lived threads: a player the Controller restarts inside step() is a child of the stepping thread.
        # One more than the envs: step_async's vector step runs on the pool and steps the envs from there.
        self._pool = ThreadPoolExecutor(max_workers=num_envs + 1, thread_name_prefix="unirender-vec")
        self._in_flight: dict[int, Future] = {}  # send()'s envs not yet recv()'d
        self._finished: queue.SimpleQueue[int] = queue.SimpleQueue()  # their ids as they finish
        self._step_future: Future | None = None  # step_async's
        self.envs: list[SessionEnv] = []
        env_cls = env_class(environment_family(controller_kwargs, env_kwargs.get("environment")))
        futures = [
            self._pool.submit(env_cls, controller_kwargs, backend=self.backend, **env_kwargs)
            for _ in range(num_envs)
        ]
        errors = []
        for future in futures:
            try:
                self.envs.append(future.result())
            except BaseException as exc:
                errors.append(exc)
        if errors:
            self.close()
            raise errors[0]
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = first.render_mode
        self.metadata = {**self.metadata, "render_fps": first.metadata["render_fps"]}
        self._discrete = isinstance(self.single_action_space, spaces.Discrete)
        self._env_obs: list[Any] = [None] * num_envs
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        self._check_idle("reset")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds given for {self.num_envs} envs")
        options = dict(options or {})
        mask = np.ones(self.num_envs, dtype=bool)
        if "reset_mask" in options:
            mask = np.asarray(options.pop("reset_mask"))
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({self.num_envs},), "
                    f"got {mask.dtype} {mask.shape}"
                )
            if not mask.any():
                raise ValueError("options['reset_mask'] resets no env: set at least one True")
            if any(self._env_obs[i] is None for i in np.flatnonzero(~mask)):
                raise ValueError("reset_mask leaves out an env that was never reset: reset all envs first")
        chosen = [int(i) for i in np.flatnonzero(mask)]
        results = self._each(lambda i: self.envs[i].reset(seed=seeds[i], options=options), chosen)
        infos: dict = {}
        for i, (obs, info) in zip(chosen, results, strict=True):
            self._env_obs[i] = obs
            infos = self._add_info(infos, info, i)
        self._autoreset[mask] = False
        return self._batch(), infos

    def step(self, actions):
        self._check_idle("step")
        return self._batched_infos(self.step_per_env(actions))

    def _batched_infos(self, result):
        obs, rewards, terminations, truncations, per_env = result
        infos: dict = {}
        for i, info in enumerate(per_env):
            infos = self._add_info(infos, info, i)
        return obs, rewards, terminations, truncations, infos

    # -- asynchronous stepping ----------------------------------------------------------------------------
    def step_async(self, actions) -> None:
        """Start a vector step (as :meth:`step`) and return at once; :meth:`step_wait` gives its result."""
        self._check_idle("step_async")
        per_env_actions = self._per_env_actions(actions)  # a bad batch fails here, not in step_wait
        self._step_future = self._pool.submit(self.step_per_env, per_env_actions, split=False)

    def step_wait(self):
        """The result of the vector step :meth:`step_async` started, as :meth:`step` returns it."""
        if self._step_future is None:
            raise ValueError("step_wait() without step_async(): nothing is being stepped")
        future, self._step_future = self._step_future, None
        return self._batched_infos(future.result())

    def send(self, actions, env_ids=None) -> None:
        """EnvPool's ``send``: step the envs ``env_ids`` (default all) with ``actions`` (one per id, in that
        order) without waiting; an env still in flight from an earlier ``send`` cannot be sent again before
        :meth:`recv` has returned it."""
        if self._step_future is not None:
            raise ValueError("send() during step_async(): call step_wait() first")
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in np.asarray(env_ids).reshape(-1)]
        if len(set(ids)) != len(ids) or any(not 0 <= i < self.num_envs for i in ids):
            raise ValueError(f"env_ids must be distinct ids in [0, {self.num_envs}), not {ids}")
        busy = sorted(set(ids) & set(self._in_flight))
        if busy:
            raise ValueError(f"envs {busy} are still stepping: recv() them before sending to them again")
        per_env = self._per_env_actions(actions, len(ids))
        if self.autoreset_mode == AutoresetMode.DISABLED:
            ended = [i for i in ids if self._autoreset[i]]
            if ended:
                raise ValueError(f"envs {ended} ended their episode: reset them (reset_mask) before stepping")
        for i, action in zip(ids, per_env, strict=True):
            future = self._pool.submit(self._step_one, i, action)
            self._in_flight[i] = future
            future.add_done_callback(lambda _f, i=i: self._finished.put(i))

    def recv(self):
        """EnvPool's ``recv``: the first ``batch_size`` sent envs to finish (fewer if fewer are in flight), as
        ``(obs, rewards, terminations, truncations, infos)`` over those envs, ``infos["env_id"]`` their ids in the
        order they finished. A failed env's error is raised once the batch is collected (its slot is free)."""
        if not self._in_flight:
            raise ValueError("recv() with nothing sent: send() actions first")
        ids = [self._finished.get() for _ in range(min(self.batch_size, len(self._in_flight)))]
        futures = [self._in_flight.pop(i) for i in ids]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]
        infos: dict = {}
        collector = _InfoBatch(len(ids))
        obs_list, rewards, terminations, truncations = [], [], [], []
        for k, (i, future) in enumerate(zip(ids, futures, strict=True)):
            obs, reward, terminated, truncated, info, final = future.result()
            self._env_obs[i] = obs
            self._autoreset[i] = terminated or truncated
            obs_list.append(obs)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            if final is not None:
                info = {"final_obs": final[0], "final_info": final[1], **info}
            infos = collector._add_info(infos, {**info, "env_id": i}, k)
        batch = concatenate(self.single_observation_space, obs_list,
                            create_empty_array(self.single_observation_space, len(ids)))  # fmt: skip
        return (batch, np.array(rewards, np.float64), np.array(terminations, bool), np.array(truncations, bool),
                infos)

    def _check_idle(self, what: str) -> None:
        if self._step_future is not None or self._in_flight:
            raise ValueError(f"{what}() while envs are stepping asynchronously: step_wait() or recv() them first")

    def step_per_env(self, actions, *, split: bool = True):
        """:meth:`step` with one plain info dict per env (``final_obs``/``final_info`` in it when ``SAME_STEP``
        reset that env): what Stable-Baselines3 wants, without Gymnasium's batched infos and the split back."""
        per_env_actions = self._per_env_actions(actions) if split else actions
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset.any():
            ended = np.flatnonzero(self._autoreset).tolist()
            raise ValueError(f"envs {ended} ended their episode: reset them (reset_mask) before stepping")
        for i, action in enumerate(per_env_actions):  # checked before any step (a batch waits for every step)
            if not (self._autoreset[i] and self.autoreset_mode == AutoresetMode.NEXT_STEP) and \
                    not self.single_action_space.contains(action):
                raise ValueError(f"action {action!r} of env {i} is not in {self.single_action_space}")
        if self.backend.steps_together:  # the service: one request for every env's step
            results = self._step_together(per_env_actions)
        else:
            results = self._each(lambda i: self._step_one(i, per_env_actions[i]), range(self.num_envs))
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminations = np.array([r[2] for r in results], dtype=bool)
        truncations = np.array([r[3] for r in results], dtype=bool)
        per_env = []
        for i, (obs, _, _, _, info, final) in enumerate(results):
            self._env_obs[i] = obs
            per_env.append({"final_obs": final[0], "final_info": final[1], **info} if final is not None else info)
        self._autoreset = terminations | truncations
        return self._batch(), rewards, terminations, truncations, per_env

    def render(self):
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any):
        for env in self.envs:
            try:
                env.close()
            except Exception:
                pass
        self._pool.shutdown(wait=True)
        if self._owns_backend and self.backend is not None:
            self.backend.close()
            self.backend = None

    # -- internals ----------------------------------------------------------------------------------------
    def _per_env_actions(self, actions, n: int | None = None) -> list:
        """The batch of ``n`` (default ``num_envs``) actions split per env (Discrete: ints; Box, MultiDiscrete,
        Dict: Gymnasium's iterate)."""
        n = self.num_envs if n is None else n
        if self._discrete:
            actions = np.asarray(actions)
            if actions.shape != (n,):
                raise ValueError(f"expected {n} actions, got shape {actions.shape}")
            return [int(a) for a in actions]
        space = self.action_space if n == self.num_envs else batch_space(self.single_action_space, n)
        try:
            per_env = list(iterate(space, actions))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"actions {actions!r} are not a batch of {space}: {exc}") from None
        if len(per_env) != n:
            raise ValueError(f"expected {n} actions, got {len(per_env)}")
        return per_env

    def _step_one(self, i: int, action: Any, stepped: Callable[[], Any] | None = None):
        """One env's step under the autoreset mode: (obs, reward, terminated, truncated, info, final) where
        ``final`` is (obs, info) of an episode that SAME_STEP just ended and reset, else None. ``stepped``: the
        outcome of the session's step of the env's planned action, when the backend has already stepped it."""
        env = self.envs[i]
        if self._autoreset[i] and self.autoreset_mode == AutoresetMode.NEXT_STEP:
            obs, info = env.reset()
            return obs, 0.0, False, False, info, None
        if stepped is None:
            obs, reward, terminated, truncated, info = env.step(action)
        else:
            obs, reward, terminated, truncated, info = env.finish_step(action, stepped)
        if (terminated or truncated) and self.autoreset_mode == AutoresetMode.SAME_STEP:
            new_obs, new_info = env.reset()
            return new_obs, reward, terminated, truncated, new_info, (obs, info)
        return obs, reward, terminated, truncated, info, None

    def _step_together(self, actions: list) -> list:
        """Every env's step (as :meth:`_step_one`) with the sessions stepped in ONE ``backend.step_many`` call
        from this thread (the service: one request), each env then finishing its step with its own outcome; the
        envs that NEXT_STEP resets meanwhile reset on the pool's threads. As with :meth:`_each`, every env
        finishes, then the first error is raised."""
        resetting = [i for i in range(self.num_envs)
                     if self._autoreset[i] and self.autoreset_mode == AutoresetMode.NEXT_STEP]  # fmt: skip
        resets = {i: self._pool.submit(self._step_one, i, actions[i]) for i in resetting}
        results: list = [None] * self.num_envs
        errors: list[BaseException] = []
        try:
            stepping = [i for i in range(self.num_envs) if i not in resets]
            planned = [(self.envs[i].session, self.envs[i].plan_step(actions[i])) for i in stepping]
            outcomes = self.backend.step_many(planned) if planned else []
            for i, outcome in zip(stepping, outcomes, strict=True):
                try:
                    results[i] = self._step_one(i, actions[i], stepped=lambda o=outcome: _result_of(o))
                except Exception as exc:  # noqa: BLE001 - raised below, once every env has finished
                    errors.append(exc)
        finally:
            for i, future in resets.items():  # wait for all, also when a step failed
                try:
                    results[i] = future.result()
                except Exception as exc:  # noqa: BLE001 - raised below
                    errors.append(exc)
        if errors:
            raise errors[0]
        return results

    def _each(self, fn, indices) -> list:
        """``[fn(i) for i in indices]``, concurrently: the first in this thread, the rest on the pool's threads
        (one hand-off fewer per step; 1 env through the pool ran at 0.6x of a direct call at 64x64). A player that
        the Controller restarts inside the first env's call is a child of this thread: step a vector env from a
        long-lived thread (a training loop's is), as the cluster docs ask for any stepping thread."""
        indices = list(indices)
        if not indices:
            return []
        futures = [self._pool.submit(fn, i) for i in indices[1:]]
        try:
            first = fn(indices[0])
        finally:
            rest = [future.result() for future in futures]  # wait for all, also when the first one failed
        return [first, *rest]

    def _batch(self):
        # Into a fresh array each call: a caller may keep the previous batch (replay buffers do).
        return concatenate(
            self.single_observation_space,
            self._env_obs,
            create_empty_array(self.single_observation_space, self.num_envs),
        )


def _result_of(outcome: Any) -> Any:
    """A ``step_many`` item as the session's ``step`` gives it: the event, or the exception raised."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


class _InfoBatch:
    """Gymnasium's info batching (``VectorEnv._add_info``) over ``n`` envs: ``recv()``'s batch, not all envs."""

    _add_info = VectorEnv._add_info

    def __init__(self, n: int):
        self.num_envs = n


def autoreset_mode_of(mode: AutoresetMode | str) -> AutoresetMode:
    """The mode itself, its name (``"SAME_STEP"``, any case) or its value (``"SameStep"``)."""
    for member in AutoresetMode:
        if mode == member or (isinstance(mode, str) and mode.upper() in (member.name, member.value.upper())):
            return member
    raise ValueError(f"autoreset_mode must be one of {[m.name for m in AutoresetMode]}, not {mode!r}")
