"""``PlayerHub``: one WSGI endpoint (``/train``, ``/ping``) for many players, each routed to its session by token.

The hub either serves itself (waitress, in a thread, on 127.0.0.1 and an ephemeral port) or is mounted into
another WSGI application as ``hub.wsgi_app`` (the service mounts it so players reach the service's own port; then
``PlayerHub(address=(host, port))`` says where that is, for ``AI2THOR_HOST``/``AI2THOR_PORT``).

Why waitress and how it is tuned (``shared/docs/serving-and-scale.md``): it keeps HTTP/1.1 connections alive and
never adds ``Connection: close`` (werkzeug's server does, which breaks Unity); every ``/train`` blocks a worker
thread until the controller's next action, so threads = 2 x players + 4; frames of several MiB must stay in memory
(``outbuf_overflow``/``inbuf_overflow``), and an idle Unity socket between episodes must not be dropped.

Nothing a request says is trusted or remembered before its token is verified (docs/service.md, "Hardening"):
a connection is closed after a few idle seconds until a request on it proves a token (:class:`ConnectionPolicy`);
a frame body's buffer grows as its bytes arrive, whatever ``Content-Length`` claims, and is recycled only for a
verified player; the part sizes that speed up parsing are each player's own, learnt only from its verified forms.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from types import MethodType
from typing import Protocol

from unirender.protocol import ProtocolError
from unirender.protocol.multipart import parse_form, payload_parts_from_form
from unirender.protocol.pool import BufferPool

log = logging.getLogger(__name__)

_BUFFER_OVERFLOW = 64 * 1024 * 1024  # 1024x1024 rgb+depth+ids is ~11 MiB; 4 such payloads stay in memory
# waitress reads 8 KiB per call by default: 1,400 loop turns for one 11 MiB frame. Not 1 MiB either: each recv()
# allocates a bytes object of this size and shrinks it; at 1 MiB glibc serves that with a fresh mmap every time
# (580 page faults and ~2 ms of system time per 300x300 rgb+depth+ids step, measured); 256 KiB reuses heap memory.
_RECV_BYTES = 256 * 1024
# How often waitress looks for idle connections to close: well under the shortest idle limit.
_CLEANUP_INTERVAL_S = 1
# A connection is tagged in the WSGI environ, so the app can raise its idle limit once a token is verified.
CONNECTION_KEY = "unirender.connection"
PLAYER_PATHS = ("/train", "/ping")


_COALESCE_LIMIT = 64 * 1024  # a held response head is joined with a body up to this size (copying more costs more)
_FRAME_BODY_MIN = 64 * 1024  # request bodies at least this big (frames) are received straight into one buffer
_FRAME_BODY_POOL = 4  # recycled frame buffers per server (the last event usually still holds one)
_FRAME_BODY_FIRST = 256 * 1024  # first size of a new frame buffer; it doubles as bytes arrive, up to the body size
_PART_SIZES_MAX = 128  # part names remembered per player (8 cameras x 7 modalities + the agent's fit)
# Parts a form from a sender not yet known may have (a Unity form has metadata, token and up to ~60 images):
# an unknown sender's form with more is refused after one count, before anything is built from it.
_MAX_FORM_PARTS = 512


@dataclass(frozen=True)
class ConnectionPolicy:
    """How long a connection may sit idle (no request in flight), by what it has proven.

    A connection that has not yet carried a request with a valid token is closed after ``untrusted_idle_s``:
    idle attackers cannot hold connection slots for long. A verified client keeps its keep-alive connection for
    ``client_idle_s`` (waitress's own default), a verified player for ``player_idle_s`` (Unity never
    reconnects on its own). A request in flight (a player's long poll, a long render) never counts as idle; a
    request head not complete ``untrusted_idle_s`` after its first byte (slowloris) closes its connection.
    ``per_address`` (0: no cap) bounds the connections one remote address may hold; players and a reverse proxy
    all come from one address, so it is off unless configured.
    """

    untrusted_idle_s: float = 10.0
    client_idle_s: float = 120.0
    player_idle_s: float = 24 * 3600.0
    per_address: int = 0


def trust_connection(environ, idle_s: float, player: HubChannel | None = None) -> None:
    """Called once a request's token is verified: its connection may now idle for ``idle_s`` seconds, and a
    malformed request on it later is that ``player``'s."""
    connection = environ.get(CONNECTION_KEY)
    if connection is None:
        return
    if idle_s > connection.idle_limit_s:
        connection.idle_limit_s = idle_s
    if player is not None:
        connection.verified_player = player


def apply_connection_policy(server, policy: ConnectionPolicy) -> None:
    """Make a waitress server close each idle connection after that connection's own limit (waitress has one
    ``channel_timeout`` for all), checked every ``_CLEANUP_INTERVAL_S``."""

    def maintenance(self, now):
        for channel in list(self.active_channels.values()):
            limit = getattr(channel, "idle_limit_s", policy.untrusted_idle_s)
            if not channel.requests and channel.last_activity < now - limit:
                channel.will_close = True
            # A request head trickling in (slowloris) is never idle for long, but every real client sends its
            # head at once: one not complete within untrusted_idle_s is dropped.
            request = channel.request
            started = getattr(request, "started", None)
            if started is not None and not request.headers_finished and started < now - policy.untrusted_idle_s:
                channel.will_close = True

    server.maintenance = MethodType(maintenance, server)
    server.adj.cleanup_interval = _CLEANUP_INTERVAL_S


class FrameBody:
    """A request body received into one buffer of its own (the subset of waitress's buffer API its
    ``FixedStreamReceiver`` and request use). ``in_place`` counts bytes the channel already wrote into the tail
    with ``recv_into``: appending them only moves the fill mark.

    The buffer grows (doubling) as bytes arrive, up to the announced ``length``: a ``Content-Length`` alone
    reserves nothing. A verified player's frames reuse a recycled buffer of the exact size instead (``data``).
    """

    def __init__(self, length: int, data: bytearray | None = None, pool: BufferPool | None = None) -> None:
        self.length = length
        self.data: bytearray | None = data if data is not None else bytearray(min(length, _FRAME_BODY_FIRST))
        self.pool = pool
        self.filled = 0
        self.in_place = 0

    def __len__(self) -> int:
        return self.filled

    def _reserve(self, n: int) -> None:
        data = self.data
        need = min(self.length, self.filled + n)
        if need <= len(data):
            return
        grown = bytearray(min(self.length, max(need, 2 * len(data))))  # calloc: untouched pages cost nothing
        grown[: self.filled] = memoryview(data)[: self.filled]
        self.data = grown

    def append(self, chunk) -> None:
        n = len(chunk)
        if self.in_place:
            self.in_place -= n
        else:
            self._reserve(n)
            self.data[self.filled : self.filled + n] = chunk
        self.filled += n

    def tail(self) -> memoryview:
        self._reserve(min(len(self.data), _RECV_BYTES))  # room for at least one read (doubling as it fills)
        return memoryview(self.data)[self.filled :]

    def getfile(self) -> FrameBodyStream:
        return FrameBodyStream(self.data, self.filled, self.pool)

    def close(self) -> None:
        self.data = None  # the buffer lives on only in the views parsed out of it


class FrameBodyStream:
    """``wsgi.input`` over a :class:`FrameBody`: a read-only file for any WSGI code, and ``frame_body`` (the
    buffer itself) for the hub, which parses it in place."""

    def __init__(self, data: bytearray, length: int, pool: BufferPool | None = None) -> None:
        self.frame_body = data if length == len(data) else memoryview(data)[:length]
        self._data, self._length, self._pos = data, length, 0
        self._pool = pool

    def recycle(self) -> None:
        """The sender is a verified player: its frame buffer may be reused for its later frames."""
        if self._pool is not None and self._length == len(self._data):
            self._pool.keep(self._data)

    def _end(self, size: int | None) -> int:
        return self._length if size is None or size < 0 else min(self._length, self._pos + size)

    def read(self, size: int | None = -1) -> bytes:
        end = self._end(size)
        chunk = bytes(memoryview(self._data)[self._pos : end])
        self._pos = end
        return chunk

    def readline(self, size: int | None = -1) -> bytes:
        end = self._end(size)
        newline = self._data.find(b"\n", self._pos, end)
        return self.read((newline + 1 if newline >= 0 else end) - self._pos)

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(self)

    def __iter__(self):
        while line := self.readline():
            yield line

    def close(self) -> None:
        pass


# waitress's own errors (bad request line, body or headers too large) -> the service's JSON error codes.
_SERVER_ERROR_CODES = {400: "bad_request", 413: "body_too_large", 431: "headers_too_large", 501: "not_implemented"}


class _Refused(Exception):
    """A request refused from its head by ``authorize_body`` (shaped like waitress's ``utilities.Error``)."""

    def __init__(self, status: int, code: str, message: str, headers: tuple = ()):
        super().__init__(message)
        self.code, self.api_code, self.body, self.headers = status, code, message, tuple(headers)
        self.reason = {401: "Unauthorized", 403: "Forbidden"}.get(status, "Bad Request")


def quick_ack_channel_class(policy: ConnectionPolicy | None = None, client_body_bytes: int | None = None,
                            authorize_body=None):
    """waitress's channel, tuned for Unity: every read ACKed at once, every small response sent in one write.

    Unity sends the request head and the body in two ``Send`` calls on a socket without ``NoDelay``: Nagle holds
    the body until the head is ACKed, and Linux delays that ACK (up to 40 ms) hoping to piggyback it on a response
    that cannot come before the body. ``TCP_QUICKACK`` after each read sends the ACK now.
    waitress hands the response head and the body to the channel separately and sends them as two segments; the
    spec wants one write (2.7), so a head announcing a body is held until the body arrives and joined with it.

    Hardening: each connection carries its own idle limit (``policy``; raised by :func:`trust_connection`) and
    is refused beyond ``policy.per_address`` per remote address; a body over ``client_body_bytes`` to any path
    but the players' is refused (413) from its head, before a byte of it is read, and so is a body whose head
    ``authorize_body(headers)`` finds fault with (it returns ``(status, code, message)`` or None: a client's
    body is not even received before its token is verified); waitress's own errors are the service's JSON
    errors.
    """
    from waitress.channel import HTTPChannel
    from waitress.parser import HTTPRequestParser
    from waitress.receiver import FixedStreamReceiver
    from waitress.task import ErrorTask, WSGITask
    from waitress.utilities import RequestEntityTooLarge

    policy = policy or ConnectionPolicy()
    quickack = getattr(socket, "TCP_QUICKACK", None)
    pool = BufferPool(_FRAME_BODY_POOL, bytearray)  # bytearrays: the form parser searches them in place

    class FrameBodyParser(HTTPRequestParser):
        """waitress's parser; a frame-sized body goes into a buffer of its own instead of waitress's chain of
        buffers (bytes, then a growing ``BytesIO``), which ``wsgi.input.read`` would then copy out again."""

        def __init__(self, adj):
            super().__init__(adj)
            self.started = time.time()  # for the head deadline (apply_connection_policy)

        def parse_header(self, header_plus):
            super().parse_header(header_plus)
            length = self.content_length
            if client_body_bytes is not None and length > client_body_bytes and self.path not in PLAYER_PATHS:
                self.error = RequestEntityTooLarge(
                    f"request body of {length} bytes exceeds the limit of {client_body_bytes} bytes")
                self.completed = True
                return
            if authorize_body is not None and length > 0 and self.path not in PLAYER_PATHS:
                refusal = authorize_body(self.headers)
                if refusal is not None:
                    self.error = _Refused(*refusal)
                    self.completed = True
                    return
            # Up to inbuf_overflow only: above it waitress spills to a file.
            if self.chunked or not _FRAME_BODY_MIN <= length <= self.adj.inbuf_overflow:
                return
            if length >= self.adj.max_request_body_size:
                return  # refused by waitress (413) right after this
            # A recycled buffer (memory already held) if one fits; else one that grows as the bytes arrive.
            self.body_rcv = FixedStreamReceiver(length, FrameBody(length, pool.reuse(length), pool))

    class ConnectionTask(WSGITask):
        def get_environment(self):
            environ = super().get_environment()
            environ[CONNECTION_KEY] = self.channel
            return environ

    class JsonErrorTask(ErrorTask):
        def execute(self):
            error = self.request.error
            code = getattr(error, "api_code", None) or _SERVER_ERROR_CODES.get(error.code, "bad_request")
            message = error.body if isinstance(error, _Refused) else f"{error.reason}: {error.body}"
            body = json.dumps({"error": {"code": code, "message": message}}).encode()
            self.status = f"{error.code} {error.reason}"
            self.response_headers.append(("Content-Type", "application/json"))
            self.response_headers.extend(getattr(error, "headers", ()))
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class QuickAckChannel(HTTPChannel):
        parser_class = FrameBodyParser
        task_class = ConnectionTask
        error_task_class = JsonErrorTask
        _held_head: bytes | None = None
        idle_limit_s = policy.untrusted_idle_s
        verified_player = None  # the channel whose token a request on this connection proved (trust_connection)

        def __init__(self, server, sock, addr, adj, map=None):
            super().__init__(server, sock, addr, adj, map)
            if policy.per_address and isinstance(addr, tuple):
                same = sum(1 for c in list(server.active_channels.values()) if c.addr[:1] == addr[:1])
                if same > policy.per_address:
                    self.will_close = True  # closed by the loop's next turn, before any request is read

        def handle_read(self):
            request = self.request
            body = request.body_rcv.buf if request is not None and request.body_rcv is not None else None
            if isinstance(body, FrameBody) and body.data is not None and not request.completed:
                self._read_into(body)  # the kernel writes the frame straight into its final buffer
            else:
                super().handle_read()
            if quickack is not None and self.socket is not None:
                try:
                    self.socket.setsockopt(socket.IPPROTO_TCP, quickack, 1)
                except OSError:
                    pass

        def _read_into(self, body: FrameBody) -> None:
            """``handle_read`` for a frame body: ``recv_into`` its tail, then let waitress account for the bytes
            as if it had read them (its parser appends them, which only moves the fill mark)."""
            tail = body.tail()
            try:
                n = self.socket.recv_into(tail)
            except BlockingIOError:
                return
            except OSError:
                if self.adj.log_socket_errors:
                    self.logger.exception("Socket error")
                self.handle_close()
                return
            if not n:  # the client closed: as waitress's own read handles it
                self.handle_close()
                self.connected = False
                return
            self.last_activity = time.time()
            body.in_place = n
            try:
                self.received(tail[:n])
            finally:
                body.in_place = 0

        def write_soon(self, data):
            held = self._held_head
            if held is not None:
                self._held_head = None
                if isinstance(data, bytes) and len(data) <= _COALESCE_LIMIT:
                    return super().write_soon(held + data) - len(held)
                super().write_soon(held)
                return super().write_soon(data)
            if (
                isinstance(data, bytes)
                and data.startswith(b"HTTP/1.")
                and data.endswith(b"\r\n\r\n")
                and b"\r\nContent-Length: " in data
                and b"\r\nContent-Length: 0\r\n" not in data
            ):
                self._held_head = data  # the body follows from the same task
                return len(data)
            return super().write_soon(data)

    return QuickAckChannel


def waitress_options(max_players: int, policy: ConnectionPolicy | None = None) -> dict:
    """waitress settings for serving Unity players (also for a service that mounts ``hub.wsgi_app``): a thread
    per blocked ``/train`` plus spare, multi-MiB frames kept in memory. Idle connections are closed by
    :func:`apply_connection_policy` (``channel_timeout`` is only its fallback for a connection of another class)."""
    policy = policy or ConnectionPolicy()
    return {
        "threads": 2 * max_players + 4,
        "outbuf_overflow": _BUFFER_OVERFLOW,
        "inbuf_overflow": _BUFFER_OVERFLOW,
        "channel_timeout": policy.untrusted_idle_s,
        "cleanup_interval": _CLEANUP_INTERVAL_S,
        "recv_bytes": _RECV_BYTES,
    }


def _plain(start_response, status: str, text: str) -> list[bytes]:
    body = text.encode("ascii", "replace")
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


# The hub's refusals, as the service's JSON errors (Unity ignores an error's body; a person reading it does not).
_ERROR_CODES = {400: "bad_request", 403: "unknown_client_token", 404: "not_found", 405: "method_not_allowed",
                411: "length_required"}


def _error(start_response, status: str, text: str) -> list[bytes]:
    code = _ERROR_CODES.get(int(status.split()[0]), "bad_request")
    body = json.dumps({"error": {"code": code, "message": text}}).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


class HubChannel(Protocol):
    """What the hub needs of a player's transport (``transport.wsgi.WsgiTransport``), and all it uses of it."""

    client_token: str  # the token the player's forms carry; the hub routes by it
    accept_any_token: bool  # a private hub's only channel takes any token (a player we did not launch)
    player_connected: bool  # a request with its token has come in
    part_sizes: dict[str, int]  # its forms' part sizes, tried when the next form claims its token

    def verified_request(self, part_sizes: dict[str, int]) -> None:
        """A request's token was verified as this channel's; ``part_sizes``: that form's."""

    def deliver(self, metadata: dict, files: dict) -> bytes | None:
        """The verified form; blocks until the action to answer with (None: the session is stopping)."""

    def fail(self, error: Exception) -> None:
        """A malformed request pinned on this channel's player."""

    def reject(self, message: str) -> None:
        """A wrong token on a private hub before its player was in."""

    def release(self) -> None:
        """End every request blocked in :meth:`deliver` (the hub is closing)."""


class PlayerHub:
    """Routes ``POST /train`` by the form's ``token`` to the registered :class:`HubChannel` (a
    ``transport.wsgi.WsgiTransport``).

    ``PlayerHub()`` serves itself after :meth:`start`; ``PlayerHub(address=(host, port))`` is mounted elsewhere.
    """

    def __init__(self, address: tuple[str, int] | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 max_players: int = 8, owner: HubChannel | None = None,
                 connection_policy: ConnectionPolicy | None = None):  # fmt: skip
        self._external_address = address
        self.connection_policy = connection_policy or ConnectionPolicy()
        self.host, self.port = host, port
        self.max_players = max_players
        self._owner = owner  # a private hub reports unroutable requests to its only channel
        self._channels: dict[str, HubChannel] = {}
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self.rejected_tokens = 0  # requests answered 403
        self.bad_requests = 0  # requests answered 400

    # -- serving ------------------------------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` players connect to (an IP literal: Unity uses ``IPAddress.Parse``)."""
        if self._external_address is not None:
            return self._external_address
        if self._server is None:
            raise RuntimeError("PlayerHub.address before start()")
        return self.host, int(self._server.effective_port)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> PlayerHub:
        """Serve with waitress in a daemon thread (no-op for a mounted hub or when already serving)."""
        if self._external_address is not None or self._server is not None:
            return self
        from waitress import create_server

        self._server = create_server(self.wsgi_app, host=self.host, port=self.port, ident="unirender",
                                     expose_tracebacks=False,
                                     **waitress_options(self.max_players, self.connection_policy))  # fmt: skip
        self._server.channel_class = quick_ack_channel_class(self.connection_policy)
        apply_connection_policy(self._server, self.connection_policy)
        self._thread = threading.Thread(
            target=self._serve, args=(self._server,), name="unirender-player-hub", daemon=True
        )
        self._thread.start()
        return self

    def _serve(self, server) -> None:
        try:
            server.run()
        except Exception:  # sockets closed under the loop by close(): expected then, a bug otherwise
            if self._server is server:
                log.exception("player hub server loop failed")

    def close(self) -> None:
        """Release every blocked request, stop waitress, close all its sockets. Idempotent."""
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            channel.release()
        server, self._server = self._server, None
        if server is None:
            return
        from waitress import wasyncore

        server.task_dispatcher.shutdown(timeout=2)
        # Close every socket (listener, keep-alive channels) from inside the loop thread, so its poll ends now.
        try:
            server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
        except OSError:
            wasyncore.close_all(server._map)
        if self._thread is not None:
            self._thread.join(5)
            if self._thread.is_alive():  # pragma: no cover - the loop only ends once its map is empty
                wasyncore.close_all(server._map)
                self._thread.join(5)
            self._thread = None

    def __enter__(self) -> PlayerHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- routing ------------------------------------------------------------------------------------------
    def register(self, channel: HubChannel) -> None:
        with self._lock:
            self._channels[channel.client_token] = channel

    def unregister(self, channel: HubChannel) -> None:
        with self._lock:
            if self._channels.get(channel.client_token) is channel:
                del self._channels[channel.client_token]

    def wsgi_app(self, environ, start_response):
        """The WSGI application: ``GET /ping`` -> ``pong``; ``POST /train`` -> the next action for that player."""
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/ping":
            return _plain(start_response, "200 OK", "pong")
        if path != "/train":
            return _error(start_response, "404 Not Found", f"no route {path}; players POST /train")
        if method != "POST":
            return _error(start_response, "405 Method Not Allowed", "/train takes POST")
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return self._bad(environ, start_response, "411 Length Required", "POST /train needs a Content-Length",
                             None)
        stream = environ["wsgi.input"]
        body = _read_body(stream, length)
        if len(body) != length:
            return self._bad(environ, start_response, "400 Bad Request", "request body shorter than Content-Length",
                             None)
        content_type = environ.get("CONTENT_TYPE")
        # The sender's own part sizes, if the token it claims is a registered player's; parsed into a copy that
        # is kept only once the parsed form's token is verified (an unverified form changes nothing here).
        delimiter = _form_delimiter(content_type)
        owner = self._owner
        claimed = self._channel_for(_claimed_token(content_type, body, delimiter))
        if claimed is None and owner is not None and owner.accept_any_token:
            claimed = owner  # a player we did not launch: whatever token it sends is its own
        if claimed is None and _count_parts(body, delimiter) > _MAX_FORM_PARTS:  # not parsed, nothing built
            return self._bad(environ, start_response, "400 Bad Request",
                             f"/train form has more than {_MAX_FORM_PARTS} parts", None)
        part_sizes = dict(claimed.part_sizes) if claimed is not None else {}
        token = None
        try:
            fields, files = parse_form(content_type, body, part_sizes=part_sizes)
            token = (fields.get("token") or [None])[0]
            metadata, files, token = payload_parts_from_form(fields, files)
        except ProtocolError as exc:
            return self._bad(environ, start_response, "400 Bad Request", f"bad /train form: {exc}", token, exc)
        channel = self._channel_for(token)
        if channel is None and owner is not None and owner.accept_any_token:
            channel = owner
        if channel is None:
            self.rejected_tokens += 1
            log.warning("rejected POST /train with an unknown client token")
            # A misconfigured player fails fast; once the player is in, no stranger can fail it this way.
            if owner is not None and not owner.player_connected:
                owner.reject(f"the player sent a wrong client token {token!r} (answered 403)")
            return _error(start_response, "403 Forbidden", "unknown client token")
        channel.verified_request(part_sizes)
        trust_connection(environ, self.connection_policy.player_idle_s, player=channel)
        recycle = getattr(stream, "recycle", None)
        if recycle is not None:
            recycle()
        reply = channel.deliver(metadata, files)
        if reply is None:  # the session is stopping: an action-less body, as 5.0.0's stop() sends
            reply = b"{}"
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(reply)))])
        return [reply]

    def _channel_for(self, token: str | None) -> HubChannel | None:
        return self._channels.get(token) if token is not None else None

    def _bad(self, environ, start_response, status: str, text: str, token: str | None,
             exc: Exception | None = None):
        """A malformed request fails the session it can be pinned on: the one its (verified) token names, or the
        player whose verified connection it came on; on a private hub, its only channel until a player is in.
        A stranger's malformed request on a connection of its own fails no one."""
        self.bad_requests += 1
        channel = self._channel_for(token)
        if channel is None:
            connection = environ.get(CONNECTION_KEY)
            channel = getattr(connection, "verified_player", None)
        if channel is None and self._owner is not None and not self._owner.player_connected:
            channel = self._owner
        if channel is not None:
            channel.fail(exc if exc is not None else ProtocolError(text))
        return _error(start_response, status, text)


