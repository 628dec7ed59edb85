"""ServiceBackend: sessions that are a running ``unirender serve``'s sessions (players on the render host, the
caller elsewhere), through the service's HTTP API and :class:`unirender.client.Client`.

``create_backend("service", url=..., token=...)``. Each session is a service session, so the service's auth,
quotas, rate limits, idle reaping and the console's live view apply to it as to any client's. The controller
kwargs a session is created with become the service's session body (:data:`SESSION_BODIES`: a function in each
family's cluster adapter, ``cluster/ai2thor.py``, ``cluster/mlagents.py``, ``cluster/webgl.py``; the inverse of how the service builds
controller kwargs from an environment spec; a kwarg no body can say is refused, naming it).
Events are the local ones' types: AI2-THOR ``Event``; ML-Agents :class:`unirender.protocol.mlagents.MLAgentsEvent`,
built from the service's arrays; WebGL: the family's one ``WebGLEvent`` (``protocol.webgl_event``).
A WebGL build folder of this machine is uploaded as the others' build folders are (:meth:`ServiceBackend.bring_build`). The service's error codes come back as the local backends' exceptions
(:func:`local_error`).

Batched steps: ``backend.step_many([(session, action), ...])`` steps those sessions in ONE ``POST /v1/steps``
(``Client.step_many``), each getting its own event or error (``steps_together``: a vector env steps its envs
through it, from one thread).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests

from unirender.cluster.base import (
    LOST,
    READY,
    STOPPED,
    CapacityError,
    Resources,
    Session,
    SessionBackend,
    SessionLostError,
    stop_quietly,
)
from unirender.errors import PlayerError, RestartError
from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, family_of, load_registered, moved_names

if TYPE_CHECKING:
    from unirender.simulator import Description

log = logging.getLogger(__name__)

# -- controller kwargs -> the service's session body: each family's adapter (the inverse of service/*_sessions.py)
# family -> "module:function" taking the controller kwargs, giving ``Client.session`` arguments (a third family adds
# its line; the function lives in the family's cluster adapter module)
SESSION_BODIES: dict[str, str] = {
    AI2THOR: "unirender.cluster.ai2thor:ai2thor_session_body",
    MLAGENTS: "unirender.cluster.mlagents:mlagents_session_body",
    WEBGL: "unirender.cluster.webgl:webgl_session_body",
}


def session_body(family: str) -> Callable[[dict], dict]:
    """The session body function registered for ``family`` (imported on first use, ``simulator.load_target``)."""
    return load_registered(SESSION_BODIES, family, lambda: ValueError(
        f"the service backend has no session body for protocol {family!r}; known: {', '.join(SESSION_BODIES)}"))


# the bodies' old home (they moved to each family's cluster adapter)
__getattr__ = moved_names(__name__, {f"{family}_session_body": target for family, target in SESSION_BODIES.items()
                                     if family in (AI2THOR, MLAGENTS)})  # fmt: skip


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


class ServiceOutageError(RestartError):
    """The service went away (restarted, redeployed, unreachable for a while) under this session and came back:
    the session was recreated there (or its step's outcome could not be known), so its episode is lost, as after
    a player crash (a ``RestartError``: a gym env ends the episode truncated, ``info["restart_cause"]`` is
    ``cause``). ``cause``: ``service_restart`` (the service lost the session: recreated) or ``step_unknown`` (the
    session survived, but whether this step reached it cannot be told)."""

    def __init__(self, message: str, *, cause: str):
        super().__init__(message)
        self.cause = cause


# Answers that mean the session may be gone because the SERVICE went away (not the player): checked against
# the service's own record of the session (GET /v1/sessions/{id}: ``lost`` or unknown -> recreate).
_MAYBE_RESTARTED = ("session_ended", "session_not_found", "session_lost")


def _outage_kind(exc: BaseException) -> str | None:
    """``away``: the service cannot be reached or says it is restarting; ``gone``: it answers but may have lost
    the session in a restart; None: any other error (the player's, the caller's)."""
    from unirender.client import is_outage

    if is_outage(exc):
        return "away"
    if getattr(exc, "code", None) in _MAYBE_RESTARTED or isinstance(exc, SessionLostError):
        return "gone"
    return None


class ServiceSession(Session):
    """A session of the service, with the local sessions' verbs and events (see the module doc)."""

    backend_name = "service"

    def __init__(self, backend: ServiceBackend, session_id: str, resources: Resources, family: str, body: dict):
        super().__init__(session_id, resources, family)
        self._backend = backend
        self._body = body
        self.remote: Any = None  # the client's RemoteSession / RemoteMLAgentsSession
        self._remote_calls = 0  # steps + resets the current remote session completed (its ``steps`` on the service)

    # -- the lifecycle's hooks (Session.restart/stop) ----------------------------------------------------------
    def _start_player(self, *, raw_errors: bool = False) -> None:
        """A new session on the service from this session's body (``raw_errors``: the client's exceptions as they
        are, for the outage logic to read; else as the local backends raise them)."""
        try:
            remote = self._backend.client.session(**self._body)
        except Exception as exc:
            if raw_errors:
                raise
            raise self._backend._local(exc) from exc
        self.remote = remote
        self._remote_calls = 0
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
            return self._done(self._call(lambda: self.remote.reset(scene, **initialize_params), reset=True))

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

    def _call(self, fn: Callable[[], Any], *, reset: bool = False) -> Any:
        try:
            return fn()
        except Exception as exc:
            return self._recover(exc, fn, reset=reset)

    def _recover(self, exc: BaseException, redo: Callable[[], Any], *, reset: bool = False) -> Any:
        """After ``exc`` from a call on the remote session: ride an outage through (``redo``: the call again;
        ``reset``: it is a reset, which a recreated session simply does), or raise ``exc`` as locally."""
        if self._backend.reconnect_timeout and _outage_kind(exc) is not None:
            return self._ride_outage(exc, redo, reset=reset)
        raise self._failed(exc) from exc

    def _ride_outage(self, exc: BaseException, redo: Callable[[], Any], *, reset: bool = False) -> Any:
        """``redo()``'s outcome once the service is back, for a call that failed with ``exc`` (an outage, or an
        answer saying the session may be gone): waits for the service (``ServiceBackend.await_session``), then
        - it still has the session and never got the call: the call again; it got it: its event;
        - it lost the session (restarted) or no longer knows it: a new session there (the service going away
          again meanwhile is waited for too), and :class:`ServiceOutageError` (the episode is lost;
          ``last_event`` is the new session's first view); a reset is simply done on the new session;
        - the session ended for another reason (deleted, reaped, its player failed): the error, as without outages.
        Past ``reconnect_timeout`` (from the first failure): ``SessionLostError`` naming the URL and how long."""
        backend = self._backend
        deadline = time.monotonic() + backend.reconnect_timeout
        cause: BaseException = exc
        while True:
            try:
                doc = backend.await_session(self.remote.id if self.remote is not None else None, cause, deadline)
            except SessionLostError:
                self.state = LOST
                raise
            state = (doc or {}).get("state")
            if doc is not None and state not in ("lost", STOPPED):
                return self._resume_live(doc, exc, redo)
            if doc is not None and state == STOPPED:  # ended for a reason of its own: not an outage
                raise self._failed(exc) from exc
            old, self.remote = self.remote, None
            stop_quietly(old)  # a lost record: deleted; nothing if the service does not know it
            try:
                self._start_player(raw_errors=True)
            except Exception as again:
                if _outage_kind(again) == "away":  # the service went away again while the session was made
                    cause = again
                    continue
                self.state = LOST
                raise backend._local(again) from again
            self.restarts += 1
            backend.count_fault("recreated")
            if reset:  # a reset asks for a new episode: the new session's, no episode lost
                return self._call(redo, reset=True)
            backend.count_fault("truncated:service_restart")
            raise ServiceOutageError(f"session {self.id}: the service at {backend.client.url} lost it in a restart "
                                     f"({exc}); recreated there: the episode is lost",
                                     cause="service_restart") from exc  # fmt: skip

    def _resume_live(self, doc: dict, exc: BaseException, redo: Callable[[], Any]) -> Any:
        """The session survived the outage: did the failed call reach it? (the service's step count says)"""
        backend = self._backend
        if doc.get("state") == LOST or doc.get("steps") is None:  # the service's own player failed
            raise self._failed(exc) from exc
        done = int(doc["steps"])
        if done == self._remote_calls:  # the call never reached the session: send it again
            return self._call(redo)
        if done == self._remote_calls + 1:  # it did: its event is the session's latest
            return self.remote.latest_event()
        backend.count_fault("truncated:step_unknown")
        self.last_event = self.remote.latest_event()
        self._remote_calls = done
        self.restarts += 1
        raise ServiceOutageError(f"session {self.id}: the service at {backend.client.url} went away during a "
                                 f"step ({exc}); whether the step ran cannot be told: the episode is lost",
                                 cause="step_unknown") from exc  # fmt: skip

    def _failed(self, exc: BaseException) -> BaseException:
        """``exc`` as the local backends raise it, the session's state following (as ``LocalSession._call``)."""
        if isinstance(exc, ServiceOutageError):  # already accounted for by _ride_outage
            return exc
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
        self._remote_calls += 1
        self.last_event = event
        return event


class _Outcome:
    """A session's final outcome in ``step_many``'s fall-back (an event, or the exception as raised locally)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class ServiceBackend(SessionBackend):
    """Sessions of the service at ``url`` (``token``: its bearer token, default ``$UNIRENDER_TOKEN``).

    ``format``: the responses' encoding (msgpack, frames as views; ``json``/``multipart`` for debugging);
    ``timeout``: seconds for any one request (a step, a player's start). ``resources`` of a session: a GPU
    index becomes its ``gpu_device``; displays and CPU shares are the service's business (its own backend)."""

    name = "service"

    def __init__(self, url: str, token: str | None = None, *, format: str = "msgpack", timeout: float = 600.0,
                 reconnect_timeout: float = 180.0):
        super().__init__()
        from unirender.client import Client

        if reconnect_timeout < 0:
            raise ValueError(f"reconnect_timeout must be >= 0 seconds (0: no riding through outages), "
                             f"got {reconnect_timeout!r}")
        self.client = Client(url, token, format=format, timeout=timeout)
        self.reconnect_timeout = float(reconnect_timeout)
        self._faults: dict[str, int] = {}
        self._faults_lock = threading.Lock()
        self._outage_since: float | None = None  # when the current outage began (one log line per outage)
        self._builds_here: set[str] = set()  # digests the service is known to hold
        self.uploads = 0  # builds this backend uploaded to the service
        self._builds_lock = threading.Lock()

    # -- the trainer's build on the render host (docs/builds.md, "A service's store over HTTP") -------------------
    def bring_build(self, kwargs: dict) -> dict:
        """``kwargs`` naming a build of this machine (``build=`` a store reference, or ``executable=`` a path that
        exists here) -> the same kwargs naming it by digest on the service, after making sure the service holds
        it: the digest is computed here (cached), ``HEAD /v1/builds/{digest}`` asked, and the build uploaded
        (``PUT``, needs the token's ``builds:write``) only when the service lacks it, once per backend. ``builtin``
        and paths that do not exist here (a path on the render host, as before) are left as they are."""
        reference, executable = kwargs.get("build"), kwargs.get("executable")
        if isinstance(executable, str | os.PathLike) and os.path.isdir(os.path.join(executable, "Build")):
            executable = os.path.join(executable, "Build")  # a WebGL build folder: the folder its Build/ stands in
        elif reference is None and (not isinstance(executable, str | os.PathLike)
                                    or os.fspath(executable) == "builtin" or not os.path.isfile(executable)):  # fmt: skip
            return kwargs
        from unirender.builds import BuildStore
        from unirender.builds.resolve import build_folder

        store = BuildStore()
        if reference is not None:
            if str(reference).startswith("sha256:") and not (store.builds_dir / str(reference)[7:]).is_dir():
                return kwargs  # a digest this machine does not hold: the service may (it says so if not)
            digest = store.resolve(str(reference)).digest
        else:
            digest = store.digest_folder(build_folder(executable))
        with self._builds_lock:
            if digest not in self._builds_here:
                if not self._service_has(digest):
                    if reference is None:
                        store.add(build_folder(executable))
                    self._upload(store, digest)
                self._builds_here.add(digest)
        out = {k: v for k, v in kwargs.items() if k not in ("build", "executable")}
        out["build"] = digest
        return out

    def _service_has(self, digest: str) -> bool:
        try:
            self.client.request("HEAD", f"/v1/builds/{digest}")
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise self._local(exc) from exc
        return True

    def _upload(self, store, digest: str) -> None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="unirender-upload-") as tmp:
            tar = os.path.join(tmp, "build.tar")
            store.export(digest, tar)
            with open(tar, "rb") as body:
                resp = self.client._http.put(f"{self.client.url}/v1/builds/{digest}", data=body, timeout=None,
                                             headers={"Content-Type": "application/x-tar",
                                                      "Content-Length": str(os.path.getsize(tar))})  # fmt: skip
        if resp.status_code >= 300:
            from unirender.client import error_from_response

            raise self._local(error_from_response(resp))
        self.uploads += 1
        log.info("uploaded build %s to %s", digest, self.client.url)

    # -- riding through outages (docs/cluster.md, "When the render host goes away") ---------------------------
    def await_session(self, remote_id: str | None, cause: BaseException, deadline: float) -> dict | None:
        """The service's record of session ``remote_id`` (``GET /v1/sessions/{id}``; no id: ``/readyz``) once the
        service answers; None when it does not know the session. Polls with backoff (0.1 s doubling to 2 s) while
        the service is away; past ``deadline`` (monotonic): ``SessionLostError`` naming the URL and how long."""
        from unirender.client import is_outage

        started = deadline - self.reconnect_timeout
        delay, last = 0.1, cause
        away = _outage_kind(cause) == "away"
        if away:
            self._outage_began(cause)
        while True:
            try:
                if remote_id is None:
                    self.client._json("GET", "/readyz")
                    doc = None
                else:
                    doc = self.client._json("GET", f"/v1/sessions/{remote_id}")
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code == "session_not_found":
                    doc = None
                elif code == "session_ended":  # ended for a reason of its own (deleted, reaped, player failed)
                    doc = {"state": STOPPED}
                elif is_outage(exc) or code == "not_ready":
                    if not away:
                        away = True
                        self._outage_began(exc)
                    last = exc
                    now = time.monotonic()
                    if now > deadline:
                        self.count_fault("gave_up")
                        raise SessionLostError(
                            f"the service at {self.client.url} stayed unreachable for {now - started:.0f} s "
                            f"(reconnect_timeout={self.reconnect_timeout:g}): {last}") from last
                    time.sleep(min(delay, max(0.0, deadline - now) + 0.01))
                    delay = min(2 * delay, 2.0)
                    continue
                else:
                    raise
            if away:
                self._outage_ended()
            return doc

    def _outage_began(self, exc: BaseException) -> None:
        with self._faults_lock:
            if self._outage_since is not None:
                return
            self._outage_since = time.monotonic()
        log.warning("the service at %s is away (%s); reconnecting for up to %g s", self.client.url, exc,
                    self.reconnect_timeout)

    def _outage_ended(self) -> None:
        with self._faults_lock:
            since, self._outage_since = self._outage_since, None
            if since is None:
                return
            self._faults["reconnects"] = self._faults.get("reconnects", 0) + 1
        log.warning("the service at %s is back after %.1f s", self.client.url, time.monotonic() - since)

    def count_fault(self, what: str) -> None:
        with self._faults_lock:
            self._faults[what] = self._faults.get(what, 0) + 1

    def faults(self) -> dict[str, int]:
        """What this backend rode through: ``reconnects`` (outages that ended), ``recreated`` (sessions made
        again on a restarted service), ``truncated:<cause>`` (episodes lost, by cause), ``gave_up``."""
        with self._faults_lock:
            return dict(self._faults)

    def _create_session(self, kwargs: dict, session_id: str, resources: Resources | None) -> ServiceSession:
        if resources is not None and resources.gpu is not None and kwargs.get("gpu_device") is None:
            kwargs["gpu_device"] = resources.gpu
        family = family_of(kwargs)
        kwargs = self.bring_build(kwargs)
        body = session_body(family)(kwargs)
        session = ServiceSession(self, session_id, resources or Resources(), family, body)
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
            except Exception:  # noqa: BLE001 - refused whole (or the service away): each steps alone below
                answers = [None] * len(ready)
                for k, (_, session, action) in enumerate(ready):
                    try:
                        answers[k] = _Outcome(session._done(session._call(lambda s=session, a=action: s.remote.step(a))))
                    except Exception as exc:  # noqa: BLE001 - this session's outcome, already as raised locally
                        answers[k] = _Outcome(exc)
            for (i, session, action), answer in zip(ready, answers, strict=True):
                if isinstance(answer, _Outcome):
                    results[i] = answer.value
                elif isinstance(answer, BaseException):
                    try:  # an item's error: as the session's own step would raise it (an outage ridden through)
                        results[i] = session._done(session._recover(answer, lambda s=session, a=action: s.remote.step(a)))
                    except Exception as exc:  # noqa: BLE001 - this session's outcome
                        results[i] = exc
                else:
                    results[i] = session._done(answer)
        return results

    def _local(self, exc: BaseException) -> BaseException:
        return local_error(exc, self.client.url)

    def info(self) -> dict:
        info = super().info()
        info["url"] = self.client.url
        info["faults"] = self.faults()
        return info

    def close(self) -> None:
        super().close()
        self.client.close()


__all__ = ["SESSION_BODIES", "ServiceBackend", "ServiceOutageError", "ServiceSession", "description_from_dict",
           "local_error", "session_body"]
