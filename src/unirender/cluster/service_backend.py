"""ServiceBackend: sessions that are a running ``unirender serve``'s sessions (players on the render host, the
caller elsewhere), through the service's HTTP API and :class:`unirender.client.Client`.

``create_backend("service", url=..., token=...)``. Each session is a service session, so the service's auth,
quotas, rate limits, idle reaping and the console's live view apply to it as to any client's. The controller
kwargs a session is created with become the service's session body (:data:`SESSION_BODIES`, the inverse of how
the service builds controller kwargs from an environment spec; a kwarg no body can say is refused, naming it).
Events are the local ones' types: AI2-THOR ``Event``; ML-Agents :class:`unirender.remote_events.RemoteMLAgentsEvent`
(``MLAgentsEvent``'s reading API). The service's error codes come back as the local backends' exceptions
(:func:`local_error`).

Batched steps: ``backend.step_many([(session, action), ...])`` steps those sessions in ONE ``POST /v1/steps``
(``Client.step_many``), each getting its own event or error (``steps_together``: a vector env steps its envs
through it, from one thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests

from unirender.cluster.base import (
    LOST,
    READY,
    CapacityError,
    Resources,
    Session,
    SessionBackend,
    SessionLostError,
    new_session_id,
    stop_quietly,
)
from unirender.errors import PlayerError, RestartError
from unirender.simulator import AI2THOR, MLAGENTS, family_of

if TYPE_CHECKING:
    from unirender.simulator import Description

# -- controller kwargs -> the service's session body (the inverse of service/*_sessions.py) ------------------
def _refuse(family: str, keys: list[str], why: str) -> None:
    if keys:
        raise ValueError(f"the service backend cannot start a {family} session with {sorted(keys)}: {why}")


# AI2-THOR: Controller kwargs the service's EnvironmentSpec sets (Controller name -> spec name).
_AI2THOR_ENVIRONMENT = {
    "executable": "executable", "width": "width", "height": "height", "server": "transport", "quality": "quality",
    "platform": "platform", "headless": "headless", "gpu_device": "gpu_device", "x_display": "x_display",
    "server_timeout": "server_timeout", "server_start_timeout": "server_start_timeout",
    "max_restarts": "max_restarts",
}  # fmt: skip
# Controller kwargs that name this machine's things (a hub, a log directory, a port): meaningless on the service.
_AI2THOR_LOCAL_ONLY = ("player_hub", "log_dir", "start_unity", "host", "port", "wsgi_fast_path")
_DEFAULT_MAX_RESTARTS = 3  # the controllers' default: a crashed player is restarted (RestartError)


def ai2thor_session_body(kwargs: dict) -> dict:
    """``Controller(**kwargs)`` as ``Client.session(...)`` arguments: the environment, the render section (its
    modalities from the Initialize flags, ``depth_format``), ``scene`` and ``auto_restart`` (``max_restarts`` > 0,
    as the Controller restarts a crashed player)."""
    from unirender.spec.models import MODALITY_INITIALIZE_FLAG

    kwargs = dict(kwargs)
    kwargs.pop("protocol", None)
    _refuse(AI2THOR, [k for k in _AI2THOR_LOCAL_ONLY if kwargs.get(k) not in (None, True)
                      or (k == "start_unity" and kwargs.get(k) is False)],  # fmt: skip
            "they name things of this machine; the service starts and serves its players itself")
    for key in _AI2THOR_LOCAL_ONLY:
        kwargs.pop(key, None)
    environment = {spec: kwargs.pop(name) for name, spec in _AI2THOR_ENVIRONMENT.items() if name in kwargs}
    if isinstance(environment.get("transport"), str):
        environment["transport"] = environment["transport"].lower()
    if environment.get("platform") is None:
        environment.pop("platform", None)
    restarts = environment.setdefault("max_restarts", _DEFAULT_MAX_RESTARTS)
    modalities = ["rgb"]
    for modality, flag in MODALITY_INITIALIZE_FLAG.items():
        if flag is not None and kwargs.pop(flag, False):
            modalities.append(modality)
    render: dict[str, Any] = {"modalities": modalities, "depth_format": kwargs.pop("depth_format", "Meters")}
    if "flow" in modalities:
        render["flow_policy"] = "previous_step"
    scene = kwargs.pop("scene", None)
    if scene is not None and not isinstance(scene, str):
        raise ValueError(f"the service backend takes a scene name, not {scene!r}")
    if kwargs:  # the rest are Initialize parameters, as the Controller takes them
        environment["initialize"] = kwargs
    return {"environment": environment, "render": render, "scene": scene, "auto_restart": restarts > 0}


_MLAGENTS_ENVIRONMENT = ("executable", "width", "height", "time_scale", "quality_level", "platform", "x_display",
                         "gpu_device", "timeout", "start_timeout", "max_restarts", "layout", "args", "env")


def mlagents_session_body(kwargs: dict) -> dict:
    """``MLAgentsController(**kwargs)`` as ``Client.session(...)`` arguments (``environment_parameters`` as
    numbers; a sampler draws on the service from the environment section, so give its spec there)."""
    kwargs = dict(kwargs)
    kwargs.pop("protocol", None)
    environment: dict[str, Any] = {"protocol": MLAGENTS}
    for key in _MLAGENTS_ENVIRONMENT:
        if key in kwargs:
            value = kwargs.pop(key)
            environment[key] = list(value) if key == "args" else dict(value) if key == "env" else value
    if environment.get("platform") is None:
        environment.pop("platform", None)
    parameters = kwargs.pop("environment_parameters", None) or {}
    bad = [k for k, v in parameters.items() if isinstance(v, bool) or not isinstance(v, int | float)]
    _refuse(MLAGENTS, [f"environment_parameters.{k}" for k in bad],
            "only numbers travel as environment parameters (a sampler: put its spec in the environment section)")
    if parameters:
        environment["environment_parameters"] = {k: float(v) for k, v in parameters.items()}
    seed = int(kwargs.pop("seed", 0) or 0)
    if kwargs.get("log_dir") is not None:
        _refuse(MLAGENTS, ["log_dir"], "the service keeps its players' logs under its data root")
    kwargs.pop("log_dir", None)
    _refuse(MLAGENTS, list(kwargs), "the service's ML-Agents environment has no such setting")
    restarts = environment.setdefault("max_restarts", _DEFAULT_MAX_RESTARTS)
    body: dict[str, Any] = {"environment": environment, "auto_restart": restarts > 0}
    if seed:
        body["seed"] = seed  # the game's seed at launch (MLAgentsEnv's reset(seed=...) relaunches with it)
    return body


# family -> the controller kwargs' session body (a third family adds its line)
SESSION_BODIES: dict[str, Callable[[dict], dict]] = {AI2THOR: ai2thor_session_body, MLAGENTS: mlagents_session_body}


# -- the service's errors -> the local backends' --------------------------------------------------------------
def local_error(exc: BaseException, url: str) -> BaseException:
    """What the same failure raises locally: capacity and per-token quota -> ``CapacityError``; a session the
    service no longer has (ended, reaped idle, lost) or a service that cannot be reached -> ``SessionLostError``;
    the player's own errors (``RestartError``, ``PlayerCrashedError``, ``PlayerTimeoutError``, ``ActionError``,
    ``SpecError``...) are already the library's and stay as they are."""
    code = getattr(exc, "code", None)
    if code in ("capacity_exhausted", "too_many_sessions"):
        return CapacityError(f"the service at {url}: {exc}")
    if code in ("session_lost", "session_ended", "session_not_found"):
        return SessionLostError(f"the service at {url} no longer has the session: {exc}")
    if isinstance(exc, requests.ConnectionError):
        return SessionLostError(f"the service at {url} cannot be reached: {exc}")
    return exc


