"""The web console: server-rendered pages under ``/ui/`` over the service's own sessions and jobs.

Pages read the same registries as the API, under the same ownership (another token's session or job is a 404
here too); the page scripts are small files under ``static/`` (no inline script: the CSP forbids it).
"""

from __future__ import annotations

import json
import logging
import mimetypes
import threading
import time
import weakref
from importlib import resources
from urllib.parse import quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from unirender.service.errors import ApiError, from_http_exception, from_unirender_error
from unirender.service.jobs import FINAL, SUCCEEDED, Job
from unirender.service.scopes import CONSOLE_SCOPES, needed
from unirender.service.ui.auth import COOKIE, SECURITY_HEADERS, ConsoleAuth
from unirender.service.ui.families import DEFAULT_KEYS, UnknownView, console_family
from unirender.service.ui.images import encode_image
from unirender.service.ui.stream import DEFAULT_FPS, MAX_FPS, ViewerStream

log = logging.getLogger(__name__)

PREFIX = "/ui"
STATIC_FILES = {"console.css", "console.js", "session.js", "jobs.js"}

URLS = Map(
    [
        Rule("/ui/", endpoint="index", methods=["GET"]),
        Rule("/ui/login", endpoint="login", methods=["GET", "POST"]),
        Rule("/ui/logout", endpoint="logout", methods=["POST"]),
        Rule("/ui/status.json", endpoint="status", methods=["GET"]),
        Rule("/ui/sessions/<session_id>", endpoint="session", methods=["GET"]),
        Rule("/ui/sessions/<session_id>/stream", endpoint="stream", methods=["GET"]),
        Rule("/ui/sessions/<session_id>/status.json", endpoint="session_status", methods=["GET"]),
        Rule("/ui/sessions/<session_id>/action", endpoint="action", methods=["POST"]),
        Rule("/ui/sessions/<session_id>/video", endpoint="session_video", methods=["POST"]),
        Rule("/ui/sessions/<session_id>/video.mp4", endpoint="session_video_file", methods=["GET"]),
        Rule("/ui/jobs/<job_id>", endpoint="job", methods=["GET"]),
        Rule("/ui/jobs/<job_id>/cancel", endpoint="cancel_job", methods=["POST"]),
        Rule("/ui/jobs/<job_id>/resume", endpoint="resume_job", methods=["POST"]),
        Rule("/ui/jobs/<job_id>/contact_sheet.png", endpoint="contact_sheet", methods=["GET"]),
        Rule("/ui/jobs/<job_id>/frame", endpoint="dataset_frame", methods=["GET"]),
        Rule("/ui/jobs/<job_id>/video", endpoint="job_video", methods=["GET"]),
        Rule("/ui/static/<name>", endpoint="static", methods=["GET"]),
    ],
    strict_slashes=False,
)
PUBLIC = {"login", "static"}
JSON_ENDPOINTS = {"status", "session_status", "action", "stream", "contact_sheet", "dataset_frame", "session_video",
                  "session_video_file", "job_video"}


def job_figures(job: Job, now: float | None = None) -> dict:
    """What the jobs list shows: done/total frames, percent, frames/s since start, ETA (None when unknown)."""
    info = job.describe()
    progress = info["progress"]
    done, total = int(progress.get("frames_done") or 0), int(progress.get("frames_total") or 0)
    end = job.finished_at or (now or time.time())
    elapsed = end - job.started_at if job.started_at else 0.0
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 and total > done and job.state not in FINAL else None
    percent = 100.0 if job.state == SUCCEEDED else (100.0 * done / total if total else 0.0)
    info.update(frames_done=done, frames_total=total, percent=round(min(100.0, percent), 1),
                frames_per_s=round(rate, 2), eta_s=None if eta is None else round(eta, 1),
                final=job.state in FINAL, resumable=job.state in ("cancelled", "failed"))
    return info


