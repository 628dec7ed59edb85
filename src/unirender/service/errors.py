"""Every error the API returns is JSON ``{"error": {"code", "message", ...}}`` with a stable ``code``.

4xx for the client's mistakes, 5xx only for ours (a player that crashed, a platform that is missing, a bug).
"""

from __future__ import annotations

import json

from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from unirender.cluster.base import CapacityError, SessionClosedError, SessionLostError
from unirender.errors import (
    ActionError,
    PlatformError,
    PlayerCrashedError,
    PlayerError,
    PlayerTimeoutError,
    RestartError,
    SpecError,
)
from unirender.protocol import ProtocolError


class ApiError(Exception):
    """An error with an HTTP status and a stable machine-readable code."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict | None = None, **details):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.details = details

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, **self.details}}

    def response(self) -> Response:
        resp = Response(
            json.dumps(self.body(), default=str), status=self.status, mimetype="application/json"
        )
        for key, value in self.headers.items():
            resp.headers[key] = value
        return resp


# werkzeug's own HTTP exceptions (routing, method) -> our codes.
_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    411: "length_required",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def from_http_exception(exc: HTTPException) -> ApiError:
    status = exc.code or 500
    headers = {}
    if status == 405 and getattr(exc, "valid_methods", None):
        headers["Allow"] = ", ".join(exc.valid_methods)
    return ApiError(status, _HTTP_CODES.get(status, "http_error"), exc.description or exc.name, headers=headers)


def from_unirender_error(exc: BaseException) -> ApiError:
    """Map the library's errors to API errors. Order matters: subclasses first."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, CapacityError):
        return ApiError(503, "capacity_exhausted", str(exc), headers={"Retry-After": "5"})
    if isinstance(exc, SessionClosedError):
        return ApiError(410, "session_ended", str(exc))
    if isinstance(exc, SessionLostError):
        return ApiError(502, "session_lost", str(exc))
    if isinstance(exc, SpecError):  # bounded, wherever the error came from (a body, a job spec)
        errors = [{"path": p, "message": m} for p, m in exc.errors[:_MAX_PROBLEMS]]
        lines = str(exc).split("\n", _MAX_PROBLEMS + 2)[: _MAX_PROBLEMS + 2]  # a header, problems, "... more"
        omitted = getattr(exc, "omitted", 0) + max(0, len(exc.errors) - len(errors))
        if len(exc.errors) > len(errors):
            lines.append(f"  ... and {omitted} more problems (not listed)")
        return ApiError(422, "invalid_spec", "\n".join(lines)[:_MAX_MESSAGE], errors=errors, omitted=omitted)
    if isinstance(exc, ActionError):
        return ApiError(400, "invalid_action", str(exc), error_code=exc.error_code)
    if isinstance(exc, RestartError):
        return ApiError(502, "player_restarted", str(exc))
    if isinstance(exc, PlayerCrashedError):
        return ApiError(502, "player_crashed", _first_line(exc), signal=exc.signal_name, returncode=exc.returncode)
    if isinstance(exc, PlayerTimeoutError):
        return ApiError(504, "player_timeout", _first_line(exc))
    if isinstance(exc, PlayerError):
        return ApiError(502, "player_error", _first_line(exc))
    if isinstance(exc, ProtocolError):
        return ApiError(502, "player_protocol_error", str(exc))
    from unirender.jobs.episodes import EpisodeFailed

    if isinstance(exc, EpisodeFailed):  # a pose or camera the player refuses: the request's own content
        return ApiError(422, "episode_failed", str(exc))
    if isinstance(exc, ValueError) and str(exc).startswith(("scene ", "no scene given")):
        return ApiError(422, "unknown_scene", str(exc))  # the Controller's check of the player's scene list
    if isinstance(exc, PlatformError):
        return ApiError(503, "platform_unavailable", str(exc))
    return ApiError(500, "internal_error", f"{type(exc).__name__}: {exc}")


_MAX_PROBLEMS = 20  # problems listed in one 422 (models.MAX_REPORTED_PROBLEMS for request bodies)
_MAX_MESSAGE = 16 * 1024  # characters of one error message


def _first_line(exc: BaseException) -> str:
    # Player errors carry the log tail; the client gets the reason, the operator the log file.
    return str(exc).split("\n  player log:")[0]
