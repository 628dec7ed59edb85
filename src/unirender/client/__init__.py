"""Python client of the render service: remote sessions with the local Controller's step/reset/stop and Event.

    from unirender.client import Client
    client = Client("http://127.0.0.1:8200", token="s3cret")
    with client.session({"width": 300, "height": 300}, scene="FloorPlan1") as env:   # instead of Controller(...)
        event = env.step("RotateRight")
        event.frame, event.depth_frame, event.metadata["agent"]

An ML-Agents environment (``{"protocol": "mlagents", ...}``) gives a :class:`RemoteMLAgentsSession`, whose events
are the core :class:`unirender.protocol.mlagents.MLAgentsEvent`, built from arrays (numpy only). Which session class
answers is looked up once, from the family the service reports for the new session (:data:`REMOTE_SESSIONS`).

Frames travel as msgpack (raw arrays with shape and dtype) over one keep-alive connection per thread.
Errors come back as the library's own exceptions (``ActionError``, ``PlayerCrashedError``, ``RestartError``,
``SpecError``, ...) with ``.status`` and ``.code`` from the service, or as :class:`ServiceError`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode, urlsplit

import requests
from requests.structures import CaseInsensitiveDict

from unirender import http_format
from unirender.errors import (
    ActionError,
    PlatformError,
    PlayerCrashedError,
    PlayerTimeoutError,
    RestartError,
    SpecError,
    UnirenderError,
)
from unirender.http_connection import ConnectTimeout, HttpConnection, ReadTimeout
from unirender.protocol.errors import HttpFramingError
from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, family_of, load_registered, moved_names

DEFAULT_URL = "http://127.0.0.1:8200"
FORMATS = {"msgpack": http_format.MSGPACK, "json": http_format.JSON, "multipart": http_format.MULTIPART}


class ServiceError(UnirenderError):
    """An error response from the service: HTTP ``status``, stable ``code``, ``details``."""

    def __init__(self, message: str, *, status: int, code: str, details: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details or {}


def error_from_response(resp: requests.Response) -> Exception:
    try:
        err = resp.json()["error"]
    except Exception:
        err = None
    return error_from_body(resp.status_code, err, f"HTTP {resp.status_code}: {resp.text[:200]}")


def error_from_body(status: int, err: Any, fallback: str = "") -> Exception:
    """An error body's ``{"code", "message", ...}`` (a response's, or one step's of a batch) -> the library's
    exception for it, with ``.status`` and ``.code``."""
    try:
        code, message = str(err["code"]), str(err["message"])
    except Exception:
        code, message, err = "http_error", fallback or f"HTTP {status}", {}
    details = {k: v for k, v in err.items() if k not in ("code", "message")}
    exc: Exception
    if code == "invalid_action":
        exc = ActionError(message, error_code=details.get("error_code"))
    elif code == "player_restarted":
        exc = RestartError(message)
    elif code in ("player_crashed", "session_lost"):
        exc = PlayerCrashedError(message, returncode=details.get("returncode"), signal_name=details.get("signal"))
    elif code == "player_timeout":
        exc = PlayerTimeoutError(message)
    elif code == "invalid_spec":
        exc = SpecError(message, [(e.get("path", ""), e.get("message", "")) for e in details.get("errors", [])])
    elif code == "platform_unavailable":
        exc = PlatformError(message)
    else:
        exc = ServiceError(f"{code}: {message}", status=status, code=code, details=details)
    exc.status, exc.code = status, code  # type: ignore[attr-defined]
    return exc


def _server_timing(resp: requests.Response) -> dict[str, float]:
    timing = {}
    for item in resp.headers.get("Server-Timing", "").split(","):
        name, _, rest = item.strip().partition(";dur=")
        try:
            timing[name] = float(rest)
        except ValueError:
            continue
    return timing


class Client:
    """A connection to one render service. Thread-safe: each thread gets its own keep-alive connection."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        format: str = "msgpack",
        timeout: float = 600.0,
    ):
        if format not in FORMATS:
            raise ValueError(f"format must be one of {sorted(FORMATS)}, not {format!r}")
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("UNIRENDER_TOKEN")
        self.accept = FORMATS[format]
        self.timeout = timeout
        self._local = threading.local()
        self._http_sessions: list[requests.Session] = []
        self._connections: list[HttpConnection] = []
        self._generation = 0
        self._lock = threading.Lock()
        # Plain HTTP that needs no proxy goes over a lean keep-alive connection of our own (http_connection):
        # requests' per-call machinery (prepare, hooks, cookies, environment lookups) and urllib3's and
        # http.client's under it cost ~0.7 ms a step on 2 cores. Everything else (https, proxies) goes through
        # requests. Either way callers get a requests.Response and requests' exceptions.
        parts = urlsplit(self.url)
        loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")  # never proxied (see _http)
        self._direct = parts.scheme == "http" and (loopback or not requests.utils.get_environ_proxies(self.url))
        self._host, self._port, self._prefix = parts.hostname, parts.port or 80, parts.path
        # What requests would send (identity: nothing to decompress); Host and Content-Length come per request.
        self._default_headers = {"User-Agent": requests.utils.default_user_agent(), "Accept-Encoding": "identity"}
        if self.token:
            self._default_headers["Authorization"] = f"Bearer {self.token}"

    # -- transport ---------------------------------------------------------------------------------------
    @property
    def _http(self) -> requests.Session:
        s = getattr(self._local, "http", None)
        if s is None:
            s = self._local.http = requests.Session()
            # Proxy lookup from the environment costs ~2 ms per request; a loopback service never needs it.
            s.trust_env = urlsplit(self.url).hostname not in ("127.0.0.1", "localhost", "::1")
            if self.token:
                s.headers["Authorization"] = f"Bearer {self.token}"
            with self._lock:
                self._http_sessions.append(s)
        return s

    @property
    def _connection(self) -> HttpConnection:
        conn = getattr(self._local, "connection", None)
        if conn is None or conn.generation != self._generation:  # none yet on this thread, or closed by close()
            # One keep-alive connection per thread, as with requests.
            conn = self._local.connection = HttpConnection(self._host, self._port, timeout=self.timeout)
            with self._lock:
                conn.generation = self._generation
                self._connections.append(conn)
        return conn

    def _direct_request(self, method: str, path: str, data: bytes | None, headers: dict,
                        params: Mapping | None) -> requests.Response:
        url = self._prefix + path
        if params:
            url += "?" + urlencode(params)
        conn = self._connection
        headers = {**self._default_headers, **headers}
        try:
            head, content = conn.request(method, url, headers, data)
        except ConnectTimeout as exc:
            raise requests.ConnectTimeout(exc) from exc
        except ReadTimeout as exc:
            raise requests.ReadTimeout(exc) from exc
        except (HttpFramingError, OSError) as exc:  # refused, reset, closed mid-response, not HTTP
            raise requests.ConnectionError(exc) from exc
        resp = requests.Response()
        resp.status_code, resp.reason = head.status, head.reason
        # A repeated header's values joined (as ResponseHead.get does), as urllib3 gave them; one pass.
        resp.headers = fields = CaseInsensitiveDict()
        for name, value in head.headers:
            prior = fields.get(name)
            fields[name] = value if prior is None else f"{prior}, {value}"
        resp.url = self.url + url[len(self._prefix):]
        resp._content, resp._content_consumed = content, True
        return resp

    def request(self, method: str, path: str, body: Any = None, *, accept: str | None = None,
                params: Mapping | None = None, content_type: str = http_format.JSON,
                headers: Mapping | None = None) -> requests.Response:
        """``content_type``: the body's encoding (msgpack sends numpy arrays as raw bytes); ``headers``: more
        request headers (e.g. ``Unirender-Body: batched``)."""
        headers = {"Accept": accept or http_format.JSON, **(headers or {})}
        if accept == http_format.MSGPACK:  # a WSGI player's metadata may come as the JSON it sent: no conversion
            headers[http_format.METADATA_HEADER] = http_format.METADATA_AS_SENT
        data = None
        if body is not None:
            headers["Content-Type"], data = http_format.encode_request_body(body, content_type)
        if self._direct:
            resp = self._direct_request(method, path, data, headers, params)
            if resp.status_code >= 400:
                raise error_from_response(resp)
            return resp
        resp = self._http.request(method, self.url + path, data=data, headers=headers, params=params,
                                  timeout=self.timeout, stream=True)
        try:
            # One read of Content-Length bytes; requests' .content would read 10 KiB at a time (MiB frames).
            body = resp.raw.read(decode_content=True)
        finally:
            resp.close()  # the body is consumed: the keep-alive connection goes back to the pool
        resp._content, resp._content_consumed = body, True
        if resp.status_code >= 400:
            raise error_from_response(resp)
        return resp

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        resp = self.request(method, path, body)
        return resp.json() if resp.content else None

    def _document(self, method: str, path: str, body: Any, params: Mapping | None = None, *,
                  lazy_metadata: bool = True, content_type: str = http_format.JSON,
                  headers: Mapping | None = None) -> tuple[dict, dict]:
        """(decoded document, Server-Timing as {name: ms}); ``lazy_metadata`` leaves an AI2-THOR event's
        metadata undecoded for ``Event.from_frames`` (an ML-Agents event reads its records at once)."""
        resp = self.request(method, path, body, accept=self.accept, params=params, content_type=content_type,
                            headers=headers)
        doc = http_format.decode_document(resp.headers.get("Content-Type"), resp.content, lazy_metadata=lazy_metadata)
        return doc, _server_timing(resp)

    def close(self) -> None:
        with self._lock:
            sessions, self._http_sessions = self._http_sessions, []
            connections, self._connections = self._connections, []
            self._generation += 1  # every thread opens a new (tracked) connection on its next request
        for s in sessions:
            s.close()
        for conn in connections:
            conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- service -----------------------------------------------------------------------------------------
    def health(self) -> dict:
        return self._json("GET", "/healthz")

    def platforms(self) -> dict:
        return self._json("GET", "/v1/platforms")

    def sessions(self) -> list[dict]:
        return self._json("GET", "/v1/sessions")["sessions"]

    def session(
        self,
        environment: Any = None,
        *,
        render: Any = None,
        scene: str | None = None,
        record: Mapping | None = None,
        auto_restart: bool = False,
        modalities: list[str] | None = None,
        seed: int | None = None,
    ) -> RemoteSessionBase:
        """Start a remote player. ``environment``: an ``EnvironmentSpec`` (or ``MLAgentsEnvironmentSpec``), a
        mapping, or a spec file path (a job file works: its ``environment`` is used). AI2-THOR: ``render`` (a
        ``RenderSpec`` or mapping: modalities, cameras) and ``scene``; ML-Agents (``protocol: mlagents``):
        ``record``, ``{"sensors": [...], "behaviors": [...]}`` the events carry (default all). ``modalities``:
        which frames each step returns (default all the event has; ML-Agents: sensor names). The session's class
        follows its family (:data:`REMOTE_SESSIONS`). ``seed`` (ML-Agents): the game's seed at launch."""
        body: dict[str, Any] = {"environment": _environment_dict(environment), "auto_restart": auto_restart}
        if render is not None:
            body["render"] = render.model_dump(mode="json") if hasattr(render, "model_dump") else dict(render)
        if scene is not None:
            body["scene"] = scene
        if record is not None:
            body["record"] = dict(record)
        if seed is not None:  # ML-Agents: the game's seed at launch
            body["seed"] = seed
        info = self._json("POST", "/v1/sessions", body)
        return remote_session_class(info.get("family") or _family(body["environment"]))(self, info, modalities)

    def mlagents_session(self, environment: Mapping, *, record: Mapping | None = None, auto_restart: bool = False,
                         modalities: list[str] | None = None) -> RemoteSessionBase:
        """Start a remote ML-Agents game: ``environment`` as in a job spec (``protocol: mlagents`` is added),
        ``record``: ``{"sensors": [...], "behaviors": [...]}`` the events carry (default all)."""
        session = self.session({**dict(environment), "protocol": MLAGENTS}, record=record,
                               auto_restart=auto_restart, modalities=modalities)  # fmt: skip
        assert session.family == MLAGENTS
        return session

    def render(self, episode: Mapping, *, environment: Any = None, render: Any = None,
               record: Mapping | None = None) -> list:
        """One-shot render of an episode on a temporary player -> its events, typed by family: AI2-THOR (scene +
        actions or poses, ``render``) a list of ``Event``; ML-Agents (``environment.protocol: mlagents``: steps
        of a policy, ``record``) a list of ``MLAgentsEvent``."""
        body: dict[str, Any] = {"environment": _environment_dict(environment), "episode": dict(episode)}
        if render is not None:
            body["render"] = render.model_dump(mode="json") if hasattr(render, "model_dump") else dict(render)
        if record is not None:
            body["record"] = dict(record)
        session_class = remote_session_class(_family(body["environment"]))
        doc, _ = self._document("POST", "/v1/render", body, lazy_metadata=session_class.lazy_metadata)
        return [session_class.event_of(d, None) for d in doc["events"]]

    def step_many(self, steps: list[tuple[Any, Any]], *, modalities: list[str] | None = None) -> list:
        """Step several of this client's sessions in ONE request (``POST /v1/steps``, run concurrently on the
        service): ``steps`` is ``[(remote session, action), ...]``, each action as that session's ``step`` takes
        it. Returns, in order, each session's event (also its ``last_event``) or the exception its step raised
        (``RestartError``, ``PlayerCrashedError``, ``ServiceError``...: one session's failure does not fail the
        others'). A batch the service refuses whole (another owner's session, a duplicate, too many) raises."""
        if not steps:
            return []
        body = {"steps": [{"session": session.id, "action": session.action_body(action)}
                          for session, action in steps]}  # fmt: skip
        params = {"modalities": ",".join(modalities) or "none"} if modalities is not None else None
        lazy = all(session.lazy_metadata for session, _ in steps)
        sessions = [session for session, _ in steps]
        # msgpack and the batched body when every session's family takes them (each event says which body it is)
        content_type = (http_format.MSGPACK if all(s.request_format == http_format.MSGPACK for s in sessions)
                        else http_format.JSON)  # fmt: skip
        headers: dict = {}
        for session in sessions:
            headers.update(session.request_headers())
        doc, timing = self._document("POST", "/v1/steps", body, params=params, lazy_metadata=lazy,
                                     content_type=content_type, headers=headers)
        results: list = []
        for (session, _), item in zip(steps, doc["events"], strict=True):
            if "error" in item:
                results.append(error_from_body(int(item.get("status", 500)), item["error"]))
                continue
            session.last_event = session.event_of(item, session._description())
            session.last_server_timing = timing
            results.append(session.last_event)
        return results

    def submit_job(self, spec: Any) -> RemoteJob:
        """Submit a job spec (``JobSpec``, mapping or file path); ``output.directory`` is under the data root."""
        if hasattr(spec, "model_dump"):
            data = spec.model_dump(mode="json")
        elif isinstance(spec, Mapping):
            data = dict(spec)
        else:
            from unirender.spec import read_document

            data = read_document(spec)
        return RemoteJob(self, self._json("POST", "/v1/jobs", data))


