"""``POST /v1/render`` for every family: a temporary session (launch, the episode's actions, the frames, stop),
all frames in the response. Bigger renders are jobs (``POST /v1/jobs``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from unirender.service.errors import ApiError

if TYPE_CHECKING:
    from unirender.service.app import ServiceApp

# Frames one /v1/render may return: bigger renders are jobs.
MAX_RENDER_FRAMES = 256


def check_frame_count(frames: int | None) -> None:
    """Refuse, before any player starts, a render whose frame count is known to exceed the one-shot limit."""
    if frames is not None and frames > MAX_RENDER_FRAMES:
        raise ApiError(422, "render_too_large", f"{frames} frames exceed the one-shot limit of {MAX_RENDER_FRAMES}; "
                       "submit a job instead (POST /v1/jobs)")


class RenderDocuments(list):
    """The event documents of one render; :meth:`add` refuses the one past the limit (a frame count known only
    while rendering, e.g. a grid of reachable positions)."""

    def add(self, doc: dict) -> None:
        if len(self) >= MAX_RENDER_FRAMES:
            raise ApiError(422, "render_too_large", f"more than {MAX_RENDER_FRAMES} frames; submit a job instead "
                           "(POST /v1/jobs)")
        self.append(doc)


class NotSteppable:
    """The session adapter (``service.families.SessionAdapter``) of a session that takes no steps or resets from
    the API: a one-shot render's temporary player (listed among its owner's sessions while it renders), or one
    whose family has not finished setting it up."""

    def __init__(self, why: str):
        self.why = why

    def step(self, app: ServiceApp, owner: str, session_id: str, data: Any):
        app.sessions.get(owner, session_id)  # 404/410 first, as for any session
        raise ApiError(409, "session_busy", f"session {session_id} {self.why}; it takes no steps or resets")

    reset = begin_step = step

    def document(self, entry, event, modalities, fmt, json_as_sent, batched=False) -> dict:  # pragma: no cover - never reached
        raise AssertionError(self.why)


ONE_SHOT = NotSteppable("is the temporary player of a one-shot render")
STARTING = NotSteppable("is still being set up")


@contextlib.contextmanager
def one_shot_session(app: ServiceApp, owner: str, controller_kwargs: dict, request_doc: dict) -> Iterator[Any]:
    """A session of ``owner`` (counted against their limits, never restarted) for the length of the block,
    marked busy (the idle reaper leaves it alone); the backend's ``Session`` is what the block drives. The API
    cannot step it (:data:`ONE_SHOT`)."""
    entry = app.sessions.create(owner, controller_kwargs, request_doc, auto_restart=False)
    entry.adapter = ONE_SHOT
    try:
        with app.sessions.hold(entry) as session:
            yield session
    finally:
        with contextlib.suppress(ApiError):  # already ended (its player failed): nothing left to stop
            app.sessions.delete(owner, entry.id, "one-shot render finished")


__all__ = ["MAX_RENDER_FRAMES", "ONE_SHOT", "STARTING", "NotSteppable", "RenderDocuments", "check_frame_count",
           "one_shot_session"]


class OneShotSimulator:
    """A one-shot render's player as the jobs' episode drivers take one (``MLAgentsSeat``'s, ``WebGLSeat``'s
    simulator): a temporary session of the requester (:func:`one_shot_session`), started (and so reset) for the
    unit; ``stop()`` ends it."""

    def __init__(self, app: ServiceApp, owner: str, kwargs: dict, request_doc: dict, protocol: str):
        self._block = one_shot_session(app, owner, {**kwargs, "protocol": protocol}, request_doc)
        self.session = self._block.__enter__()

    @property
    def last_event(self):
        return self.session.last_event

    def describe(self):
        return self.session.describe()

    def step(self, action):
        return self.session.step(action)

    def stop(self) -> None:
        self._block.__exit__(None, None, None)


def session_controller_kwargs(app: ServiceApp, env: Any, protocol: str, auto_restart: bool) -> dict:
    """A family environment spec's controller kwargs as the service launches them: its player logs under the
    data root, restarts only when the session asked for them."""
    kwargs = {**env.controller_kwargs(), "protocol": protocol}
    kwargs["log_dir"] = str(app.config.data_root / "player-logs")
    kwargs["max_restarts"] = max(1, env.max_restarts) if auto_restart else 0
    return kwargs
