"""``unirender openenv serve``'s server: OpenEnv's own FastAPI app (``openenv.core.env_server``: ``/ws``,
``/reset``, ``/step``, ``/state``, ``/health``, ``/schema``, ``/metadata``) over
:class:`~unirender.openenv.environment.UnirenderEnvironment`, behind a token gate, on uvicorn.

Security model (docs/openenv.md, "Security"): with tokens (``--token-file``), every request but ``/health``
carries one, as ``Authorization: Bearer TOKEN`` or as HTTP Basic auth whose password is the token (what
OpenEnv's stock ``EnvClient`` sends for ``base_url="http://openenv:TOKEN@host:port"``: its WebSocket library turns
a URL's user info into that header); anything else is refused before OpenEnv's app sees it (401 on HTTP, the
WebSocket handshake refused with 403), so no player starts for it. Without tokens the server binds loopback only
unless ``allow_open`` says the network itself is private.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import os
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from unirender.errors import SpecError
from unirender.netaddr import is_loopback
from unirender.openenv.environment import (
    NoPlayerError,
    ServedEnvironment,
    SessionLimitError,
    UnirenderEnvironment,
)
from unirender.openenv.models import UnirenderAction, UnirenderObservation

UNGATED_PATHS = frozenset({"/health"})  # a load balancer's probe proves nothing and learns nothing
# The largest HTTP body or WebSocket message a client may send (the service's default limits.body_bytes): an
# action or a reset's arguments are a few KB; past this the request is refused before the rest is read, so what
# the server holds for a client is bounded whatever it sends (token or not).
MAX_MESSAGE_BYTES = 4 * 2**20


def read_tokens(path: str | os.PathLike) -> list[str]:
    """One token per line; blank lines and ``#`` comments are skipped. A file with none is an error (a token
    file that gates nothing would be a silent open server)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SpecError(f"token file {path}: {exc.strerror or exc}") from None
    tokens = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not tokens:
        raise SpecError(f"token file {path} holds no token")
    short = [i for i, t in enumerate(tokens) if len(t) < 16]
    if short:
        raise SpecError(
            f"token file {path}: tokens must be at least 16 characters (token {short[0] + 1} is not)"
        )
    return tokens


