"""What a client token may do: scopes, checked for every API endpoint and console page (docs/service.md, "Tokens").

A token carries a set of scopes:

- ``sessions``: create, step, reset, list and delete its own sessions, ``/v1/steps``, ``/v1/render``;
- ``jobs``: submit, follow, cancel its own jobs and read their outputs;
- ``builds:write``: upload builds to the service's store (running code on the render host: never implied);
- ``admin``: everything, including what no other scope allows (deleting a build from the store).

A token configured as a bare string keeps exactly what every token could do before scopes existed
(:data:`DEFAULT_SCOPES`: sessions and jobs): adding scopes took no power away from existing token files and gave
none that they did not have. An open service (no tokens: loopback only, or ``allow_open`` on a private network)
answers everyone with every scope, as it always has.
"""

from __future__ import annotations

from dataclasses import dataclass

SESSIONS, JOBS, BUILDS_WRITE, ADMIN = "sessions", "jobs", "builds:write", "admin"
SCOPES = (SESSIONS, JOBS, BUILDS_WRITE, ADMIN)
DEFAULT_SCOPES = frozenset({SESSIONS, JOBS})

# The scope each API endpoint needs (``service.app.ENDPOINTS``' names); public endpoints need none. An endpoint
# missing here is refused to everyone but admin: a new endpoint must say what it needs.
ENDPOINT_SCOPES = {
    "platforms": None, "list_builds": None,  # any valid token
    "get_build": SESSIONS, "get_build_manifest": SESSIONS, "get_build_blob": SESSIONS,
    "post_build_blobs": SESSIONS, "put_build": BUILDS_WRITE, "delete_build": ADMIN,  # GET: only builds it may launch
    "list_sessions": SESSIONS, "create_session": SESSIONS, "get_session": SESSIONS, "delete_session": SESSIONS,
    "step": SESSIONS, "reset": SESSIONS, "last_event": SESSIONS, "batch_steps": SESSIONS, "render": SESSIONS,
    "get_video": SESSIONS, "start_video": SESSIONS, "stop_video": SESSIONS,
    "list_jobs": JOBS, "submit_job": JOBS, "get_job": JOBS, "cancel_job": JOBS, "job_manifest": JOBS,
}  # fmt: skip
# The console's pages (``service.ui.console.URLS``' names) by the same rule; its index lists what the token may see.
CONSOLE_SCOPES = {
    "index": None, "status": None, "logout": None,
    "session": SESSIONS, "stream": SESSIONS, "session_status": SESSIONS, "action": SESSIONS,
    "session_video": SESSIONS, "session_video_file": SESSIONS, "job_video": JOBS,
    "job": JOBS, "cancel_job": JOBS, "resume_job": JOBS, "contact_sheet": JOBS, "dataset_frame": JOBS,
}  # fmt: skip
_UNLISTED = ADMIN


@dataclass(frozen=True)
class Grant:
    """Who a request comes from (the token's name: the owner of its sessions and jobs) and what it may do."""

    name: str
    scopes: frozenset[str]

    def allows(self, scope: str | None) -> bool:
        return scope is None or ADMIN in self.scopes or scope in self.scopes


def needed(endpoint: str, table: dict[str, str | None] = ENDPOINT_SCOPES) -> str | None:
    """The scope ``endpoint`` needs (admin for one the table does not list)."""
    return table.get(endpoint, _UNLISTED)


def check_scopes(scopes) -> frozenset[str]:
    """``scopes`` as a set, every one known; ValueError naming the valid ones otherwise."""
    if isinstance(scopes, str):
        scopes = [s for s in scopes.replace(",", " ").split() if s]
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(
            f"unknown scope(s) {', '.join(map(repr, unknown))}; valid scopes: {', '.join(SCOPES)}"
        )
    return frozenset(scopes)