def _family(environment: dict) -> str:
    """The family an environment section names (an unknown protocol: the service's answer will say so)."""
    try:
        return family_of(environment)
    except ValueError:
        return AI2THOR


def _environment_dict(environment: Any) -> dict:
    if environment is None:
        return {}
    if hasattr(environment, "model_dump"):
        return environment.model_dump(mode="json")
    if isinstance(environment, Mapping):
        return dict(environment.get("environment", environment))
    from unirender.spec import load_environment

    return load_environment(environment).model_dump(mode="json")


EventT = TypeVar("EventT")


class RemoteSessionBase(Generic[EventT]):
    """What every remote session has, whatever its family: ``id``, ``info()`` (the service's record of it),
    ``describe()`` (its player's ``Session.describe()``: family, actions, observations, where it runs),
    ``last_event``, ``last_server_timing``, ``platform``, ``stop()`` (idempotent) and ``with``. The verbs,
    ``step`` and ``reset``, take and return what the family's own controller does: :class:`RemoteSession`
    (AI2-THOR: actions -> ``Event``), :class:`RemoteMLAgentsSession` (ML-Agents: actions per behavior ->
    ``MLAgentsEvent``)."""

    family: str
    lazy_metadata = False  # the event documents' metadata left undecoded for event_of (AI2-THOR's)
    request_format = http_format.JSON  # how step bodies go up (msgpack: numpy arrays as raw bytes)

    def __init__(self, client: Client, info: dict, modalities: list[str] | None = None):
        self.client = client
        self.id: str = info["id"]
        self.info_at_start = info
        self.last_event: EventT | None = None
        self.last_server_timing: dict[str, float] = {}  # {"step": ms in the player, "encode": ms}
        self._params = {"modalities": ",".join(modalities) or "none"} if modalities is not None else None
        self._stopped = False

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> Any:
        """An event document -> the family's event."""
        raise NotImplementedError

    @property
    def platform(self) -> str | None:
        return self.info_at_start.get("platform")

    def info(self) -> dict:
        return self.client._json("GET", f"/v1/sessions/{self.id}")

    def describe(self) -> dict | None:
        """The player's description (``unirender.simulator.Description.to_dict()``: ``family``, ``actions``,
        ``observations``, ``pid``, ``platform``, ...) as the service has it now; None when the player cannot
        say (it has just failed)."""
        return self.info().get("description")

    def action_body(self, action: Any) -> Any:
        """What ``step(action)`` sends as its body (also one step of ``Client.step_many``)."""
        raise NotImplementedError

    def request_headers(self) -> dict:
        """Headers each event request carries (the family's body negotiation, if any)."""
        return {}

    def latest_event(self) -> EventT:
        """The session's last event as the service has it (``GET /v1/sessions/{id}/event``: after its start, or
        after a restart of its player), without stepping; it becomes ``last_event``."""
        doc, self.last_server_timing = self.client._document(
            "GET", f"/v1/sessions/{self.id}/event", None, params=self._params, lazy_metadata=self.lazy_metadata,
            headers=self.request_headers(),
        )
        self.last_event = self.event_of(doc, self._description())
        return self.last_event

    def _event(self, verb: str, body: Any) -> EventT:
        doc, self.last_server_timing = self.client._document(
            "POST", f"/v1/sessions/{self.id}/{verb}", body, params=self._params, lazy_metadata=self.lazy_metadata,
            content_type=self.request_format, headers=self.request_headers(),
        )
        self.last_event = self.event_of(doc, self._description())
        return self.last_event

    def _description(self) -> dict | None:
        return None

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.client.request("DELETE", f"/v1/sessions/{self.id}")
        except ServiceError as exc:
            if exc.status not in (404, 410):  # already gone: fine
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# family -> "module:Class" of the remote session that speaks it (imported on first use; a third family adds its
# line and its module, ``client/<family>.py``)
REMOTE_SESSIONS: dict[str, str] = {
    AI2THOR: "unirender.client.ai2thor:RemoteSession",
    MLAGENTS: "unirender.client.mlagents:RemoteMLAgentsSession",
    WEBGL: "unirender.client.webgl:RemoteWebGLSession",
}