class Console:
    """The ``/ui/`` WSGI app; ``app`` is the ``ServiceApp`` whose sessions and jobs it shows."""

    def __init__(self, app, *, max_viewers: int | None = None):
        self.app = app
        self.auth = ConsoleAuth(app.config)
        # Each live view holds a server thread: at most half of them, so the API always has the other half.
        self.max_viewers = max_viewers or max(1, app.config.wsgi_threads // 2)
        self._viewers: dict[str, list[ViewerStream]] = {}
        # Session -> its Description; weak: gone with the session
        self._descriptions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._viewers_lock = threading.Lock()
        self.templates = Environment(loader=PackageLoader("unirender.service.ui", "templates"),
                                     autoescape=select_autoescape(default=True), trim_blocks=True,
                                     lstrip_blocks=True)

    # -- WSGI ---------------------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        request = Request(environ)
        request.max_content_length = self.app.config.limits.body_bytes  # forms too: 413 beyond the API's limit
        response = self._dispatch(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        response.headers.setdefault("Cache-Control", "no-store")
        return response(environ, start_response)

    def _dispatch(self, request: Request) -> Response:
        endpoint = "unmatched"
        try:
            self.auth.check_reachable(request)
            adapter = URLS.bind_to_environ(request.environ)
            if request.path == PREFIX:
                return redirect(PREFIX + "/", 308)
            endpoint, args = adapter.match()
            if self.app.draining:
                raise ApiError(503, "shutting_down", "the service is shutting down", headers={"Retry-After": "5"})
            owner = None
            if endpoint not in PUBLIC:
                grant = self.auth.grant(request)
                if grant is None:
                    if endpoint in JSON_ENDPOINTS:
                        raise ApiError(401, "missing_token", "log in at /ui/login first")
                    return redirect(f"{PREFIX}/login?next={quote(request.full_path.rstrip('?'), safe='/?=&')}")
                scope = needed(endpoint, CONSOLE_SCOPES)
                if not grant.allows(scope):
                    raise ApiError(403, "insufficient_scope", f"this token ({grant.name}) lacks the scope "
                                   f"{scope!r} that this page needs")
                owner = grant.name
            if request.method == "POST" and endpoint != "login":
                self.auth.check_csrf(request, self.auth.csrf_token(request))
            response = getattr(self, "ep_" + endpoint)(request, owner, **args)
        except ApiError as exc:
            response = self._error(request, endpoint, exc)
        except HTTPException as exc:
            response = self._error(request, endpoint, from_http_exception(exc))
        except Exception as exc:  # noqa: BLE001 - a page for people, never a traceback
            err = from_unirender_error(exc)
            if err.status >= 500:
                log.exception("%s %s failed", request.method, request.path)
            response = self._error(request, endpoint, err)
        self.app.metrics.requests.labels("ui_" + endpoint, str(response.status_code)).inc()
        return response

    def _error(self, request: Request, endpoint: str, err: ApiError) -> Response:
        if endpoint in JSON_ENDPOINTS or request.method == "POST" and request.is_json:
            return err.response()
        response = self._page(request, "error.html", None, status=err.status, error=err)
        for name, value in (err.headers or {}).items():
            response.headers[name] = value
        return response

    def _page(self, request: Request, template: str, owner: str | None, status: int = 200, **context) -> Response:
        context.setdefault("csrf", self.auth.csrf_token(request))
        html = self.templates.get_template(template).render(
            owner=owner, auth_enabled=self.app.config.auth_enabled, prefix=PREFIX, **context,
        )
        return Response(html, status=status, mimetype="text/html")

    @staticmethod
    def _json(doc, status: int = 200) -> Response:
        return Response(json.dumps(doc), status=status, mimetype="application/json")

    # -- login ----------------------------------------------------------------------------------------------
    def ep_login(self, request, owner):
        target = request.values.get("next") or PREFIX + "/"
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path.startswith(PREFIX + "/"):
            target = PREFIX + "/"  # only ever back into the console: no open redirect
        if not self.app.config.auth_enabled:
            return redirect(target, 303)
        if request.method == "GET":
            return self._page(request, "login.html", None, next=target, csrf=self.auth.login_csrf_token())
        self.auth.check_csrf(request, self.auth.login_csrf_token())
        token = request.form.get("token", "").strip()
        if self.auth.owner_of_token(token) is None:
            return self._page(request, "login.html", None, status=401, next=target,
                              csrf=self.auth.login_csrf_token(), failed=True)
        response = redirect(target, 303)
        self.auth.set_login(response, request, token)
        return response

    def ep_logout(self, request, owner):
        response = redirect(PREFIX + "/login", 303)
        self.auth.clear_login(response, request)
        return response

    # -- sessions and jobs lists ----------------------------------------------------------------------------
    def _status_doc(self, owner: str) -> dict:
        return {
            "now": time.time(),
            "sessions": [self._session_doc(e) for e in self.app.sessions.list(owner)],
            "jobs": [job_figures(j) for j in sorted(self.app.jobs.list(owner), key=lambda j: -j.created_at)],
        }

    def _session_doc(self, entry) -> dict:
        info = entry.describe()
        env = (entry.environment or {}).get("environment") or {}
        try:
            family = console_family(entry.session.family)
        except ApiError:  # a family without a console adapter (families.CONSOLE_FAMILIES): listed, not viewed
            info.update(width=env.get("width"), height=env.get("height"), transport=None, scene=None,
                        family=entry.session.family, viewers=[], frames_published=entry.frames.seq,
                        build=self._build_label(env))
            return info
        info.update(width=env.get("width"), height=env.get("height"), transport=family.transport(env),
                    scene=(entry.environment or {}).get("scene") or family.scene(entry.session.last_event),
                    family=family.family, viewers=self._viewer_docs(entry.id), frames_published=entry.frames.seq,
                    build=self._build_label(env))
        return info

    def _build_label(self, env: dict) -> str:
        """Which build a session runs: the store's names and digest (a pinned reference), or the executable."""
        digest = env.get("build")
        if not digest:
            return env.get("executable") or "builtin"
        names = self.app.policy.build_store.names_of(digest) if digest.startswith("sha256:") else []
        return f"{', '.join(names)} ({digest[:19]})" if names else digest

    def _description(self, entry):
        """The session's ``Description`` (its declared actions drive an ML-Agents page), asked once per session:
        on the Ray backend it is a call to the actor."""
        with self._viewers_lock:
            cached = self._descriptions.get(entry.session)
        if cached is None:
            cached = entry.session.describe()
            with self._viewers_lock:
                self._descriptions[entry.session] = cached
        return cached

    def ep_index(self, request, owner):
        return self._page(request, "index.html", owner, status_doc=self._status_doc(owner))

    def ep_status(self, request, owner):
        return self._json(self._status_doc(owner))

    # -- a session ------------------------------------------------------------------------------------------
    def ep_session(self, request, owner, session_id):
        entry = self.app.sessions.get(owner, session_id)
        family = console_family(entry.session.family)
        views = family.views(entry.session.last_event)
        controls = family.controls(self._description(entry), (entry.environment or {}).get("environment") or {})
        video = self.app.session_videos.get(entry.id)
        return self._page(request, "session.html", owner, s=self._session_doc(entry), views=views,
                          video=video.describe() if video is not None else None,
                          drive=family.template, controls=controls, controls_json=json.dumps(controls),
                          keys=json.dumps(DEFAULT_KEYS), key_rows=DEFAULT_KEYS.items())

    def ep_session_status(self, request, owner, session_id):
        return self._json({"now": time.time(), **self._session_doc(self.app.sessions.get(owner, session_id))})

    def ep_action(self, request, owner, session_id):
        body = self.app.read_body(request)
        entry = self.app.sessions.get(owner, session_id)
        family = console_family(entry.session.family)
        action, label = family.action(body, entry.session.last_event, self._description(entry))
        event = self.app.step_session(owner, session_id, action)  # every check and limit of the API's step
        return self._json({**family.result(event, label), "steps": entry.session.steps})

    def ep_session_video(self, request, owner, session_id):
        """The record button: ``{"record": true}`` starts recording the view shown (``view``), false stops it."""
        from unirender.service.session_video import VideoOptions

        body = self.app.read_body(request)
        entry = self.app.sessions.get(owner, session_id)
        video = self.app.session_videos.of(entry)
        if body.get("record") is True:
            view = body.get("view") if isinstance(body.get("view"), str) and body.get("view") else None
            doc = video.start(VideoOptions(view=view))
        elif body.get("record") is False:
            doc = video.stop()
        else:
            raise ApiError(400, "invalid_parameter", 'the body must be {"record": true} or {"record": false}')
        return self._json(doc)

    def ep_session_video_file(self, request, owner, session_id):
        from werkzeug.utils import send_file

        finished = self.app.session_videos.of(self.app.sessions.get(owner, session_id)).finished()
        return send_file(str(finished["path"]), request.environ, mimetype="video/mp4", conditional=True,
                         download_name=f"{session_id}.mp4", max_age=0)

    def ep_stream(self, request, owner, session_id):
        entry = self.app.sessions.get(owner, session_id)
        try:
            family = console_family(entry.session.family)
            view = family.check_view(request.args.get("view") or family.views(entry.session.last_event)[0][0])
        except UnknownView as exc:
            raise ApiError(400, "invalid_parameter", str(exc)) from None
        try:
            fps = float(request.args.get("fps", DEFAULT_FPS))
        except ValueError:
            raise ApiError(400, "invalid_parameter", f"fps must be a number (at most {MAX_FPS:g})") from None
        with self._viewers_lock:
            total = sum(len(v) for v in self._viewers.values())
            if total >= self.max_viewers:
                raise ApiError(429, "too_many_viewers", f"the service has {total} live views open (limit "
                               f"{self.max_viewers}: each holds a server thread)", headers={"Retry-After": "5"})
            if not entry.frames.attach_viewer():
                raise ApiError(429, "too_many_viewers", f"session {session_id} has its "
                               f"{entry.frames.max_viewers} live views already", headers={"Retry-After": "5"})
            stream = ViewerStream(entry.frames, view, request.environ, family=family,
                                  stopping=lambda: self.app.draining, on_close=self._viewer_closed(session_id),
                                  fps=fps)
            self._viewers.setdefault(session_id, []).append(stream)
        if entry.frames.event is None and entry.session.last_event is not None:
            entry.frames.publish(entry.session.last_event)
        return StreamResponse(stream)

    def _viewer_closed(self, session_id: str):
        def closed(stream: ViewerStream) -> None:
            stream.slot.detach_viewer()
            with self._viewers_lock:
                streams = self._viewers.get(session_id, [])
                if stream in streams:
                    streams.remove(stream)
                if not streams:
                    self._viewers.pop(session_id, None)
        return closed

    def _viewer_docs(self, session_id: str) -> list[dict]:
        with self._viewers_lock:
            return [s.describe() for s in self._viewers.get(session_id, [])]

    # -- jobs -------------------------------------------------------------------------------------------------
    def ep_job(self, request, owner, job_id):
        job = self.app.jobs.get(owner, job_id)
        browser = None
        if job.state == SUCCEEDED:
            browser = self._frame_browser(job, request)
        return self._page(request, "job.html", owner, job=job_figures(job), browser=browser)

    def _frame_browser(self, job: Job, request: Request) -> dict | None:
        from unirender.jobs.dataset import load_dataset

        try:
            with load_dataset(job.output_dir) as dataset:
                records = dataset.records
        except Exception as exc:  # noqa: BLE001 - a dataset that cannot be read is shown as such
            return {"error": str(exc)}
        units = list(dict.fromkeys(r.get("unit", "") for r in records))
        unit = request.args.get("unit") if request.args.get("unit") in units else (units[0] if units else "")
        frames = [r for r in records if r.get("unit", "") == unit]
        try:
            index = min(max(0, int(request.args.get("index", 0))), max(0, len(frames) - 1))
        except ValueError:
            index = 0
        keys = sorted(frames[index]["files"]) if frames else []
        key = request.args.get("key") if request.args.get("key") in keys else (keys[0] if keys else "")
        return {"units": units, "unit": unit, "count": len(frames), "index": index, "modalities": keys, "key": key,
                "video": _episode_video(job, unit)}

    def ep_cancel_job(self, request, owner, job_id):
        self.app.jobs.cancel(owner, job_id)
        return redirect(f"{PREFIX}/jobs/{job_id}", 303)

    def ep_resume_job(self, request, owner, job_id):
        """Run a cancelled or failed job again into the same directory: finished episodes are kept."""
        job = self.app.jobs.get(owner, job_id)
        if job.state not in ("cancelled", "failed"):
            raise ApiError(409, "job_not_resumable", f"job {job_id} is {job.state}; only a cancelled or failed "
                           "job can be resumed")
        new = self.app.jobs.submit(owner, job.spec, job.output_dir, job.workers)
        return redirect(f"{PREFIX}/jobs/{new.id}", 303)

    def ep_contact_sheet(self, request, owner, job_id):
        from unirender.jobs.demo import contact_sheet_for
        from unirender.jobs.state import CONTACT_SHEET

        job = self.app.jobs.get(owner, job_id)
        if job.state != SUCCEEDED:
            raise ApiError(409, "manifest_not_ready", f"job {job_id} is {job.state}: no contact sheet yet")
        path = job.output_dir / CONTACT_SHEET
        if not path.is_file():
            path = contact_sheet_for(job.output_dir)
        return Response(path.read_bytes(), mimetype="image/png", headers={"Cache-Control": "private, max-age=60"})

    def ep_dataset_frame(self, request, owner, job_id):
        from unirender.jobs.dataset import load_dataset

        job = self.app.jobs.get(owner, job_id)
        if job.state != SUCCEEDED:
            raise ApiError(409, "manifest_not_ready", f"job {job_id} is {job.state}: no dataset yet")
        unit, key = request.args.get("unit", ""), request.args.get("key", "")
        try:
            index = int(request.args.get("index", 0))
        except ValueError:
            raise ApiError(400, "invalid_parameter", "index must be an integer") from None
        with load_dataset(job.output_dir) as dataset:
            positions = [i for i, r in enumerate(dataset.records) if r.get("unit", "") == unit]
            if not 0 <= index < len(positions):
                raise ApiError(404, "not_found", f"episode {unit!r} has no frame {index}")
            frames = dataset.images(positions[index])
        if key not in frames:
            raise ApiError(404, "not_found", f"frame {index} has no {key!r}; it has {sorted(frames)}")
        mime, data = encode_image(key, frames[key], lossless=True)  # a dataset is inspected pixel by pixel
        return Response(data, mimetype=mime, headers={"Cache-Control": "private, max-age=60"})

    def ep_job_video(self, request, owner, job_id):
        """One of the videos the job's manifest lists (``file``), as ``video/mp4`` with Range requests answered;
        nothing else of the job's folder."""
        from werkzeug.utils import send_file

        job = self.app.jobs.get(owner, job_id)
        if job.state != SUCCEEDED:
            raise ApiError(409, "manifest_not_ready", f"job {job_id} is {job.state}: no videos yet")
        wanted = request.args.get("file", "")
        listed = {v["file"] for v in _job_videos(job)}
        if wanted not in listed:
            raise ApiError(404, "not_found", f"the job lists no video {wanted!r}")
        return send_file(str(job.output_dir / wanted), request.environ, mimetype="video/mp4", conditional=True,
                         max_age=60)

    # -- static files ---------------------------------------------------------------------------------------
    def ep_static(self, request, owner, name):
        if name not in STATIC_FILES:
            raise ApiError(404, "not_found", f"no static file {name!r}")
        data = resources.files("unirender.service.ui").joinpath("static", name).read_bytes()
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response(data, mimetype=mime, headers={"Cache-Control": "public, max-age=300"})


def _job_videos(job: Job) -> list[dict]:
    try:
        manifest = json.loads((job.output_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [v for v in manifest.get("videos") or [] if isinstance(v, dict) and isinstance(v.get("file"), str)]


def _episode_video(job: Job, unit: str) -> dict | None:
    """The video the job page plays for an episode: its tiled one, else the agent's colour, else the first."""
    videos = [v for v in _job_videos(job) if v.get("unit") == unit]
    if not videos:
        return None
    return min(videos, key=lambda v: (not v.get("tiled"), (v.get("camera"), v.get("modality")) != ("agent", "rgb"),
                                      v["file"]))


class StreamResponse:
    """A bare WSGI response around a ``ViewerStream`` (werkzeug's Response would wrap and buffer nothing, but
    it would hide the stream's ``close()`` behind its own iterator)."""

    status_code = 200

    def __init__(self, stream: ViewerStream):
        self.stream = stream
        self.headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                        "X-Accel-Buffering": "no"}  # a proxy in front must not buffer the stream

    def __call__(self, environ, start_response):
        start_response("200 OK", list(self.headers.items()))
        return self.stream


__all__ = ["COOKIE", "Console", "DEFAULT_KEYS", "PREFIX"]
