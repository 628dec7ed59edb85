"""The OpenAPI 3.1 document of the client API, with request schemas taken from the pydantic models: each family's
bodies (``service.families``) are the ``oneOf`` members of the operation that takes them."""

from __future__ import annotations

import html
from typing import Any

from unirender import __version__
from unirender.service.families import every_family

REF = "#/components/schemas/{model}"

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
ACTION = {
    "type": "object",
    "required": ["action"],
    "properties": {"action": {"type": "string", "minLength": 1}},
    "additionalProperties": True,
    "description": "an AI2-THOR action, as Controller.step takes it: {\"action\": \"RotateRight\", \"degrees\": 90}",
}
FRAME = {
    "type": "object",
    "required": ["shape", "dtype"],
    "properties": {
        "shape": {"type": "array", "items": {"type": "integer"}},
        "dtype": {"type": "string"},
        "format": {"type": "string", "enum": ["png", "npy"]},
        "data": {"type": "string", "description": "base64"},
    },
}
EVENT = {
    "type": "object",
    "required": ["metadata", "frames"],
    "properties": {
        "metadata": {"type": "object"},
        "frames": {"type": "object", "additionalProperties": {"$ref": REF.format(model="Frame")}},
    },
}


def _schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {"Error": ERROR, "Action": ACTION, "Frame": FRAME, "Event": EVENT}
    for family in every_family():
        for model in (family.session_body, family.step_body, family.reset_body, family.render_body,
                      family.job_body):
            if isinstance(model, str):  # a hand-written schema (above)
                continue
            schemas.update(_model_schema(model))
    schemas["EventList"] = {
        "type": "object", "properties": {"events": {"type": "array", "items": {"$ref": REF.format(model="Event")}}}
    }
    schemas.update(BATCH_SCHEMAS)
    from unirender.service.session_video import RecordOptions

    schemas.update(_model_schema(RecordOptions))  # and VideoOptions, which it refers to
    return schemas


# POST /v1/steps (service.endpoints.batch)
BATCH_SCHEMAS: dict[str, Any] = {
    "StepBatch": {
        "type": "object", "required": ["steps"], "additionalProperties": False,
        "properties": {"steps": {"type": "array", "minItems": 1, "description": "at most limits.sessions_per_token "
                                 "steps, each session once",
                                 "items": {"type": "object", "required": ["session"], "additionalProperties": False,
                                           "properties": {"session": {"type": "string", "minLength": 1},
                                                          "action": {"description": "what POST /v1/sessions/{id}/"
                                                                     "step takes for that session's family"}}}}},
    },
    "BatchEvents": {
        "type": "object",
        "properties": {"events": {"type": "array", "description": "in the batch's order", "items": {"oneOf": [
            {"allOf": [{"$ref": REF.format(model="Event")}, {"type": "object", "properties": {"session": {"type": "string"}}}]},
            {"type": "object", "required": ["session", "status", "error"],
             "properties": {"session": {"type": "string"}, "status": {"type": "integer"},
                            "error": ERROR["properties"]["error"]}},
        ]}}},
    },
}


def _model_schema(model) -> dict[str, Any]:
    """A model's schema under its name, and the schemas it refers to."""
    schema = model.model_json_schema(ref_template=REF)
    schemas: dict[str, Any] = schema.pop("$defs", {})
    schemas[model.__name__] = schema
    return schemas


def _names(part: str) -> list[str]:
    """The schema names of one body (``session_body``, ``step_body``, ...) of every family, in registry order."""
    names = []
    for family in every_family():
        body = getattr(family, part)
        names.append(body if isinstance(body, str) else body.__name__)
    return names


def _ref(name: str) -> dict:
    return {"$ref": REF.format(model=name)}


def _json(name: str | dict, description: str = "OK") -> dict:
    schema = _ref(name) if isinstance(name, str) else name
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(name: str | list[str], msgpack: bool = True) -> dict:
    """A request body of one schema, or of one of several (``oneOf``: AI2-THOR or ML-Agents sessions)."""
    schema = _ref(name) if isinstance(name, str) else {"oneOf": [_ref(n) for n in name]}
    content = {"application/json": {"schema": schema}}
    if msgpack:
        content["application/x-msgpack"] = {"schema": schema}
    return {"required": True, "content": content}