def remote_session_class(family: str) -> type[RemoteSessionBase]:
    """The remote session class registered for ``family`` (imported on first use, ``simulator.load_target``)."""
    return load_registered(REMOTE_SESSIONS, family, lambda: ValueError(
        f"the client has no session class for protocol {family!r}; known: {', '.join(REMOTE_SESSIONS)}"))


# Names whose home is now a family's module (``unirender.client.RemoteSession`` and the rest still work).
__getattr__ = moved_names(__name__, {
    "RemoteSession": "unirender.client.ai2thor:RemoteSession",
    "RemoteMLAgentsSession": "unirender.client.mlagents:RemoteMLAgentsSession",
    "_event_from_document": "unirender.client.ai2thor:event_from_document",
    "_action_parts": "unirender.client.mlagents:action_parts",
    "RemoteMLAgentsEvent": "unirender.remote_events:RemoteMLAgentsEvent",  # deprecated: the core MLAgentsEvent
})


log = logging.getLogger(__name__)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the service is away (not reachable, or restarting): worth waiting for, not a refusal."""
    if isinstance(exc, requests.ConnectionError | requests.Timeout):
        return True
    return getattr(exc, "status", None) in (502, 503, 504) and getattr(exc, "code", None) in (
        "shutting_down", "http_error", "capacity_exhausted")  # fmt: skip


class ServiceUnreachableError(ServiceError):
    """The service stayed away (unreachable or restarting) past the caller's ``reconnect_timeout``."""