def description_from_dict(doc: dict) -> Description:
    """A ``Description.to_dict()`` (as the service sends it) -> the :class:`~unirender.simulator.Description`."""
    from dataclasses import fields

    from unirender.simulator import ActionDescription, BehaviorActions, Description, ObservationDescription

    actions = dict(doc["actions"])
    actions["names"] = tuple(actions.get("names") or ())
    actions["behaviors"] = {name: BehaviorActions(b["continuous"], tuple(b.get("discrete") or ()))
                            for name, b in (actions.get("behaviors") or {}).items()}  # fmt: skip
    known = {f.name for f in fields(ObservationDescription)}
    observations = tuple(ObservationDescription(**{**{k: v for k, v in o.items() if k in known},
                                                   "shape": tuple(o["shape"])})
                         for o in doc.get("observations") or [])  # fmt: skip
    top = {f.name for f in fields(Description)} - {"actions", "observations"}
    return Description(actions=ActionDescription(**actions), observations=observations,
                       **{k: v for k, v in doc.items() if k in top})  # fmt: skip


class ServiceSession(Session):
    """A session of the service, with the local sessions' verbs and events (see the module doc)."""

    backend_name = "service"

    def __init__(self, backend: ServiceBackend, session_id: str, resources: Resources, family: str, body: dict):
        super().__init__(session_id, resources, family)
        self._backend = backend
        self._body = body
        self.remote: Any = None  # the client's RemoteSession / RemoteMLAgentsSession

    # -- the lifecycle's hooks (Session.restart/stop) ----------------------------------------------------------
    def _start_player(self) -> None:
        try:
            remote = self._backend.client.session(**self._body)
        except Exception as exc:
            raise self._backend._local(exc) from exc
        self.remote = remote
        try:
            self.last_event = remote.latest_event()
        except BaseException:
            stop_quietly(remote)
            raise
        self.state = READY

    # -- Session ---------------------------------------------------------------------------------------------
    def step(self, action: Any = None, **kwargs: Any) -> Any:
        with self._lock:
            self._check_ready()
            return self._done(self._call(lambda: self.remote.step(action, **kwargs)))

    def reset(self, scene: str | None = None, **initialize_params: Any) -> Any:
        with self._lock:
            self._check_ready()
            return self._done(self._call(lambda: self.remote.reset(scene, **initialize_params)))

    def _detach_player(self) -> Any:
        remote, self.remote = self.remote, None
        return remote

    def _released(self) -> None:
        self._backend._forget(self)

    def describe(self) -> Description:
        with self._lock:
            self._check_ready()
            doc = self._call(self.remote.describe)
        if doc is None:
            raise SessionLostError(f"session {self.id}: the service cannot describe its player (it has just failed)")
        return description_from_dict(doc)

    def _placement_info(self) -> dict:
        info = {"node": urlsplit(self._backend.client.url).netloc, "service_url": self._backend.client.url}
        if self.remote is not None:
            info["remote_id"] = self.remote.id
            info["platform"] = self.remote.platform
        return info

    # -- internals ---------------------------------------------------------------------------------------------
    def _check_ready(self) -> None:
        self._check_open()
        if self.state == LOST or self.remote is None:
            raise SessionLostError(f"session {self.id}: its player failed and the service ended it; call restart()")

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: BaseException) -> BaseException:
        """``exc`` as the local backends raise it, the session's state following (as ``LocalSession._call``)."""
        if isinstance(exc, RestartError):
            self.restarts += 1  # the service's player was restarted: episode lost, the new one's first event
            try:
                self.last_event = self.remote.latest_event()
            except Exception:  # noqa: BLE001 - the RestartError says what happened; the next call says more
                pass
            return exc
        error = self._backend._local(exc)
        if isinstance(error, SessionLostError | PlayerError):  # the service ended the session
            self.state = LOST
        return error

    def _done(self, event: Any) -> Any:
        self.steps += 1
        self.last_event = event
        return event