def _event_responses(event_schema: str) -> dict:
    return {
        "200": {
            "description": "the event: metadata plus frames (msgpack: raw bytes with shape/dtype, and 'step', the "
            "step keys read from metadata forwarded as the player sent it; JSON: base64 PNG/NPY when ?modalities= "
            "asks; multipart/mixed: a JSON part then one part per frame)",
            "content": {
                "application/json": {"schema": _ref(event_schema)},
                "application/x-msgpack": {"schema": {}},
                "multipart/mixed": {"schema": {}},
            },
        }
    }


def _op(summary: str, responses: dict, *, body: dict | None = None, params: list | None = None,
        public: bool = False) -> dict:
    op: dict[str, Any] = {"summary": summary, "responses": {**responses, "default": _json("Error", "an error")}}
    if body is not None:
        op["requestBody"] = body
    if params:
        op["parameters"] = params
    if public:
        op["security"] = []
    return op


SID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
JID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
JOB_PAGE = [
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
    {"name": "before", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "a job id: the jobs submitted before it (the previous page's 'next')"},
]
MODALITIES = {
    "name": "modalities", "in": "query", "required": False, "schema": {"type": "string"},
    "description": "comma-separated frames to return (rgb,depth,...); 'none' for metadata only",
}

METADATA_AS_SENT = {
    "name": "Unirender-Metadata", "in": "header", "required": False, "schema": {"type": "string", "enum": ["as-sent"]},
    "description": "msgpack responses only: an event whose player spoke JSON (WSGI) carries its metadata as that "
    "JSON, unconverted, in 'metadata_json' (bytes: a JSON document whose agents[0] is the event's metadata; for a "
    "one-agent scene the very document the player sent) instead of a 'metadata' map",
}


DIGEST = {"name": "digest", "in": "path", "required": True,
          "schema": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
          "description": "the build's digest (docs/builds.md, 'The digest')"}
TAR = {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}


def _errors(*pairs: tuple[int, str]) -> dict:
    """Error responses by status, each naming the ``error.code`` values it carries."""
    out: dict[str, dict] = {}
    for status, codes in pairs:
        out[str(status)] = _json("Error", f"error.code: {codes}")
    return out


# /v1/builds/{digest} (service.endpoints.builds; docs/builds.md, "A service's store over HTTP"). The scope each
# needs is in its summary and in x-scope (docs/service.md, "Tokens and scopes").
BUILD_ROUTES = {
    "head": {**_op("whether the store holds a build this token may launch (scope: sessions); headers "
                   "X-Build-Size and X-Build-Family", {"200": {"description": "held"},
                                                       "404": {"description": "not held, or not launchable"}},
                   params=[{"$ref": "#/components/parameters/Digest"}]), "x-scope": "sessions"},
    "get": {**_op("the build as the store's export tar (unirender builds import takes it); Range answered (206) so "
                  "a node or a mirror resumes a cut download (scope: sessions)",
                  {"200": {"description": "the export tar", "content": TAR},
                   "206": {"description": "the requested range of the export tar", "content": TAR},
                   "416": {"description": "a Range past the end of the tar"},
                   **_errors((400, "invalid_digest"), (404, "build_not_found"))},
                  params=[{"$ref": "#/components/parameters/Digest"},
                          {"name": "Range", "in": "header", "required": False, "schema": {"type": "string"}}]),
            "x-scope": "sessions"},
    "put": {**_op("upload a build (scope: builds:write): its export tar or an archive, with a Content-Length; "
                  "checked against the digest before anything is published",
                  {"201": _json({"type": "object", "properties": {"digest": {"type": "string"},
                                                                   "size": {"type": "integer"},
                                                                   "created": {"type": "boolean"}}}, "published"),
                   "200": _json({"type": "object"}, "already held (created: false)"),
                   **_errors((400, "invalid_digest, upload_incomplete"), (403, "insufficient_scope"),
                             (411, "length_required"),
                             (413, "body_too_large (limits.build_bytes), build_quota_exceeded, build_store_full"),
                             (415, "unsupported_media_type"),
                             (422, "digest_mismatch, unsafe_archive, invalid_build"))},
                  body={"required": True, "content": {**TAR, **{t: {"schema": {"type": "string", "format": "binary"}}
                                                                for t in ("application/zip", "application/gzip",
                                                                          "application/zstd")}}},
                  params=[{"$ref": "#/components/parameters/Digest"}]), "x-scope": "builds:write"},
    "delete": {**_op("remove the build from the store (scope: admin)",
                     {"204": {"description": "removed"}, **_errors((403, "insufficient_scope"),
                                                                   (404, "build_not_found"))},
                     params=[{"$ref": "#/components/parameters/Digest"}]), "x-scope": "admin"},
}


def _int_query(name: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1}}