class RemoteJob:
    """A job on the service. Jobs are durable there (a restarted service takes them up again), so following one
    rides through a service restart: :meth:`wait` reconnects and keeps following the same job."""

    def __init__(self, client: Client, info: dict):
        self.client = client
        self.id: str = info["id"]
        self.last_status = info
        self.reconnects = 0  # outages this object rode through while following its job

    def status(self) -> dict:
        self.last_status = self.client._json("GET", f"/v1/jobs/{self.id}")
        return self.last_status

    def wait(self, timeout: float | None = None, *, poll: float = 0.5,
             progress: Callable[[dict], None] | None = None, reconnect_timeout: float = 300.0) -> dict:
        """Poll until the job ends; ``progress(dict)`` is called whenever its progress changes.

        A service that goes away meanwhile (refused or reset connections, 503 while it restarts) is waited for,
        with backoff, up to ``reconnect_timeout`` seconds per outage, then :class:`ServiceUnreachableError`
        names the URL and how long it tried; each outage is logged once (warning) and once when it ends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        outage_since: float | None = None
        backoff = poll
        while True:
            try:
                status = self.status()
            except Exception as exc:
                if not is_outage(exc):
                    raise
                now = time.monotonic()
                if outage_since is None:
                    outage_since = now
                    log.warning("job %s: the service at %s is away (%s); reconnecting for up to %.0f s",
                                self.id, self.client.url, exc, reconnect_timeout)
                elif now - outage_since > reconnect_timeout:
                    raise ServiceUnreachableError(
                        f"the service at {self.client.url} stayed unreachable for {now - outage_since:.0f} s "
                        f"(reconnect_timeout={reconnect_timeout:g}) while following job {self.id}: {exc}",
                        status=503, code="service_unreachable") from exc
                time.sleep(backoff)
                backoff = min(2 * backoff, 5.0)
                continue
            if outage_since is not None:
                self.reconnects += 1
                log.warning("job %s: the service at %s is back after %.1f s; following the same job (%s)",
                            self.id, self.client.url, time.monotonic() - outage_since, status.get("state"))
                outage_since, backoff = None, poll
            if progress is not None and status.get("progress") != seen:
                seen = status.get("progress")
                progress(seen)
            if status["state"] in ("succeeded", "failed", "cancelled"):
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {self.id} still {status['state']} after {timeout} s")
            time.sleep(poll)

    def cancel(self) -> dict:
        return self.client._json("DELETE", f"/v1/jobs/{self.id}")

    def manifest(self) -> dict:
        return self.client._json("GET", f"/v1/jobs/{self.id}/manifest")