class ServiceBackend(SessionBackend):
    """Sessions of the service at ``url`` (``token``: its bearer token, default ``$UNIRENDER_TOKEN``).

    ``format``: the responses' encoding (msgpack, frames as views; ``json``/``multipart`` for debugging);
    ``timeout``: seconds for any one request (a step, a player's start). ``resources`` of a session: a GPU
    index becomes its ``gpu_device``; displays and CPU shares are the service's business (its own backend)."""

    name = "service"

    def __init__(self, url: str, token: str | None = None, *, format: str = "msgpack", timeout: float = 600.0):
        super().__init__()
        from unirender.client import Client

        self.client = Client(url, token, format=format, timeout=timeout)

    def create_session(
        self,
        controller_kwargs: dict,
        *,
        session_id: str | None = None,
        resources: Resources | None = None,
    ) -> ServiceSession:
        self._check_open()
        kwargs = dict(controller_kwargs)
        if resources is not None and resources.gpu is not None and kwargs.get("gpu_device") is None:
            kwargs["gpu_device"] = resources.gpu
        family = family_of(kwargs)
        body = SESSION_BODIES[family](kwargs)
        session = ServiceSession(self, session_id or new_session_id(), resources or Resources(), family, body)
        self._start_session(session)
        return session

    steps_together = True

    def step_many(self, steps: list[tuple[Session, Any]]) -> list[Any]:
        """The steps in ONE request (``POST /v1/steps``); each item the session's event or the exception its step
        raised, as :meth:`ServiceSession.step` raises it (the session's state following). A batch the service
        refuses whole (a session it has ended behind this backend's back, the service unreachable): each session
        steps on its own, so that each gets its own answer."""
        for session, _ in steps:
            if not isinstance(session, ServiceSession) or session._backend is not self:
                raise ValueError(f"session {session.id} is not a session of this backend")
        if len({s.id for s, _ in steps}) != len(steps):
            raise ValueError("step_many steps each session once")
        with contextlib.ExitStack() as held:
            for session, _ in sorted(steps, key=lambda item: item[0].id):  # one order: no deadlock between batches
                held.enter_context(session._lock)
            results: list[Any] = [None] * len(steps)
            ready: list[tuple[int, ServiceSession, Any]] = []
            for i, (session, action) in enumerate(steps):
                try:
                    session._check_ready()
                except Exception as exc:  # noqa: BLE001 - this session's outcome
                    results[i] = exc
                    continue
                ready.append((i, session, action))  # as the session's remote adapter takes it (action_body)
            try:
                answers = self.client.step_many([(s.remote, a) for _, s, a in ready]) if ready else []
            except Exception:  # noqa: BLE001 - refused whole: each steps alone below
                answers = [None] * len(ready)
                for k, (_, session, action) in enumerate(ready):
                    try:
                        answers[k] = session.remote.step(action)
                    except Exception as exc:  # noqa: BLE001 - this session's outcome
                        answers[k] = exc
            for (i, session, _), answer in zip(ready, answers, strict=True):
                if isinstance(answer, BaseException):
                    error = session._failed(answer)
                    if error is not answer:
                        error.__cause__ = answer
                    results[i] = error
                else:
                    results[i] = session._done(answer)
        return results

    def _local(self, exc: BaseException) -> BaseException:
        return local_error(exc, self.client.url)

    def info(self) -> dict:
        info = super().info()
        info["url"] = self.client.url
        return info

    def close(self) -> None:
        super().close()
        self.client.close()


__all__ = ["SESSION_BODIES", "ServiceBackend", "ServiceSession", "description_from_dict", "local_error"]
