"""The WebGL family of the service (``service.families``): ``environment.protocol: webgl``, a Unity WebGL build
folder booted in headless Chromium. Same auth, registry (owners, limits, idle reaping, crash handling) and error
bodies as the other families; only the bodies differ:

- create: ``{"environment": {"protocol": "webgl", ...}, "auto_restart": false}`` (the environment as in a job
  spec, ``spec.webgl.WebGLEnvironmentSpec``: its build an allowed executable folder or an allowed build);
- step: ``{"action": "<declared name>"}`` (``noop`` when left out): only the actions the environment declared,
  checked against the session's ``describe()`` (a 422 naming the declared ones otherwise). Raw input (a key or a
  ``SendMessage`` the environment did not declare) is not taken from the API: the declaration is the policy;
- reset: ``{}`` (the ``reset_message``, or a reload of the page);
- the event: :func:`webgl_document`, exactly a dataset frame's record (``jobs.webgl_episodes.frame_of``):
  ``{"metadata": {"step", "action", "messages", "reward", "done", "emitted"}, "frames": {"rgb": (H, W, 3)}}``.
  JSON carries the frame only when ``?modalities=rgb`` asks;
- render: ``{"environment", "record", "episode": WebGLEpisodeSpec}``: each repeat on a freshly booted page, driven
  by the jobs' episode driver (``jobs.webgl_episodes.run_webgl_frames``): the same frames as a job's;
- jobs: a ``WebGLJobSpec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from unirender.jobs.webgl_episodes import FRAME_KEY, frame_of
from unirender.service.errors import ApiError
from unirender.service.models import StrictBody, validate_body
from unirender.service.one_shot import (
    OneShotSimulator,
    RenderDocuments,
    check_frame_count,
    session_controller_kwargs,
)
from unirender.simulator import WEBGL
from unirender.spec.webgl import NOOP, WebGLEnvironmentSpec, WebGLEpisodeSpec, WebGLJobSpec, WebGLRecordSpec

if TYPE_CHECKING:
    from unirender.service.app import ServiceApp


def webgl_document(event: Any, step: int, modalities: list[str] | None = None) -> dict:
    """A WebGLEvent -> ``{"metadata": {"step", "action", "messages", "reward", "done", "emitted"}, "frames":
    {"rgb": frame}}`` (a dataset frame's record); ``modalities``: ``["rgb"]`` (or ``["frame"]``) or ``[]``."""
    action = event.action if isinstance(event.action, str) else None
    frame = frame_of(step, action, event)
    frames = frame.frames()
    if modalities is not None:
        for name in modalities:
            if name not in (FRAME_KEY, "frame"):
                raise ApiError(400, "unknown_modality", f"{name!r} is not in this event; a WebGL event has "
                               f"{FRAME_KEY!r} (the canvas)")
        frames = frames if modalities else {}
    return {"metadata": frame.metadata, "frames": frames}


class WebGLSessionCreate(StrictBody):
    """POST /v1/sessions for a Unity WebGL build."""

    environment: WebGLEnvironmentSpec
    auto_restart: bool = Field(False, description="reboot the build if its browser crashes (the episode is lost)")


class WebGLStep(StrictBody):
    """POST /v1/sessions/{id}/step on a WebGL session: one declared action, then the step's frames."""

    action: str = Field(NOOP, min_length=1, max_length=200, description="a declared action's name ('noop': none)")


class WebGLReset(StrictBody):
    """POST /v1/sessions/{id}/reset on a WebGL session: the environment's reset_message, or a page reload."""


class WebGLRenderRequest(StrictBody):
    """POST /v1/render for a WebGL build: one episode (the frame after boot, then one per listed action; each
    repeat on a freshly booted page), every frame in the response."""

    environment: WebGLEnvironmentSpec
    record: WebGLRecordSpec = Field(default_factory=WebGLRecordSpec)
    episode: WebGLEpisodeSpec


def check_declared(name: str, declared: tuple[str, ...] | list[str], path: str = "action") -> None:
    if name not in declared:
        from unirender.spec.errors import did_you_mean

        guess = did_you_mean(name, list(declared))
        hint = f"did you mean {guess!r}? " if guess else ""
        raise ApiError(422, "unknown_action", f"{path}: {name!r} is not a declared action; {hint}declared: "
                       f"{', '.join(declared)}", path=path)


class WebGLSession:
    """The WebGL view of one session: its declared action names (``Session.describe()``, read once)."""

    def __init__(self, description):
        self.declared = tuple(description.actions.names)

    def step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        return self.begin_step(app, owner, session_id, data)()

    def begin_step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        if not isinstance(data, dict):
            raise ApiError(400, "invalid_action", 'the body must be {"action": "<a declared action>"}')
        body = validate_body(WebGLStep, data)
        check_declared(body.action, self.declared)
        return app.sessions.begin_step(owner, session_id, body.action)

    def reset(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        validate_body(WebGLReset, data if data is not None else {})
        return app.sessions.reset(owner, session_id, None, {})

    @staticmethod
    def document(entry: Any, event: Any, modalities: list[str] | None, fmt: str, json_as_sent: bool,
                 batched: bool = False) -> dict:  # one canvas a step: WebGL has no batched body (the header is ignored)
        return webgl_document(event, entry.session.steps, modalities)


def _check_environment(app: ServiceApp, env: WebGLEnvironmentSpec) -> None:
    """An allowed build (the folder in ``allowed_executables``, or an allowed or uploaded build reference, then
    pinned to its digest: ``ActionPolicy.check_game`` as for every family) within the pixel limit."""
    app.policy.check_game(env)


class WebGLFamily:
    name = WEBGL
    session_body = WebGLSessionCreate
    step_body = WebGLStep
    reset_body = WebGLReset
    render_body = WebGLRenderRequest
    job_body = WebGLJobSpec

    def create_session(self, app: ServiceApp, owner: str, data: Any):
        body = validate_body(WebGLSessionCreate, data)
        _check_environment(app, body.environment)
        kwargs = session_controller_kwargs(app, body.environment, WEBGL, body.auto_restart)
        return app.sessions.create(owner, kwargs, body.model_dump(mode="json"), auto_restart=body.auto_restart,
                                   adapt=lambda entry: WebGLSession(entry.session.describe()),
                                   failure="it could not describe its actions")

    def render(self, app: ServiceApp, owner: str, data: Any, fmt: str, json_as_sent: bool) -> list[dict]:
        from unirender.jobs.webgl_episodes import WebGLSeat, expand_webgl_units, run_webgl_frames

        body = validate_body(WebGLRenderRequest, data)
        check_frame_count(body.episode.known_frame_count * body.episode.repeat)
        declared = body.environment.action_names
        for j, name in enumerate(body.episode.actions):
            check_declared(name, declared, f"episode.actions.{j}")
        _check_environment(app, body.environment)  # before any page boots
        spec = WebGLJobSpec(environment=body.environment, record=body.record, episodes=[body.episode])
        request_doc = body.model_dump(mode="json")
        kwargs = session_controller_kwargs(app, body.environment, WEBGL, auto_restart=False)
        docs = RenderDocuments()
        for unit in expand_webgl_units(spec):  # each repeat on a freshly booted page, as a job's
            seat = WebGLSeat(lambda k: OneShotSimulator(app, owner, k, request_doc, WEBGL), kwargs)
            try:
                for _index, frame in run_webgl_frames(seat, unit, spec):
                    docs.add({"metadata": frame.metadata, "frames": frame.frames()})
            finally:
                seat.stop()
        return docs

    def job_spec(self, app: ServiceApp, data: Any):
        """Validated as the loader does (strict types first, the episodes' actions declared), its build checked."""
        from unirender.spec import load_spec

        validate_body(WebGLJobSpec, data)
        spec = load_spec(data)
        _check_environment(app, spec.environment)
        return spec


FAMILY = WebGLFamily()

__all__ = ["FAMILY", "WebGLFamily", "WebGLRenderRequest", "WebGLReset", "WebGLSession", "WebGLSessionCreate",
           "WebGLStep", "check_declared", "webgl_document"]
