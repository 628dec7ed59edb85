"""The AI2-THOR family of the service (``service.families``): sessions of AI2-THOR builds (FIFO or WSGI
players), one-shot renders and jobs.

- create: ``{"environment": EnvironmentSpec, "render": RenderSpec, "scene", "auto_restart"}`` (the render
  section's cameras are added right after the start; they vanish on a reset, docs/service.md says so);
- step: an action object, ``{"action": "RotateRight", "degrees": 90}``, checked by ``ActionPolicy.check_action``;
- reset: ``{"scene": ..., **Initialize parameters}`` (``Controller.reset``);
- the event: ``service.documents.ai2thor_document``;
- render: ``{"environment", "render", "episode": EpisodeSpec}``, driven by the jobs runner's episode driver
  (``jobs.episodes.run_unit``): the same frames as a job's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unirender.service import documents
from unirender.service.errors import ApiError
from unirender.service.models import RenderRequest, ResetBody, SessionCreate, validate_body
from unirender.service.one_shot import RenderDocuments, check_frame_count, one_shot_session
from unirender.service.policy import PlayerState
from unirender.simulator import AI2THOR
from unirender.spec import JobSpec

if TYPE_CHECKING:
    from unirender.service.app import ServiceApp


def controller_kwargs(app: ServiceApp, env, render, scene: str | None, auto_restart: bool = False) -> dict:
    """What the session backend starts an AI2-THOR player with (log under the data root, restarts only when the
    session asked for them, a WSGI player on this service's hub where the player runs in this process)."""
    kwargs = env.controller_kwargs(render)
    kwargs["log_dir"] = str(app.config.data_root / "player-logs")
    # The Controller restarts a crashed player (and raises RestartError) only if the session asked for it.
    kwargs["max_restarts"] = max(1, env.max_restarts) if auto_restart else 0
    if scene:
        kwargs["scene"] = scene
    if env.transport == "wsgi" and getattr(app.backend, "name", "local") != "local":
        # A player in a Ray actor (maybe on another node) cannot reach this process's hub, and the hub
        # cannot travel to the actor: its Controller serves the player on a port of its own there.
        return kwargs
    if env.transport == "wsgi":
        if app.hub is None:
            raise ApiError(503, "transport_unavailable", "this service cannot serve WSGI players")
        kwargs["player_hub"] = app.hub
    return kwargs


class AI2THORSession:
    """The AI2-THOR view of a session: stateless (what a step may do depends on the session's last event only),
    so one object (:data:`SESSION`) serves every AI2-THOR session."""

    @staticmethod
    def check_step(app: ServiceApp, owner: str, session_id: str, action: Any) -> None:
        """Every limit on one action sent to a session (the API's step and the console's keys alike)."""
        if not isinstance(action, dict) or not isinstance(action.get("action"), str) or not action["action"]:
            raise ApiError(400, "invalid_action", "the body must be an action object with an 'action' name, "
                           'e.g. {"action": "RotateRight", "degrees": 90}')
        state = PlayerState()  # only cameras depend on the session; other bad actions are 422 whatever it is
        if action["action"] == "AddThirdPartyCamera":
            state = app.policy.session_state(app.sessions.get(owner, session_id).session)
        app.policy.check_action(action, state)

    def step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        return self.begin_step(app, owner, session_id, data)()

    def begin_step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        """:meth:`step` in two halves (``SessionRegistry.begin_step``): checked and sent now, the function
        returned gives the event."""
        self.check_step(app, owner, session_id, data)
        return app.sessions.begin_step(owner, session_id, data)

    def reset(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        body = validate_body(ResetBody, data).model_dump()
        scene = body.pop("scene", None)
        app.policy.check_scene(scene, "scene")
        return app.sessions.reset(owner, session_id, scene, body)

    @staticmethod
    def document(entry: Any, event: Any, modalities: list[str] | None, fmt: str, json_as_sent: bool,
                 batched: bool = False) -> dict:  # AI2-THOR has no batched body: its events are one agent's
        return documents.ai2thor_document(event, modalities, fmt, json_as_sent)


class AI2THORFamily:
    name = AI2THOR
    session_body = SessionCreate
    step_body = "Action"  # any action object: openapi.ACTION
    reset_body = ResetBody
    render_body = RenderRequest
    job_body = JobSpec

    def create_session(self, app: ServiceApp, owner: str, data: Any):
        body = validate_body(SessionCreate, data)
        app.policy.check_environment(body.environment, body.render)
        app.policy.check_scene(body.scene, "scene")
        kwargs = controller_kwargs(app, body.environment, body.render, body.scene, body.auto_restart)

        def adapt(entry: Any) -> AI2THORSession:
            entry.adapter = SESSION  # already, while its cameras are added
            for camera in body.render.cameras:  # cameras vanish on reset; docs/service.md says so
                entry.session.step(camera.add_action())
            return SESSION

        return app.sessions.create(owner, kwargs, body.model_dump(mode="json"), auto_restart=body.auto_restart,
                                   adapt=adapt, failure="its cameras could not be added")  # fmt: skip

    def render(self, app: ServiceApp, owner: str, data: Any, fmt: str, json_as_sent: bool) -> list[dict]:
        from unirender.jobs.episodes import expand_units, frames_to_record, run_unit

        body = validate_body(RenderRequest, data)
        episode = body.episode
        known = episode.known_frame_count
        check_frame_count(known * episode.repeat if known is not None else None)
        job = JobSpec(environment=body.environment, render=body.render, episodes=[episode])
        app.policy.check_job(job)  # before any player starts
        kwargs = controller_kwargs(app, body.environment, body.render, episode.scene)
        docs = RenderDocuments()
        with one_shot_session(app, owner, kwargs, body.model_dump(mode="json")) as session:
            for unit in expand_units(job):  # the jobs runner's episode driver: same frames as a job
                for event in run_unit(session, unit, body.render):
                    docs.add({**documents.metadata_entries(event, fmt, json_as_sent),
                              "frames": frames_to_record(event, body.render)})
        return docs

    def job_spec(self, app: ServiceApp, data: Any):
        from unirender.spec import load_spec

        validate_body(JobSpec, data)  # strict types, bounded errors; load_spec then applies the loader's rules
        spec = load_spec(data)
        app.policy.check_job(spec)  # before any player starts
        return spec


SESSION = AI2THORSession()
FAMILY = AI2THORFamily()