def openapi_document(config=None, *, auth_enabled: bool | None = None) -> dict:
    """The document; its ``security`` says whether a bearer token is needed (``config.auth_enabled``, or
    ``auth_enabled``; default: needed)."""
    if auth_enabled is None:
        auth_enabled = config is None or config.auth_enabled
    obj = {"type": "object"}
    paths = {
        "/healthz": {"get": _op("liveness", {"200": _json(obj)}, public=True)},
        "/readyz": {"get": _op("readiness (503 while shutting down)", {"200": _json(obj)}, public=True)},
        "/metrics": {"get": _op("Prometheus metrics", {"200": {"description": "text exposition format",
                                                               "content": {"text/plain": {"schema": {}}}}},
                                public=True)},
        "/v1/platforms": {"get": _op("the platform doctor report of this host", {"200": _json(obj)},
                                     params=[_int_query("width"), _int_query("height")])},
        "/v1/builds": {"get": _op("the stored builds this service lets a client launch (environment.build): name, "
                                  "names, digest, family, target, unity_version, size", {"200": _json(obj)})},
        "/v1/builds/{digest}": BUILD_ROUTES,
        "/v1/builds/{digest}/manifest": {"get": {**_op(
            "the build's manifest (its sha256 is the digest): every file's path, mode, size and sha256; what a node "
            "fetching the build reads first (scope: sessions)",
            {"200": _json({"type": "object"}, "the manifest, byte for byte as stored"),
             **_errors((400, "invalid_digest"), (404, "build_not_found"))},
            params=[{"$ref": "#/components/parameters/Digest"}]), "x-scope": "sessions"}},
        "/v1/builds/{digest}/blobs/{sha256}": {"get": {**_op(
            "one file of the build, by its sha256 (Range answered): a node fetches only the files it lacks, several "
            "at once, and checks each (scope: sessions)",
            {"200": {"description": "the file's bytes", "content": {"application/octet-stream": {"schema": {}}}},
             "206": {"description": "the requested range", "content": {"application/octet-stream": {"schema": {}}}},
             "416": {"description": "a Range past the end of the file"},
             **_errors((400, "invalid_digest"), (404, "build_not_found, blob_not_found"))},
            params=[{"$ref": "#/components/parameters/Digest"},
                    {"name": "sha256", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "Range", "in": "header", "required": False, "schema": {"type": "string"}}]),
            "x-scope": "sessions"}},
        "/v1/builds/{digest}/blobs": {"post": {**_op(
            "several small files of the build in one response, their bytes one after another in the order asked "
            "(each one's size is in the manifest): a node fetches a build's many small files in a few round trips "
            "(scope: sessions)",
            {"200": {"description": "the files' bytes, concatenated",
                     "content": {"application/octet-stream": {"schema": {}}}},
             **_errors((400, "invalid_digest, invalid_parameter"), (404, "build_not_found, blob_not_found"),
                       (413, "batch_too_large"))},
            body={"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["blobs"], "additionalProperties": False,
                "properties": {"blobs": {"type": "array", "minItems": 1, "maxItems": 4096,
                                         "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}}}}},
            params=[{"$ref": "#/components/parameters/Digest"}]), "x-scope": "sessions"}},
        "/v1/sessions": {
            "get": _op("your sessions", {"200": _json(obj)}),
            "post": _op("start a player for an environment spec (environment.protocol: mlagents -> an ML-Agents "
                        "game); any body may add 'record.video' (true or VideoOptions, RecordOptions' one field) "
                        "to record the session from its first frame", {"201": _json(obj, "created")},
                        body=_body(_names("session_body"))),
        },
        "/v1/sessions/{session_id}": {
            "get": _op("one session: its record, and 'description', its player's Session.describe() (family, "
                       "actions, observations, where it runs; null when the player cannot say)", {"200": _json(obj)},
                       params=[SID]),
            "delete": _op("stop a session", {"204": {"description": "stopped"}}, params=[SID]),
        },
        "/v1/sessions/{session_id}/step": {
            "post": _op("one action; on an ML-Agents session the actions per behavior (lists of rows, one per "
                        "decision agent; 422 when a shape does not match the behavior spec)",
                        _event_responses("Event"), body=_body(_names("step_body")),
                        params=[SID, MODALITIES, METADATA_AS_SENT]),
        },
        "/v1/sessions/{session_id}/reset": {
            "post": _op("reset to a scene (ML-Agents: new episodes, optional environment parameters)",
                        _event_responses("Event"), body=_body(_names("reset_body")),
                        params=[SID, MODALITIES, METADATA_AS_SENT]),
        },
        "/v1/sessions/{session_id}/event": {
            "get": _op("the session's last event, without stepping it (after its start, or a restart of its "
                       "player)", _event_responses("Event"), params=[SID, MODALITIES, METADATA_AS_SENT]),
        },
        "/v1/sessions/{session_id}/video": {
            "get": _op("the session's last finished recording (video/mp4, H.264; Range requests answered); 409 while "
                       "the first one is still recording, 404 when it never recorded",
                       {"200": {"description": "an mp4", "content": {"video/mp4": {"schema": {}}}}}, params=[SID]),
        },
        "/v1/sessions/{session_id}/video/start": {
            "post": _op("start recording one view of the session, a frame per event (fps, quality, codec, view: all "
                        "optional); 409 when it records already", {"200": _json(obj)},
                        body=_body("VideoOptions"), params=[SID]),
        },
        "/v1/sessions/{session_id}/video/stop": {
            "post": _op("finish the recording (GET .../video then serves it); 409 when it is not recording",
                        {"200": _json(obj)}, params=[SID]),
        },
        "/v1/steps": {
            "post": _op("step several of your sessions in one request, all players at once: each item of 'events' is that "
                        "session's event document (frames as in a single step) or its error ({session, status, "
                        "error}); refused whole, before any step, when malformed, too long, naming a session twice "
                        "or one that is not yours. Every limit and rate limit applies per session",
                        _event_responses("BatchEvents"), body=_body("StepBatch"),
                        params=[MODALITIES, METADATA_AS_SENT]),
        },
        "/v1/render": {"post": _op("one-shot render of an episode on a temporary player (an AI2-THOR episode, or "
                                   "with environment.protocol: mlagents an ML-Agents episode: its policy's steps "
                                   "after the reset, each repeat on a fresh game)", _event_responses("EventList"),
                                   body=_body(_names("render_body")), params=[METADATA_AS_SENT])},
        "/v1/jobs": {
            "get": _op("your jobs, newest first, a page at a time ('next': the 'before' of the next page)",
                       {"200": _json(obj)}, params=JOB_PAGE),
            "post": _op("submit a job spec", {"202": _json(obj, "accepted")}, body=_body(_names("job_body"))),
        },
        "/v1/jobs/{job_id}": {
            "get": _op("job state and progress", {"200": _json(obj)}, params=[JID]),
            "delete": _op("cancel a job", {"202": _json(obj, "cancelling")}, params=[JID]),
        },
        "/v1/jobs/{job_id}/manifest": {"get": _op("the job's manifest", {"200": _json(obj)}, params=[JID])},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "unirender render service", "version": __version__,
                 "description": "Sessions, one-shot renders and jobs on headless Unity-compatible players."},
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "parameters": {"Digest": DIGEST},
        },
        "security": [{"bearer": []}] if auth_enabled else [],
    }


def root_page() -> str:
    """``GET /``: what this server is and where to go next (a browser pointed at the port lands here)."""
    links = [("/docs", "the API: every operation, how to authenticate and pick a format"),
             ("/openapi.json", "the same as OpenAPI 3.1"), ("/healthz", "liveness (also /health)"),
             ("/readyz", "readiness: sessions and player slots in use"), ("/metrics", "Prometheus metrics")]
    items = "".join(f"<li><a href='{href}'>{href}</a>: {html.escape(what)}</li>" for href, what in links)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>unirender render service</title></head><body>"
        f"<h1>unirender render service {html.escape(__version__)}</h1>"
        "<p>Headless rendering for Unity-based environments (AI2-THOR wire-compatible): clients open sessions "
        "and step players, render episodes or submit dataset jobs under <code>/v1/</code>; players connect to "
        "<code>/train</code>. From Python: <code>unirender.client.Client(url, token=...)</code>.</p>"
        f"<ul>{items}</ul></body></html>"
    )


def docs_page() -> str:
    """A dependency-free HTML page listing the operations (no CDN: the service may run offline)."""
    doc = openapi_document()
    rows = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            rows.append(f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                        f"<td>{html.escape(op['summary'])}</td></tr>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>unirender API</title></head><body>"
        "<h1>unirender render service</h1><p>Machine-readable: <a href='/openapi.json'>/openapi.json</a>. "
        "Send <code>Authorization: Bearer &lt;token&gt;</code>; choose the response format with "
        "<code>Accept</code>: application/x-msgpack (fast), application/json, multipart/mixed.</p>"
        "<table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>what</th></tr>"
        + "".join(rows) + "</table></body></html>"
    )
