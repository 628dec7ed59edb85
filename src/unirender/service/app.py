"""The render service as one WSGI application: ``/v1/*`` for clients, ``/train`` + ``/ping`` for players.

``create_app(config)`` builds it; any WSGI server can run it, as long as it is ONE process (sessions and the
players' long polls live in its memory) with a thread pool (see docs/service.md and ``server.py``).

The app routes (:data:`URLS` -> :data:`ENDPOINTS`, the functions of ``service.endpoints``), authenticates,
drains, and offers the endpoints what they share: the registries (``sessions``, ``jobs``, ``policy``, ``slots``,
``metrics``, ``backend``, ``hub``, ``config``) and :meth:`ServiceApp.read_body`, :meth:`~ServiceApp.response_format`,
:meth:`~ServiceApp.json_as_sent`, :meth:`~ServiceApp.json_response`, :meth:`~ServiceApp.encoded_response`.
What differs per family lives in ``service.families``; event documents in ``service.documents``.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from unirender.errors import SpecError
from unirender.service import documents, http_format
from unirender.service.config import OPEN_GRANT, ServiceConfig
from unirender.service.data_root import DataRoot
from unirender.service.endpoints import batch as batch_api
from unirender.service.endpoints import builds as builds_api
from unirender.service.endpoints import jobs as jobs_api
from unirender.service.endpoints import meta
from unirender.service.endpoints import render as render_api
from unirender.service.endpoints import sessions as sessions_api
from unirender.service.errors import ApiError, from_http_exception, from_unirender_error
from unirender.service.jobs import JobManager
from unirender.service.limits import PlayerSlots
from unirender.service.metrics import ServiceMetrics
from unirender.service.paths import owner_dir
from unirender.service.policy import ActionPolicy, check_body
from unirender.service.scopes import Grant, needed
from unirender.service.session_video import SessionVideos
from unirender.service.sessions import IdleReaper, SessionRegistry
from unirender.transport.serving import trust_connection

log = logging.getLogger(__name__)
# A console form (login, an action, cancel) is a few hundred bytes; 16 KiB leaves room without letting an
# unauthenticated sender make the server hold a real body.
CONSOLE_FORM_BYTES = 16 * 1024

URLS = Map(
    [
        Rule("/", endpoint="root", methods=["GET"]),
        Rule("/healthz", endpoint="healthz", methods=["GET"]),
        Rule("/health", endpoint="healthz", methods=["GET"]),  # the other common spelling
        Rule("/readyz", endpoint="readyz", methods=["GET"]),
        Rule("/metrics", endpoint="metrics", methods=["GET"]),
        Rule("/openapi.json", endpoint="openapi", methods=["GET"]),
        Rule("/docs", endpoint="docs", methods=["GET"]),
        Rule("/v1/platforms", endpoint="platforms", methods=["GET"]),
        Rule("/v1/builds", endpoint="list_builds", methods=["GET"]),
        Rule("/v1/builds/<digest>", endpoint="get_build", methods=["GET", "HEAD"]),
        Rule("/v1/builds/<digest>/manifest", endpoint="get_build_manifest", methods=["GET", "HEAD"]),
        Rule("/v1/builds/<digest>/blobs/<sha256>", endpoint="get_build_blob", methods=["GET", "HEAD"]),
        Rule("/v1/builds/<digest>/blobs", endpoint="post_build_blobs", methods=["POST"]),
        Rule("/v1/builds/<digest>", endpoint="put_build", methods=["PUT"]),
        Rule("/v1/builds/<digest>", endpoint="delete_build", methods=["DELETE"]),
        Rule("/v1/sessions", endpoint="list_sessions", methods=["GET"]),
        Rule("/v1/sessions", endpoint="create_session", methods=["POST"]),
        Rule("/v1/sessions/<session_id>", endpoint="get_session", methods=["GET"]),
        Rule("/v1/sessions/<session_id>", endpoint="delete_session", methods=["DELETE"]),
        Rule("/v1/sessions/<session_id>/step", endpoint="step", methods=["POST"]),
        Rule("/v1/sessions/<session_id>/reset", endpoint="reset", methods=["POST"]),
        Rule("/v1/sessions/<session_id>/event", endpoint="last_event", methods=["GET"]),
        Rule("/v1/sessions/<session_id>/video", endpoint="get_video", methods=["GET"]),
        Rule("/v1/sessions/<session_id>/video/start", endpoint="start_video", methods=["POST"]),
        Rule("/v1/sessions/<session_id>/video/stop", endpoint="stop_video", methods=["POST"]),
        Rule("/v1/steps", endpoint="batch_steps", methods=["POST"]),
        Rule("/v1/render", endpoint="render", methods=["POST"]),
        Rule("/v1/jobs", endpoint="list_jobs", methods=["GET"]),
        Rule("/v1/jobs", endpoint="submit_job", methods=["POST"]),
        Rule("/v1/jobs/<job_id>", endpoint="get_job", methods=["GET"]),
        Rule("/v1/jobs/<job_id>", endpoint="cancel_job", methods=["DELETE"]),
        Rule("/v1/jobs/<job_id>/manifest", endpoint="job_manifest", methods=["GET"]),
    ],
    strict_slashes=False,
)
PUBLIC = {"root", "healthz", "readyz", "metrics", "openapi", "docs"}
PLAYER_PATHS = ("/train", "/ping")

ENDPOINTS = {
    "root": meta.root, "healthz": meta.healthz, "readyz": meta.readyz, "metrics": meta.metrics,
    "openapi": meta.openapi, "docs": meta.docs, "platforms": meta.platforms, "list_builds": meta.builds,
    "get_build": builds_api.get_build, "get_build_manifest": builds_api.get_build_manifest,
    "get_build_blob": builds_api.get_build_blob, "post_build_blobs": builds_api.post_build_blobs,
    "put_build": builds_api.put_build, "delete_build": builds_api.delete_build,
    "list_sessions": sessions_api.list_sessions, "create_session": sessions_api.create_session,
    "get_session": sessions_api.get_session, "delete_session": sessions_api.delete_session, "step": sessions_api.step,
    "reset": sessions_api.reset, "render": render_api.render,
    "last_event": batch_api.last_event, "batch_steps": batch_api.steps,
    "list_jobs": jobs_api.list_jobs, "submit_job": jobs_api.submit_job, "get_job": jobs_api.get_job,
    "cancel_job": jobs_api.cancel_job, "job_manifest": jobs_api.job_manifest,
    "get_video": sessions_api.get_video, "start_video": sessions_api.start_video,
    "stop_video": sessions_api.stop_video,
}  # fmt: skip


def body_limit(config: ServiceConfig, path: str, method: str) -> int:
    """The largest request body ``method path`` may send, checked from the request's head by the server's channel:
    a player's frames ``player_body_bytes``, a build upload's ``limits.build_bytes``, else ``limits.body_bytes``.
    (waitress's own ``max_request_body_size`` is the largest of them: this is what holds each path to its own.)"""
    if path in PLAYER_PATHS:
        return config.player_body_bytes
    if method == "PUT" and path.startswith("/v1/builds/"):
        return config.limits.build_bytes
    return config.limits.body_bytes


def require_scope(grant: Grant, endpoint: str) -> None:
    """403 ``insufficient_scope`` unless ``grant`` may call ``endpoint`` (``service.scopes.ENDPOINT_SCOPES``)."""
    scope = needed(endpoint)
    if not grant.allows(scope):
        raise ApiError(403, "insufficient_scope", f"this token ({grant.name}) lacks the scope {scope!r} that "
                       f"{endpoint} needs; it has: {', '.join(sorted(grant.scopes)) or 'none'}",
                       headers={"WWW-Authenticate": f'Bearer realm="unirender", error="insufficient_scope", '
                                                   f'scope="{scope}"'})


class ServiceApp:
    """The WSGI callable. ``start()`` starts background work (idle reaper); ``shutdown()`` drains and stops."""

    def __init__(self, config: ServiceConfig, *, backend=None, player_hub=None):
        self.config = config
        self.metrics = ServiceMetrics()
        self.slots = PlayerSlots(config.limits.total_players)
        # First the data root's lock and records (a second service on it stops here, before starting anything).
        self.data_root = DataRoot.open(config.data_root, holder=f"{config.host}:{config.port}")
        if backend is None:
            from unirender.cluster import create_backend

            try:
                backend = create_backend(config.backend, **config.backend_options)
            except (TypeError, ValueError) as exc:  # an option the backend lacks, or a bad value
                self.data_root.close()
                raise SpecError(f"invalid service config: backend_options for {config.backend!r}: {exc}") from exc
            except BaseException:
                self.data_root.close()
                raise
        self.backend = backend
        self.hub = player_hub
        self.sessions = SessionRegistry(
            backend,
            slots=self.slots,
            metrics=self.metrics,
            sessions_per_token=config.limits.sessions_per_token,
            steps_per_second=config.limits.steps_per_second,
            idle_timeout_s=config.idle_timeout_s,
            store=self.data_root.store,
            lost_retention_s=config.lost_session_retention_s,
        )
        self.jobs = JobManager(slots=self.slots, metrics=self.metrics, jobs_per_token=config.limits.jobs_per_token,
                               backend=backend,  # job players live where sessions do (local or Ray)
                               store=self.data_root.store, data_root=config.data_root,
                               retention_days=config.job_retention_days)
        self.session_videos = SessionVideos(config.data_root)  # recordings of sessions (docs/video.md)
        self.reaper = IdleReaper(self.sessions, config.reap_interval_s)
        self._grants = config.grants()
        self.policy = ActionPolicy(config)  # every limit on every action, whichever endpoint it came from
        if config.build_store is not None:
            # The service's store is the one its players launch from (Controller and MLAgentsController resolve
            # a pinned environment.build through the default store) and its jobs pin their datasets to.
            os.environ["UNIRENDER_BUILDS"] = str(config.build_store)
        if config.build_store_max_bytes is not None:  # its players' and jobs' stores are bounded alike
            os.environ["UNIRENDER_BUILDS_MAX_BYTES"] = str(config.build_store_max_bytes)
        self._draining = False
        self._in_flight = 0
        self._in_flight_cv = threading.Condition()
        self._started = False
        from unirender.service.ui import Console  # the web console under /ui/ (docs/console.md)

        self.console = Console(self)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> ServiceApp:
        if not self._started:
            self._started = True
            self.sessions.recover()  # sessions the previous service left live: listed as lost
            self.jobs.start()  # jobs it left queued or running: resumed
            self.reaper.start()
        return self

    @property
    def draining(self) -> bool:
        return self._draining

    def shutdown(self, timeout: float = 30.0) -> None:
        """Refuse new API requests, fail in-flight steps by stopping every player, wait for in-flight requests."""
        self._draining = True
        self.reaper.stop()
        self.jobs.cancel_all(wait=min(10.0, timeout))
        self.sessions.stop_all("the service is shutting down")
        deadline = time.monotonic() + timeout
        with self._in_flight_cv:
            while self._in_flight and time.monotonic() < deadline:
                self._in_flight_cv.wait(0.1)
        try:
            self.backend.close()
        except Exception:
            log.exception("closing the session backend")
        if self.hub is not None and hasattr(self.hub, "close"):
            try:
                self.hub.close()
            except Exception:
                log.exception("closing the player hub")
        self.data_root.close()  # last: stopping jobs and sessions writes their records

    # -- WSGI --------------------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path in PLAYER_PATHS:
            if self.hub is None:
                return ApiError(404, "not_found", "this service has no player hub").response()(
                    environ, start_response
                )
            return self.hub.wsgi_app(environ, start_response)
        if path == "/ui" or path.startswith("/ui/"):
            return self.console(environ, start_response)
        with self._in_flight_cv:
            self._in_flight += 1
        try:
            response = self._dispatch(Request(environ))
            return response(environ, start_response)
        finally:
            with self._in_flight_cv:
                self._in_flight -= 1
                self._in_flight_cv.notify_all()

    def _dispatch(self, request: Request) -> Response:
        adapter = URLS.bind_to_environ(request.environ)
        endpoint = "unmatched"
        try:
            endpoint, args = adapter.match()
            if self._draining and endpoint not in ("healthz", "metrics"):
                raise ApiError(503, "shutting_down", "the service is shutting down", headers={"Retry-After": "5"})
            owner = None if endpoint in PUBLIC else self._authenticate(request, endpoint)
            response = ENDPOINTS[endpoint](self, request, owner, **args)
        except ApiError as exc:
            response = exc.response()
        except HTTPException as exc:
            response = from_http_exception(exc).response()
        except http_format.UnsupportedMediaType as exc:
            response = ApiError(415, "unsupported_media_type", str(exc)).response()
        except http_format.WireError as exc:
            response = ApiError(400, "malformed_body", str(exc)).response()
        except Exception as exc:  # noqa: BLE001 - every error leaves as JSON, never a traceback page
            err = from_unirender_error(exc)
            if err.status >= 500:
                log.exception("%s %s failed", request.method, request.path)
            response = err.response()
        self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    # -- helpers -----------------------------------------------------------------------------------------
    def _authenticate(self, request: Request, endpoint: str) -> str:
        grant = self.token_grant(request.headers.get("Authorization", ""))
        require_scope(grant, endpoint)
        trust_connection(request.environ, self.config.client_idle_s)  # keep-alive now, not before
        return grant.name

    def token_owner(self, header: str) -> str:
        """The name of the client whose bearer token ``header`` carries (ANONYMOUS without auth); else 401."""
        return self.token_grant(header).name

    def token_grant(self, header: str) -> Grant:
        """Who ``header``'s bearer token is and what it may do (every scope without auth); else 401."""
        if not self.config.auth_enabled:
            return OPEN_GRANT
        scheme, _, token = header.partition(" ")
        if not header:
            raise ApiError(401, "missing_token", "send 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="unirender"'})
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "invalid_token", "the Authorization header must be 'Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="unirender"'})
        token = token.strip()
        found = None
        for known, grant in self._grants.items():  # constant-time compare against each configured token
            if hmac.compare_digest(known.encode(), token.encode()):
                found = grant
        if found is not None:
            return found
        # Player tokens (the hub's) are never in this table, so a player cannot use the client API.
        raise ApiError(401, "invalid_token", "unknown token",
                       headers={"WWW-Authenticate": 'Bearer realm="unirender", error="invalid_token"'})

    def authorize_body(self, path: str, length: int, headers: dict, method: str | None = None) -> tuple | None:
        """For the server's channel: a request body is received only if its head carries a valid token with the
        scope its endpoint needs (``headers`` as waitress parses them; ``method`` picks the endpoint). Returns
        ``(status, code, message, headers)`` to refuse it.
        The console's forms (login, actions) carry no bearer header: the console checks its cookie and CSRF token
        itself, so under ``/ui/`` only a body small enough for a form is let through unauthenticated."""
        if path.startswith("/ui/") and length <= CONSOLE_FORM_BYTES:
            return None
        try:
            grant = self.token_grant(headers.get("AUTHORIZATION", ""))
            if method is not None:
                try:
                    endpoint, _ = URLS.bind("localhost").match(path, method=method)
                except HTTPException:
                    endpoint = None  # 404/405: answered by the app, after the body, as JSON
                if endpoint is not None and endpoint not in PUBLIC:
                    require_scope(grant, endpoint)
        except ApiError as exc:
            return exc.status, exc.code, exc.message, tuple(exc.headers.items())
        return None

    # -- what the endpoints share -----------------------------------------------------------------------
    def read_body(self, request: Request) -> Any:
        """The request's body, decoded (JSON or msgpack) within ``limits.body_bytes`` (413 beyond) and checked
        (``policy.check_body``: finite numbers, bounded nesting and sizes)."""
        limit = self.config.limits.body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise ApiError(413, "body_too_large", f"request body of {request.content_length} bytes exceeds "
                           f"the limit of {limit} bytes")
        request.max_content_length = limit
        body = http_format.decode_request_body(request.headers.get("Content-Type"), request.get_data(cache=True))
        if isinstance(body, dict | list):
            check_body(body)
        return body


    @staticmethod
    def response_format(request: Request) -> str:
        """The response format ``Accept`` asks for (JSON by default); 406 when none fits."""
        fmt = http_format.negotiate(request.headers.get("Accept"))
        if fmt is None:
            raise ApiError(406, "not_acceptable", f"Accept one of {', '.join(http_format.FORMATS)}")
        return fmt

    @staticmethod
    def json_as_sent(request: Request) -> bool:
        """The client takes a WSGI player's metadata as the JSON it sent (``metadata_json``)."""
        return request.headers.get(http_format.METADATA_HEADER, "").strip().lower() == http_format.METADATA_AS_SENT

    @staticmethod
    def batched_body(request: Request) -> bool:
        """The client asks for the batched ML-Agents body (``Unirender-Body: batched``, docs/service.md)."""
        return request.headers.get(http_format.BODY_HEADER, "").strip().lower() == http_format.BATCHED

    def json_response(self, doc: Any, status: int = 200) -> Response:
        body = json.dumps(doc, default=http_format.json_default)
        self.metrics.bytes_out.labels("json").inc(len(body))
        return Response(body, status=status, mimetype="application/json")

    def encoded_response(self, doc: dict, fmt: str, environ: dict | None = None) -> documents.EncodedResponse:
        """``doc`` encoded as ``fmt`` (``documents.encoded_body``: gathered pieces for the service's own channel,
        which ``environ`` names), counted in the bytes-out metric."""
        resp = documents.encoded_body(doc, fmt, environ)
        self.metrics.bytes_out.labels(fmt.split("/")[-1]).inc(int(resp.headers["Content-Length"]))
        return resp

    def step_session(self, owner: str, session_id: str, data: Any):
        """One step of a session as ``POST /v1/sessions/{id}/step`` takes it (its family checks the body), the
        family's event: for the console, which drives sessions of every family."""
        from unirender.service.one_shot import STARTING

        entry = self.sessions.get(owner, session_id)
        return (entry.adapter or STARTING).step(self, owner, session_id, data)

    # -- introspection for tests and the server ----------------------------------------------------------
    def owner_data_dir(self, owner: str):
        return owner_dir(self.config.data_root, owner)


def make_player_hub(host: str, port: int, config: ServiceConfig):
    """A PlayerHub mounted in the app, telling players to connect to ``host:port`` (an IP literal)."""
    try:
        from unirender.transport import PlayerHub
    except ImportError:  # pragma: no cover - the transport part is missing
        log.warning("unirender.transport is not available: WSGI sessions are refused")
        return None
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"  # players run on this host; Unity needs an IPv4 literal
    return PlayerHub(address=(host, int(port)), max_players=config.limits.total_players,
                     connection_policy=config.connection_policy)


def create_app(config: ServiceConfig | None = None, *, backend=None, player_hub=None, start: bool = True):
    """The service as a WSGI app.

    ``player_hub``: the ``unirender.transport.PlayerHub`` mounted at /train. Default: one that tells players to
    connect to ``config.host:config.port`` (right when a WSGI server such as gunicorn binds exactly there);
    ``False``: none yet (``unirender serve`` sets it once it knows its port). Without a hub, WSGI sessions are
    refused with 503.
    """
    from unirender.service.config import load_config

    config = config or load_config()
    if player_hub is None and config.port:
        player_hub = make_player_hub(config.host, config.port, config)
    app = ServiceApp(config, backend=backend, player_hub=player_hub or None)
    return app.start() if start else app
