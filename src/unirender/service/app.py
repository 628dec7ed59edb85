"""The render service as one WSGI application: ``/v1/*`` for clients, ``/train`` + ``/ping`` for players.

``create_app(config)`` builds it; any WSGI server can run it, as long as it is ONE process (sessions and the
players' long polls live in its memory) with a thread pool (see docs/service.md and ``server.py``).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from unirender.errors import SpecError
from unirender.service import http_format, mlagents_sessions
from unirender.service.config import ANONYMOUS, ServiceConfig
from unirender.service.errors import ApiError, from_http_exception, from_unirender_error
from unirender.service.gathered_body import GatheredBody, takes_gathered_body
from unirender.service.jobs import JobManager
from unirender.service.limits import PlayerSlots
from unirender.service.metrics import ServiceMetrics
from unirender.service.models import RenderRequest, ResetBody, SessionCreate, validate_body
from unirender.service.paths import owner_dir, resolve_output_dir
from unirender.service.policy import ActionPolicy, PlayerState, check_body
from unirender.service.sessions import IdleReaper, SessionRegistry
from unirender.spec import JobSpec
from unirender.transport.serving import trust_connection

log = logging.getLogger(__name__)

# Frames one /v1/render may return: bigger renders are jobs.
MAX_RENDER_FRAMES = 256
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
        Rule("/v1/sessions", endpoint="list_sessions", methods=["GET"]),
        Rule("/v1/sessions", endpoint="create_session", methods=["POST"]),
        Rule("/v1/sessions/<session_id>", endpoint="get_session", methods=["GET"]),
        Rule("/v1/sessions/<session_id>", endpoint="delete_session", methods=["DELETE"]),
        Rule("/v1/sessions/<session_id>/step", endpoint="step", methods=["POST"]),
        Rule("/v1/sessions/<session_id>/reset", endpoint="reset", methods=["POST"]),
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


# Spec modality names -> the Event's frame attributes (agent, then third-party cameras).
MODALITY_FRAMES = {
    "rgb": ("frame", "third_party_camera_frames"),
    "depth": ("depth_frame", "third_party_depth_frames"),
    "instance_segmentation": ("instance_segmentation_frame", "third_party_instance_segmentation_frames"),
    "semantic_segmentation": ("semantic_segmentation_frame", "third_party_semantic_segmentation_frames"),
    "normals": ("normals_frame", "third_party_normals_frames"),
    "flow": ("flow_frame", "third_party_flow_frames"),
}


def _parse_modalities(request: Request) -> list[str] | None:
    """``?modalities=rgb,depth_frame`` -> frame names; ``none`` -> []; absent -> None (the format's default).

    Spec modality names (``rgb``, ``depth``, ...) select the agent's and the cameras' frames; Event attribute
    names (``frame``, ``third_party_depth_frames``, ...) select exactly one.
    """
    raw = request.args.get("modalities")
    if raw is None:
        return None
    names = [m.strip() for m in raw.split(",") if m.strip()]
    return [] if names == ["none"] else names


def _select_frames(frames: dict, wanted: list[str]) -> dict:
    selected = {}
    for name in wanted:
        if name in MODALITY_FRAMES:
            selected.update({f: frames[f] for f in MODALITY_FRAMES[name] if f in frames})
        elif name in frames:
            selected[name] = frames[name]
        else:
            raise ApiError(400, "unknown_modality",
                           f"{name!r} is not in this event; it has {sorted(frames)} (or use "
                           f"{sorted(MODALITY_FRAMES)})")
    return selected


def wire_metadata(event: Any, fmt: str | None, json_as_sent: bool = False) -> dict:
    """An event's metadata for a response in ``fmt``, as document entries. msgpack: as the player sent it, never
    decoded here just to be re-packed: a FIFO player's msgpack bytes forwarded; a WSGI player's JSON forwarded as
    ``metadata_json`` (``Event.metadata_json_document``: for a one-agent scene the player's document itself) if the
    client sent ``Unirender-Metadata: as-sent`` (``json_as_sent``), else converted once
    (``Event.metadata_msgpack``); with either, ``step``: the step keys read from it here, so that the client need
    not scan it again. Otherwise (or where the event has no raw form) the decoded dict as ``metadata``."""
    if fmt == http_format.MSGPACK and hasattr(event, "metadata_msgpack"):
        text = event.metadata_json_document() if json_as_sent else None
        if text is not None:
            return {http_format.METADATA_JSON: text, http_format.STEP: event.step_keys()}
        packed = event.metadata_msgpack()
        if packed is not None:
            return {"metadata": http_format.PackedMsgpack(packed), http_format.STEP: event.step_keys()}
    return {"metadata": event.metadata}


def event_document(event: Any, modalities: list[str] | None, fmt: str | None = None,
                   json_as_sent: bool = False) -> dict:
    """An Event -> {"metadata" or "metadata_json", "step" where forwarded as sent, "frames"}; ``modalities`` None
    means every decoded modality."""
    frames = event.frames()
    if modalities is not None:
        frames = _select_frames(frames, modalities)
    return {**wire_metadata(event, fmt, json_as_sent), "frames": frames}


class EncodedResponse:
    """A 200 with an encoded body, as a bare WSGI response: werkzeug's Response costs ~0.2 ms per frame-carrying
    response (header fix-ups, iterator wrapping) on the hot path of every step."""

    status_code = 200

    def __init__(self, body: bytes | list[bytes], content_type: str, size: int):
        self.body = [body] if isinstance(body, bytes) else body
        self.headers = {"Content-Type": content_type, "Content-Length": str(size)}

    def __call__(self, environ, start_response):
        start_response("200 OK", list(self.headers.items()))
        return self.body


class ServiceApp:
    """The WSGI callable. ``start()`` starts background work (idle reaper); ``shutdown()`` drains and stops."""

    def __init__(self, config: ServiceConfig, *, backend=None, player_hub=None):
        self.config = config
        self.metrics = ServiceMetrics()
        self.slots = PlayerSlots(config.limits.total_players)
        if backend is None:
            from unirender.cluster import create_backend

            try:
                backend = create_backend(config.backend, **config.backend_options)
            except (TypeError, ValueError) as exc:  # an option the backend lacks, or a bad value
                raise SpecError(f"invalid service config: backend_options for {config.backend!r}: {exc}") from exc
        self.backend = backend
        self.hub = player_hub
        self.sessions = SessionRegistry(
            backend,
            slots=self.slots,
            metrics=self.metrics,
            sessions_per_token=config.limits.sessions_per_token,
            steps_per_second=config.limits.steps_per_second,
            idle_timeout_s=config.idle_timeout_s,
        )
        self.jobs = JobManager(slots=self.slots, metrics=self.metrics, jobs_per_token=config.limits.jobs_per_token,
                               backend=backend)  # job players live where sessions do (local or Ray)
        self.reaper = IdleReaper(self.sessions, config.reap_interval_s)
        self._tokens = {token: name for name, token in config.tokens.items()}
        self.policy = ActionPolicy(config)  # every limit on every action, whichever endpoint it came from
        self._draining = False
        self._in_flight = 0
        self._in_flight_cv = threading.Condition()
        self._started = False
        self._openapi: bytes | None = None
        from unirender.service.ui import Console  # the web console under /ui/ (docs/console.md)

        self.console = Console(self)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> ServiceApp:
        if not self._started:
            self._started = True
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
            owner = None if endpoint in PUBLIC else self._authenticate(request)
            response = getattr(self, "ep_" + endpoint)(request, owner, **args)
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
    def _authenticate(self, request: Request) -> str:
        name = self.token_owner(request.headers.get("Authorization", ""))
        trust_connection(request.environ, self.config.client_idle_s)  # keep-alive now, not before
        return name

    def token_owner(self, header: str) -> str:
        """The name of the client whose bearer token ``header`` carries (ANONYMOUS without auth); else 401."""
        if not self.config.auth_enabled:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        if not header:
            raise ApiError(401, "missing_token", "send 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="unirender"'})
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "invalid_token", "the Authorization header must be 'Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="unirender"'})
        token = token.strip()
        for known, name in self._tokens.items():  # constant-time compare against each configured token
            if hmac.compare_digest(known.encode(), token.encode()):
                return name
        # Player tokens (the hub's) are never in this table, so a player cannot use the client API.
        raise ApiError(401, "invalid_token", "unknown token",
                       headers={"WWW-Authenticate": 'Bearer realm="unirender", error="invalid_token"'})

    def authorize_body(self, path: str, length: int, headers: dict) -> tuple | None:
        """For the server's channel: a request body is received only if its head carries a valid token
        (``headers`` as waitress parses them). Returns ``(status, code, message, headers)`` to refuse it.
        The console's forms (login, actions) carry no bearer header: the console checks its cookie and CSRF token
        itself, so under ``/ui/`` only a body small enough for a form is let through unauthenticated."""
        if path.startswith("/ui/") and length <= CONSOLE_FORM_BYTES:
            return None
        try:
            self.token_owner(headers.get("AUTHORIZATION", ""))
        except ApiError as exc:
            return exc.status, exc.code, exc.message, tuple(exc.headers.items())
        return None

    def _body(self, request: Request) -> dict:
        limit = self.config.limits.body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise ApiError(413, "body_too_large", f"request body of {request.content_length} bytes exceeds "
                           f"the limit of {limit} bytes")
        request.max_content_length = limit
        body = http_format.decode_request_body(request.headers.get("Content-Type"), request.get_data(cache=True))
        if isinstance(body, dict | list):
            check_body(body)
        return body

    def _format(self, request: Request) -> str:
        fmt = http_format.negotiate(request.headers.get("Accept"))
        if fmt is None:
            raise ApiError(406, "not_acceptable", f"Accept one of {', '.join(http_format.FORMATS)}")
        return fmt

    def _json(self, doc: Any, status: int = 200) -> Response:
        body = json.dumps(doc, default=http_format._json_default)
        self.metrics.bytes_out.labels("json").inc(len(body))
        return Response(body, status=status, mimetype="application/json")

    def _encoded(self, doc: dict, fmt: str, environ: dict | None = None) -> EncodedResponse:
        """``doc`` encoded; msgpack for a channel that sends buffers as they are (the service's own server,
        ``environ`` says) as a :class:`GatheredBody` of pieces, its frames never copied into a joined body."""
        if fmt == http_format.MSGPACK and environ is not None and takes_gathered_body(environ):
            content_type, body = http_format.MSGPACK, GatheredBody(http_format.msgpack_pieces(doc))
        else:
            content_type, body = http_format.encode_document(doc, fmt)
        size = len(body) if isinstance(body, bytes) else sum(len(c) for c in body)
        self.metrics.bytes_out.labels(fmt.split("/")[-1]).inc(size)
        return EncodedResponse(body, content_type, size)

    def _controller_kwargs(self, env, render, scene: str | None, auto_restart: bool = False) -> dict:
        kwargs = env.controller_kwargs(render)
        kwargs["log_dir"] = str(self.config.data_root / "player-logs")
        # The Controller restarts a crashed player (and raises RestartError) only if the session asked for it.
        kwargs["max_restarts"] = max(1, env.max_restarts) if auto_restart else 0
        if scene:
            kwargs["scene"] = scene
        if env.transport == "wsgi" and getattr(self.backend, "name", "local") != "local":
            # A player in a Ray actor (maybe on another node) cannot reach this process's hub, and the hub
            # cannot travel to the actor: its Controller serves the player on a port of its own there.
            return kwargs
        if env.transport == "wsgi":
            if self.hub is None:
                raise ApiError(503, "transport_unavailable", "this service cannot serve WSGI players")
            kwargs["player_hub"] = self.hub
        return kwargs

    # -- public endpoints --------------------------------------------------------------------------------
    def ep_root(self, request, owner):
        from unirender.service.openapi import root_page

        return Response(root_page(), mimetype="text/html")

    def ep_healthz(self, request, owner):
        return self._json({"status": "ok"})

    def ep_readyz(self, request, owner):
        if self._draining:
            raise ApiError(503, "shutting_down", "the service is shutting down")
        return self._json({"status": "ready", "sessions": self.sessions.count(),
                           "players": self.slots.used, "player_slots": self.slots.total})

    def ep_metrics(self, request, owner):
        return Response(self.metrics.render(), content_type=self.metrics.content_type)

    def ep_openapi(self, request, owner):
        if self._openapi is None:
            from unirender.service.openapi import openapi_document

            self._openapi = json.dumps(openapi_document(self.config)).encode()
        return Response(self._openapi, mimetype="application/json")

    def ep_docs(self, request, owner):
        from unirender.service.openapi import docs_page

        return Response(docs_page(), mimetype="text/html")

    # -- platforms ---------------------------------------------------------------------------------------
    def ep_platforms(self, request, owner):
        """``unirender doctor --no-start`` as JSON for ``?width=&height=`` (a client cannot make it start Xvfb)."""
        from unirender.platforms.doctor import build_report

        try:
            width = int(request.args.get("width", 300))
            height = int(request.args.get("height", 300))
        except ValueError:
            raise ApiError(400, "invalid_parameter", "width and height must be integers") from None
        if width < 1 or height < 1 or width * height > self.config.limits.pixels:
            raise ApiError(400, "invalid_parameter", f"width x height must be positive and at most "
                           f"{self.config.limits.pixels} pixels")
        report = build_report(width, height, None, start_xvfb=False)
        return self._json(report)

    # -- sessions ----------------------------------------------------------------------------------------
    def ep_list_sessions(self, request, owner):
        return self._json({"sessions": [s.describe() for s in self.sessions.list(owner)]})

    def ep_create_session(self, request, owner):
        data = self._body(request)
        if mlagents_sessions.is_mlagents_body(data):  # environment.protocol: mlagents
            return mlagents_sessions.create_session(self, owner, data)
        body = validate_body(SessionCreate, data)
        self.policy.check_environment(body.environment, body.render)
        self.policy.check_scene(body.scene, "scene")
        kwargs = self._controller_kwargs(body.environment, body.render, body.scene, body.auto_restart)
        entry = self.sessions.create(
            owner, kwargs, body.model_dump(mode="json"), auto_restart=body.auto_restart
        )
        try:
            for camera in body.render.cameras:  # cameras vanish on reset; docs/service.md says so
                entry.session.step(camera.add_action())
        except Exception:
            self.sessions.delete(owner, entry.id, "its cameras could not be added")
            raise
        resp = self._json(entry.describe(), status=201)
        resp.headers["Location"] = f"/v1/sessions/{entry.id}"
        return resp

    def ep_get_session(self, request, owner, session_id):
        return self._json(self.sessions.get(owner, session_id).describe())

    def ep_delete_session(self, request, owner, session_id):
        self.sessions.delete(owner, session_id)
        return Response(status=204)

    def ep_step(self, request, owner, session_id):
        fmt = self._format(request)
        modalities = _parse_modalities(request)
        action = self._body(request)
        entry = self._mlagents_entry(owner, session_id)
        if entry is not None:
            return mlagents_sessions.step(self, owner, entry, action, fmt, modalities)
        self.check_step(owner, session_id, action)
        started = time.perf_counter()
        event = self.sessions.step(owner, session_id, action)
        return self._event_response(request, event, fmt, modalities, time.perf_counter() - started)

    def check_step(self, owner: str, session_id: str, action) -> None:
        """Every limit on one action sent to a session (the API's step and the console's keys alike)."""
        if not isinstance(action, dict) or not isinstance(action.get("action"), str) or not action["action"]:
            raise ApiError(400, "invalid_action", "the body must be an action object with an 'action' name, "
                           'e.g. {"action": "RotateRight", "degrees": 90}')
        state = PlayerState()  # only cameras depend on the session; other bad actions are 422 whatever it is
        if action["action"] == "AddThirdPartyCamera":
            state = self.policy.session_state(self.sessions.get(owner, session_id).session)
        self.policy.check_action(action, state)

    def _mlagents_entry(self, owner: str, session_id: str):
        """The session if it holds an ML-Agents game, else None (a missing one fails later, as before)."""
        try:
            entry = self.sessions.get(owner, session_id)
        except ApiError:
            return None
        return entry if mlagents_sessions.is_mlagents_entry(entry) else None

    def ep_reset(self, request, owner, session_id):
        fmt = self._format(request)
        modalities = _parse_modalities(request)
        entry = self._mlagents_entry(owner, session_id)
        if entry is not None:
            return mlagents_sessions.reset(self, owner, entry, self._body(request), fmt, modalities)
        body = validate_body(ResetBody, self._body(request)).model_dump()
        scene = body.pop("scene", None)
        self.policy.check_scene(scene, "scene")
        event = self.sessions.reset(owner, session_id, scene, body)
        return self._event_response(request, event, fmt, modalities)

    @staticmethod
    def _json_as_sent(request: Request) -> bool:
        """The client takes a WSGI player's metadata as the JSON it sent (``metadata_json``)."""
        return request.headers.get(http_format.METADATA_HEADER, "").strip().lower() == http_format.METADATA_AS_SENT

    def _event_response(self, request: Request, event, fmt: str, modalities: list[str] | None,
                        step_s: float = 0.0) -> Response:
        if fmt == http_format.JSON and modalities is None:
            modalities = []  # JSON carries frames only on request (?modalities=rgb,...)
        started = time.perf_counter()
        resp = self._encoded(event_document(event, modalities, fmt, self._json_as_sent(request)), fmt,
                             request.environ)
        # Where the time went, for clients and benchmarks (W3C Server-Timing): player step, then encoding.
        resp.headers["Server-Timing"] = (
            f"step;dur={step_s * 1000:.3f}, encode;dur={(time.perf_counter() - started) * 1000:.3f}"
        )
        return resp

    # -- one-shot render ---------------------------------------------------------------------------------
    def ep_render(self, request, owner):
        from unirender.jobs.episodes import expand_units, frames_to_record, run_unit

        fmt = self._format(request)
        body = validate_body(RenderRequest, self._body(request))
        episode = body.episode
        known = episode.known_frame_count
        if known is not None and known * episode.repeat > MAX_RENDER_FRAMES:
            raise ApiError(422, "render_too_large", f"{known * episode.repeat} frames exceed the one-shot "
                           f"limit of {MAX_RENDER_FRAMES}; submit a job instead (POST /v1/jobs)")
        job = JobSpec(environment=body.environment, render=body.render, episodes=[episode])
        self.policy.check_job(job)  # before any player starts
        kwargs = self._controller_kwargs(body.environment, body.render, episode.scene)
        entry = self.sessions.create(owner, kwargs, body.model_dump(mode="json"), auto_restart=False)
        docs = []
        try:
            with self.sessions.hold(entry) as session:
                for unit in expand_units(job):  # the jobs runner's episode driver: same frames as a job
                    for event in run_unit(session, unit, body.render):
                        if len(docs) >= MAX_RENDER_FRAMES:
                            raise ApiError(422, "render_too_large", f"more than {MAX_RENDER_FRAMES} frames; "
                                           "submit a job instead (POST /v1/jobs)")
                        docs.append({**wire_metadata(event, fmt, self._json_as_sent(request)),
                                     "frames": frames_to_record(event, body.render)})
        finally:
            try:
                self.sessions.delete(owner, entry.id, "one-shot render finished")
            except ApiError:
                pass
        return self._encoded({"events": docs}, fmt)

    # -- jobs --------------------------------------------------------------------------------------------
    def ep_list_jobs(self, request, owner):
        return self._json({"jobs": [j.describe() for j in self.jobs.list(owner)]})

    def ep_submit_job(self, request, owner):
        from unirender.spec import load_spec

        data = self._body(request)
        if mlagents_sessions.is_mlagents_body(data):
            spec = mlagents_sessions.job_spec(self, data)
        else:
            validate_body(JobSpec, data)  # strict types, bounded errors; load_spec then applies the loader's rules
            spec = load_spec(data)
            self.policy.check_job(spec)  # before any player starts
        out = resolve_output_dir(self.config.data_root, owner, spec.output.directory)
        workers = spec.workers if isinstance(spec.workers, int) else 1
        if workers > self.slots.total:
            raise ApiError(422, "too_many_workers", f"workers={workers} exceeds the {self.slots.total} player "
                           "slots of this service", path="workers")
        job = self.jobs.submit(owner, spec, out, workers)
        resp = self._json(job.describe(), status=202)
        resp.headers["Location"] = f"/v1/jobs/{job.id}"
        return resp

    def ep_get_job(self, request, owner, job_id):
        return self._json(self.jobs.get(owner, job_id).describe())

    def ep_cancel_job(self, request, owner, job_id):
        return self._json(self.jobs.cancel(owner, job_id).describe(), status=202)

    def ep_job_manifest(self, request, owner, job_id):
        return self._json(self.jobs.manifest(owner, job_id))

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
