"""``POST /v1/steps``: one request steps several of the caller's sessions at once; ``GET /v1/sessions/{id}/event``:
a session's last event without stepping it.

A batch is ``{"steps": [{"session": id, "action": <what that session's step takes>}, ...]}``. It is refused
whole, before any step, when it is malformed, longer than ``limits.sessions_per_token`` (more sessions than one
token may have), names a session twice, or names a session that is not the caller's live session (404 for
another owner's, as for one missing; 410 for an ended one). Otherwise every step runs, at once, through its
session's family adapter exactly as ``POST /v1/sessions/{id}/step`` runs it (every body check, limit and the
per-session rate limit), and the answer is ``{"events": [...]}`` in the batch's order: each item the session's
event document (frames as views, as a single step's) plus ``"session"``, or ``{"session", "status", "error":
{"code", "message", ...}}`` for a step that failed (a crashed player, a 422 action): one session's failure never
fails the others'.
"""

from __future__ import annotations

from typing import Any

from unirender.errors import raising
from unirender.service import documents
from unirender.service.errors import ApiError, from_unirender_error
from unirender.service.one_shot import STARTING, NotSteppable


def _parse(app, data: Any) -> list[tuple[str, Any]]:
    """The batch's (session id, action) pairs, or a 400/413 for the whole batch."""
    if not isinstance(data, dict) or set(data) != {"steps"} or not isinstance(data["steps"], list):
        raise ApiError(400, "invalid_batch", 'the body must be {"steps": [{"session": id, "action": ...}, ...]}')
    steps = data["steps"]
    limit = app.config.limits.sessions_per_token
    if not steps:
        raise ApiError(400, "invalid_batch", "the batch has no steps")
    if len(steps) > limit:
        raise ApiError(413, "batch_too_large", f"{len(steps)} steps in one batch; a token has at most {limit} "
                       "sessions (limits.sessions_per_token)")
    pairs, seen = [], set()
    for i, item in enumerate(steps):
        if (not isinstance(item, dict) or not isinstance(item.get("session"), str) or not item["session"]
                or not set(item) <= {"session", "action"}):  # fmt: skip
            raise ApiError(400, "invalid_batch", f"steps.{i}: each step is {{\"session\": id, \"action\": ...}}",
                           path=f"steps.{i}")
        if item["session"] in seen:
            raise ApiError(400, "duplicate_session", f"steps.{i}: session {item['session']!r} is named twice; a "
                           "batch steps each session once", path=f"steps.{i}.session")
        seen.add(item["session"])
        pairs.append((item["session"], item.get("action")))
    return pairs


def steps(app, request, owner):
    fmt = app.response_format(request)
    modalities = documents.frames_wanted(documents.parse_modalities(request.args), fmt)
    pairs = _parse(app, app.read_body(request))
    entries = []
    for i, (session_id, _) in enumerate(pairs):  # ownership of the whole batch before any step
        try:
            entries.append(app.sessions.get(owner, session_id))
        except ApiError as exc:
            raise ApiError(exc.status, exc.code, f"steps.{i}: {exc.message}; no step of the batch was run",
                           path=f"steps.{i}.session") from None
    json_as_sent, batched = app.json_as_sent(request), app.batched_body(request)
    # Every session's step is started (its player sent its action) before any is waited for, all from this
    # thread, so that the players render at once and no thread has to be woken per step; then each is received
    # in turn, its document built as it comes. Started in session id order: a started step holds its session
    # until received, and two batches naming the same sessions must not each hold one the other waits for.
    receives: list = [None] * len(pairs)
    for i in sorted(range(len(pairs)), key=lambda i: pairs[i][0]):
        session_id, action = pairs[i]
        try:
            receives[i] = (entries[i].adapter or STARTING).begin_step(app, owner, session_id, action)
        except Exception as exc:  # noqa: BLE001 - one step's failure is its item, never the batch's
            receives[i] = raising(exc)
    events = []
    for (session_id, _), entry, receive in zip(pairs, entries, receives, strict=True):
        try:
            event = receive()
            doc = entry.adapter.document(entry, event, modalities, fmt, json_as_sent, batched=batched)
            events.append({**doc, "session": session_id})
        except Exception as exc:  # noqa: BLE001 - one step's failure is its item, never the batch's
            err = from_unirender_error(exc)
            events.append({"session": session_id, "status": err.status, "error": err.body()["error"]})
    return app.encoded_response({"events": events}, fmt, request.environ)


def last_event(app, request, owner, session_id):
    fmt = app.response_format(request)
    modalities = documents.frames_wanted(documents.parse_modalities(request.args), fmt)
    entry = app.sessions.get(owner, session_id)
    adapter = entry.adapter or STARTING
    if isinstance(adapter, NotSteppable):
        adapter.step(app, owner, session_id, None)  # 409: it says why
    event = entry.session.last_event
    if event is None:
        raise ApiError(409, "no_event", f"session {session_id} has no event yet")
    doc = adapter.document(entry, event, modalities, fmt, app.json_as_sent(request), batched=app.batched_body(request))
    return app.encoded_response(doc, fmt, request.environ)
