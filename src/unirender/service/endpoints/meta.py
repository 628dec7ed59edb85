"""What the service says about itself: the root page, health, readiness, metrics, the API's description, and the
platform doctor's report."""

from __future__ import annotations

import functools
import json

from werkzeug.wrappers import Response

from unirender.service.errors import ApiError


def root(app, request, owner):
    from unirender.service.openapi import root_page

    return Response(root_page(), mimetype="text/html")


def healthz(app, request, owner):
    return app.json_response({"status": "ok"})


def readyz(app, request, owner):
    if app.draining:
        raise ApiError(503, "shutting_down", "the service is shutting down")
    return app.json_response({"status": "ready", "sessions": app.sessions.count(), "players": app.slots.used,
                              "player_slots": app.slots.total})


def metrics(app, request, owner):
    return Response(app.metrics.render(), content_type=app.metrics.content_type)


@functools.lru_cache(maxsize=2)
def _openapi_bytes(auth_enabled: bool) -> bytes:
    from unirender.service.openapi import openapi_document

    return json.dumps(openapi_document(auth_enabled=auth_enabled)).encode()


def openapi(app, request, owner):
    return Response(_openapi_bytes(app.config.auth_enabled), mimetype="application/json")


def docs(app, request, owner):
    from unirender.service.openapi import docs_page

    return Response(docs_page(), mimetype="text/html")


def platforms(app, request, owner):
    """``unirender doctor --no-start`` as JSON for ``?width=&height=`` (a client cannot make it start Xvfb)."""
    from unirender.platforms.doctor import build_report

    try:
        width = int(request.args.get("width", 300))
        height = int(request.args.get("height", 300))
    except ValueError:
        raise ApiError(400, "invalid_parameter", "width and height must be integers") from None
    if width < 1 or height < 1 or width * height > app.config.limits.pixels:
        raise ApiError(400, "invalid_parameter", f"width x height must be positive and at most "
                       f"{app.config.limits.pixels} pixels")
    return app.json_response(build_report(width, height, None, start_xvfb=False))


def builds(app, request, owner):
    """``GET /v1/builds``: the stored builds this service lets a client launch (``allowed_builds``)."""
    from unirender.service.policy import build_allowed

    allowed = app.config.allowed_builds
    listed = []
    for build in app.policy.build_store.list() if allowed else []:
        if build_allowed(allowed, build.digest, build):
            listed.append({"name": build.names[0] if build.names else None, "names": list(build.names),
                           "digest": build.digest, "family": build.info.family, "target": build.info.target,
                           "unity_version": build.info.unity_version, "size": build.size})  # fmt: skip
    return app.json_response({"builds": listed})