def presented_token(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization`` header: ``Bearer TOKEN``, or ``Basic`` with the token as password."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, credentials = value.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer":
            return credentials.strip()
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return decoded.partition(":")[2]
    return None


class TokenGate:
    """ASGI middleware: a request without a known token never reaches the app (module doc)."""

    def __init__(self, app: Any, tokens: Iterable[str]):
        self.app = app
        self._tokens = [t.encode() for t in tokens]

    def _allowed(self, scope: dict) -> bool:
        token = presented_token(scope.get("headers") or ())
        if token is None:
            return False
        # compare with every token, always: the time taken says nothing about which one nearly matched
        return any([hmac.compare_digest(token.encode(), t) for t in self._tokens])

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope.get("path") in UNGATED_PATHS
            or self._allowed(scope)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        await _refuse(
            send,
            401,
            "a token is required: 'Authorization: Bearer TOKEN' (docs/openenv.md)",
            [(b"www-authenticate", b'Bearer realm="unirender", Basic realm="unirender"')],
        )


class BodyLimit:
    """ASGI middleware: an HTTP body over ``limit`` bytes is refused (413) without reaching the app; the body is
    read here, at most ``limit`` bytes of it, and handed on whole (OpenEnv's routes read it whole anyway).
    WebSocket messages are bounded by uvicorn's ``ws_max_size`` (:func:`serve`)."""

    def __init__(self, app: Any, limit: int = MAX_MESSAGE_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await _refuse(send, 413, f"a request body is at most {self.limit} bytes")
            return
        chunks, size, message = [], 0, {"more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":  # the client left: the app sees it leave
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await _refuse(send, 413, f"a request body is at most {self.limit} bytes")
                return
        first = (
            message
            if message["type"] != "http.request"
            else {"type": "http.request", "body": b"".join(chunks)}
        )
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return first

        await self.app(scope, replay, send)


async def _refuse(send: Callable, status: int, detail: str, headers: list | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})


def load_served(
    spec: str | os.PathLike,
    *,
    backend: str = "local",
    backend_options: dict | None = None,
    max_sessions: int = 4,
    behavior: str | None = None,
) -> ServedEnvironment:
    """The environment a spec file declares (a bare environment or a job spec; ``SpecError`` with key paths for
    a bad one), ready to serve on a backend of ``backend``'s kind."""
    from unirender.cluster.registry import create_backend
    from unirender.openenv.families import adapter_class
    from unirender.simulator import family_of
    from unirender.spec import load_environment
    from unirender.spec.loader import read_source

    if max_sessions < 1:
        raise SpecError("--max-sessions must be at least 1")
    document, _ = read_source(spec)
    environment = load_environment(spec)
    family = family_of({"protocol": getattr(environment, "protocol", None)})
    adapter = adapter_class(family)
    controller_kwargs, modalities = adapter.declare(environment, document)
    controller_kwargs["protocol"] = family  # what the backend launches by (the model's kwargs leave it out)
    name = document.get("name") if isinstance(document.get("name"), str) else Path(spec).stem
    declaration = environment.model_dump(mode="json", exclude_none=True)
    return ServedEnvironment(
        family=family,
        env_id=name,
        controller_kwargs=controller_kwargs,
        declaration=declaration,
        backend=create_backend(backend, **(backend_options or {})),
        max_sessions=max_sessions,
        modalities=modalities,
        behavior=behavior,
    )


def create_openenv_app(served: ServedEnvironment, tokens: list[str] | None = None) -> Any:
    """OpenEnv's app for ``served`` (at most ``served.max_sessions`` WebSocket sessions), gated by ``tokens``."""
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app

    app = create_fastapi_app(
        functools.partial(UnirenderEnvironment, served),
        UnirenderAction,
        UnirenderObservation,
        max_concurrent_envs=served.max_sessions,
    )
    # OpenEnv's HTTP /reset and /step let an environment's exception through as a 500 with no message; these are
    # the caller's to act on (the WebSocket path already sends each one's message)
    for error, status in ((SessionLimitError, 503), (NoPlayerError, 409), (ValueError, 400)):
        app.add_exception_handler(
            error, lambda request, exc, status=status: JSONResponse({"detail": str(exc)}, status_code=status)
        )
    app = BodyLimit(app)
    return TokenGate(app, tokens) if tokens else app


def serve(
    served: ServedEnvironment,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: list[str] | None = None,
    allow_open: bool = False,
    announce: Callable[[str], None] = print,
) -> int:
    """Serve until SIGINT/SIGTERM, then stop every player. The socket is bound and listening before
    ``announce`` is called with the URL (port 0 picks a free one), so a client may connect as soon as it reads
    it."""
    import uvicorn

    try:
        if not tokens and not allow_open and not is_loopback(host):
            raise SpecError(
                f"refusing to serve without tokens on {host}: give --token-file, or --allow-open where the "
                "network itself is private"
            )
        app = create_openenv_app(served, tokens)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            bound = sock.getsockname()[1]
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            announce(
                f"unirender openenv: serving {served.family} environment {served.env_id!r} on "
                f"http://{shown}:{bound} (WebSocket /ws, at most {served.max_sessions} sessions)"
            )
            # No permessage-deflate: every observation's images are already compressed (PNG, JPEG) or raw
            # arrays whose base64 deflates poorly, and deflating them cost more than anything else the server
            # did per step (benchmarks/README.md, "OpenEnv"); a client that asks for it gets plain frames.
            config = uvicorn.Config(
                app,
                log_level="warning",
                lifespan="on",
                ws_per_message_deflate=False,
                ws_max_size=MAX_MESSAGE_BYTES,  # a bigger message closes the socket, unread
            )
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sock.close()
    finally:
        served.backend.close()  # stops every player still running
    return 0
