"""``/v1/sessions``: create, list, describe and delete sessions, and step and reset them.

The family is looked up once, when the session is created (``service.families``); the session keeps its
family's :class:`~unirender.service.families.SessionAdapter` (``entry.adapter``), which checks each step's and
reset's body and builds the event's document.
"""

from __future__ import annotations

import logging
import time

from werkzeug.wrappers import Response

from unirender.service import documents, families
from unirender.service.errors import ApiError
from unirender.service.one_shot import STARTING

log = logging.getLogger(__name__)


def list_sessions(app, request, owner):
    """The owner's live sessions, then those lost in a restart."""
    return app.json_response({"sessions": app.sessions.describe_all(owner)})


def create_session(app, request, owner):
    data = app.read_body(request)
    record = None
    if isinstance(data, dict) and isinstance(data.get("record"), dict) and "video" in data["record"]:
        # Every family's ``record.video`` (an ML-Agents ``record`` also says which sensors events carry): taken
        # out here and checked before a player starts; the rest of the body is the family's.
        from unirender.service.session_video import RecordOptions, VideoOptions, parse_options

        data, rest = dict(data), dict(data["record"])
        record = parse_options({"video": rest.pop("video")}, RecordOptions, "record.video").video
        record = VideoOptions() if record is True else (record or None)
        if rest:
            data["record"] = rest
        else:
            del data["record"]
    entry = families.family_of_body(data).create_session(app, owner, data)
    if record is not None:
        try:
            app.session_videos.of(entry).start(record)
        except BaseException:
            app.sessions.delete(owner, entry.id, "its recording could not start")
            raise
    resp = app.json_response(session_document(entry, video=app.session_videos.get(entry.id)), status=201)
    resp.headers["Location"] = f"/v1/sessions/{entry.id}"
    return resp


def session_document(entry, doc: dict | None = None, video=None) -> dict:
    """A session's record (``doc``, default ``SessionEntry.describe()``) plus, for a live one, ``description``:
    its player's ``Session.describe().to_dict()`` (family, actions, observations, where it runs), ``None`` when
    the player cannot say (it has just failed). A session lost in a restart (``entry`` None) is its record as
    listed. What ``POST /v1/sessions`` and ``GET /v1/sessions/{id}`` answer."""
    doc = entry.describe() if doc is None else doc
    if entry is None:
        return doc
    doc["video"] = video.describe() if video is not None else None  # its recording (service.session_video)
    try:
        doc["description"] = entry.session.describe().to_dict()
    except Exception as exc:  # noqa: BLE001 - a failed player still has a record to show
        log.info("session %s cannot describe its player: %s", entry.id, exc)
        doc["description"] = None
    return doc


def get_session(app, request, owner, session_id):
    doc = app.sessions.describe(owner, session_id)  # a live session, or the record of one lost in a restart
    try:
        entry = app.sessions.get(owner, session_id)
    except ApiError:  # lost in a restart: its record only
        entry = None
    video = app.session_videos.get(entry.id) if entry is not None else None
    return app.json_response(session_document(entry, doc, video))


def delete_session(app, request, owner, session_id):
    app.sessions.delete(owner, session_id)
    return Response(status=204)


def _session(app, owner: str, session_id: str):
    """(the session, its family's adapter); (None, the adapter for a missing session) when it is not there: the
    body is still checked first, then the registry answers 404. A session of this owner that has ended or was lost
    in a restart is 410 at once, whatever the body: its family (and so what a good body is) is not known here, and
    the 410 is what its client must learn (an ML-Agents body is no AI2-THOR action)."""
    try:
        entry = app.sessions.get(owner, session_id)
    except ApiError as exc:
        if exc.status == 410:
            raise
        return None, families.unresolved_session()
    return entry, entry.adapter or STARTING


def step(app, request, owner, session_id):
    fmt = app.response_format(request)
    modalities = documents.parse_modalities(request.args)
    data = app.read_body(request)
    entry, adapter = _session(app, owner, session_id)
    started = time.perf_counter()
    event = adapter.step(app, owner, session_id, data)
    return event_response(app, request, entry, event, fmt, modalities, time.perf_counter() - started)


def reset(app, request, owner, session_id):
    fmt = app.response_format(request)
    modalities = documents.parse_modalities(request.args)
    entry, adapter = _session(app, owner, session_id)
    event = adapter.reset(app, owner, session_id, app.read_body(request))
    return event_response(app, request, entry, event, fmt, modalities)


def event_response(app, request, entry, event, fmt: str, modalities: list[str] | None, step_s: float = 0.0):
    """The event's document (the session's family's), encoded, with where the time went (W3C Server-Timing:
    player step, then encoding)."""
    started = time.perf_counter()
    doc = entry.adapter.document(entry, event, documents.frames_wanted(modalities, fmt), fmt,
                                app.json_as_sent(request), batched=app.batched_body(request))
    resp = app.encoded_response(doc, fmt, request.environ)
    resp.headers["Server-Timing"] = (
        f"step;dur={step_s * 1000:.3f}, encode;dur={(time.perf_counter() - started) * 1000:.3f}"
    )
    return resp



def start_video(app, request, owner, session_id):
    """Start recording the session's view (``VideoOptions``); 409 when it records already."""
    from unirender.service.session_video import VideoOptions, parse_options

    options = parse_options(app.read_body(request), VideoOptions, "video")
    entry = app.sessions.get(owner, session_id)
    return app.json_response(app.session_videos.of(entry).start(options))


def stop_video(app, request, owner, session_id):
    """Finish the recording; ``GET .../video`` then serves it."""
    entry = app.sessions.get(owner, session_id)
    return app.json_response(app.session_videos.of(entry).stop())


def get_video(app, request, owner, session_id):
    """The last finished recording as ``video/mp4`` (Range requests answered: browsers seek in it)."""
    from werkzeug.utils import send_file

    entry = app.sessions.get(owner, session_id)
    finished = app.session_videos.of(entry).finished()
    resp = send_file(str(finished["path"]), request.environ, mimetype="video/mp4", conditional=True,
                     download_name=f"{session_id}.mp4", max_age=0)
    resp.headers["Cache-Control"] = "private, no-cache"
    return resp
