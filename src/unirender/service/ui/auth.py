"""The console's auth: the service's bearer tokens, carried by a cookie; CSRF checks; security headers.

- Login stores the token in an ``HttpOnly; SameSite=Strict`` cookie scoped to ``/ui`` (the ``/v1`` API takes
  bearer headers only, never this cookie, so the API gains no cookie-borne CSRF exposure).
- Every state-changing request (POST) must carry the CSRF token of its owner (form field ``csrf`` or header
  ``X-CSRF-Token``): an HMAC of the owner's token under a secret made at start, so it is per token, needs no
  server-side store and is worthless to another token. ``Origin`` and ``Sec-Fetch-Site``, when the browser
  sends them, must say same-origin as well.
- With no tokens configured the console is open like the API, so it answers loopback peers only, and only
  under a loopback ``Host`` (a DNS-rebinding page cannot reach it through a name of its own).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from werkzeug.wrappers import Request

from unirender.netaddr import is_loopback
from unirender.service.config import ANONYMOUS, OPEN_GRANT, ServiceConfig
from unirender.service.errors import ApiError
from unirender.service.scopes import Grant

COOKIE = "unirender_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
LOGIN_SUBJECT = "\0login"  # the CSRF subject of the login form (nobody is logged in yet)

SECURITY_HEADERS = {
    # No inline script or style anywhere: every script and stylesheet is a file under /ui/static/.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self'; "
        "connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer Chromium sends "Origin: null" on our own form posts.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class ConsoleAuth:
    def __init__(self, config: ServiceConfig):
        self.config = config
        self._secret = secrets.token_bytes(32)  # CSRF tokens are valid for this process's life

    # -- who is asking ------------------------------------------------------------------------------------
    def check_reachable(self, request: Request) -> None:
        """An open service (no tokens) serves loopback peers under a loopback Host only."""
        if self.config.auth_enabled:
            return
        peer = request.remote_addr or ""
        host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
        if not is_loopback(peer) or not is_loopback(host):
            raise ApiError(403, "loopback_only", "this service has no tokens configured: its console answers "
                           "loopback clients at a loopback address only")

    def token_of(self, request: Request) -> str | None:
        return request.cookies.get(COOKIE) or None

    def owner_of_token(self, token: str | None) -> str | None:
        grant = self.grant_of_token(token)
        return grant.name if grant is not None else None

    def grant_of_token(self, token: str | None) -> Grant | None:
        """Who the console's login token is and what it may do; None when it is no configured token."""
        if not self.config.auth_enabled:
            return OPEN_GRANT
        if not token:
            return None
        found = None
        for known, grant in self.config.grants().items():  # constant time against each configured token
            if hmac.compare_digest(known.encode(), token.encode()):
                found = grant
        return found

    def owner(self, request: Request) -> str | None:
        """The logged-in token's owner name; None when nobody is (a login is needed)."""
        return self.owner_of_token(self.token_of(request))

    def grant(self, request: Request) -> Grant | None:
        """The logged-in token's grant (name and scopes); None when nobody is logged in."""
        return self.grant_of_token(self.token_of(request))

    # -- CSRF ---------------------------------------------------------------------------------------------
    def csrf_token(self, request: Request) -> str:
        subject = self.token_of(request) if self.config.auth_enabled else ANONYMOUS
        return self._csrf_for(subject or LOGIN_SUBJECT)

    def login_csrf_token(self) -> str:
        return self._csrf_for(LOGIN_SUBJECT)

    def _csrf_for(self, subject: str) -> str:
        return hmac.new(self._secret, subject.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, request: Request, expected: str) -> None:
        """Refuse a state-changing request that another site could have made (403 ``csrf_failed``)."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise ApiError(403, "csrf_failed", f"request from another origin refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("Origin")
        if origin is not None and origin != request.host_url.rstrip("/"):
            raise ApiError(403, "csrf_failed", f"cross-origin request refused (Origin: {origin})")
        sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD) or ""
        if not hmac.compare_digest(sent.encode(), expected.encode()):
            raise ApiError(403, "csrf_failed", "missing or wrong CSRF token; reload the page and try again")

    # -- cookies ------------------------------------------------------------------------------------------
    def set_login(self, response, request: Request, token: str) -> None:
        response.set_cookie(COOKIE, token, path="/ui", httponly=True, samesite="Strict",
                            secure=request.scheme == "https")

    def clear_login(self, response, request: Request) -> None:
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="Strict",
                               secure=request.scheme == "https")