def _form_delimiter(content_type: str | None) -> bytes | None:
    """The part delimiter of a ``multipart/form-data`` body (None for any other body)."""
    if not content_type or not content_type.startswith("multipart/"):
        return None
    from werkzeug.http import parse_options_header

    boundary = parse_options_header(content_type)[1].get("boundary")
    return b"\r\n--" + boundary.encode("latin-1") if boundary else None


def _count_parts(body, delimiter: bytes | None) -> int:
    """Parts (or urlencoded fields) in a form: one scan, nothing built."""
    return body.count(delimiter) if delimiter is not None else body.count(b"&") + 1


def _claimed_token(content_type: str | None, body, delimiter: bytes | None) -> str | None:
    """The form's ``token`` if it is the last part, as Unity sends it: read from the end of the body without
    scanning the frames before it. Only a claim, to pick whose part sizes to try; the full parse decides."""
    if delimiter is None:
        return None
    end = body.rfind(delimiter + b"--", max(0, len(body) - 4096))
    start = body.rfind(delimiter, max(0, end - 4096), end) if end > 0 else -1
    if start < 0:
        return None
    try:  # the last part alone is a form of its own
        fields, _ = parse_form(content_type, bytes(body[start + 2 : end + len(delimiter) + 2]))
    except ProtocolError:
        return None
    return (fields.get("token") or [None])[0]


def _read_body(stream, length: int) -> bytes | bytearray:
    """Exactly ``length`` bytes (fewer only if the client stopped sending), as ``bytes`` or the frame's own
    ``bytearray`` (:class:`FrameBodyStream`), so parsing is zero-copy."""
    frame = getattr(stream, "frame_body", None)
    if isinstance(frame, bytearray) and len(frame) == length:
        return frame
    data = stream.read(length)
    if len(data) == length:
        return data
    chunks = [data]
    got = len(data)
    while got < length:
        chunk = stream.read(length - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
