"""The private WSGI fast path: one player's HTTP socket served from the controller's own thread.

A :class:`DirectWsgiTransport` listens on 127.0.0.1 for exactly one player it owns (a Controller without a shared
``player_hub``). ``receive()`` waits on the listener, the player's keep-alive connection(s) and the child's pidfd
with one ``select``, frames requests with the sans-I/O :class:`~unirender.protocol.http.RequestReader` (frame bodies
received in place with ``recv_into``) and parses the form in the same thread; ``send()`` writes the action as the
response. No WSGI server, no thread hand-off per step (the :class:`~unirender.transport.hub.PlayerHub` on waitress
stays for the service and shared ports).

The wire behaviour is the hub's (tested on both paths in ``tests/transport/test_wsgi_server.py``): keep-alive
responses that never say ``Connection: close``; ``GET /ping``; a wrong token answered 403 with the hub's JSON
error, and before the player is in the session fails as not trusted; a malformed form answered 400 and pinned on
the player only when it is the player's (its token, a verified connection, or before the player is in); crash
detection through the child's pidfd, hang detection by the caller's timeout. Nothing a request says is trusted
before its token is verified: a body's buffer grows as its bytes arrive (``RequestReader(trusted=False)``), part
sizes are learnt only from verified forms, an unknown sender's form with too many parts is refused unparsed, and a
connection that has not proven a token is closed after ``ConnectionPolicy.untrusted_idle_s`` idle (or with its
head incomplete that long). Connections are only served while the controller waits in ``receive()`` (a player
only sends then); at most ``_MAX_CONNECTIONS`` are open, the oldest unverified one closed to make room.
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import time

from unirender.errors import PlayerError
from unirender.protocol import Payload, ProtocolError
from unirender.protocol.errors import FrameTooLargeError, HttpFramingError, LengthRequiredError
from unirender.protocol.http import HttpRequest, RequestReader, build_response
from unirender.protocol.pool import BufferPool
from unirender.protocol.state import encode_json_action
from unirender.transport.base import WATCH_PERIOD_S, Transport, deadline_after
from unirender.transport.hub import (
    MAX_FORM_PARTS,
    PART_SIZES_MAX,
    claimed_token,
    count_parts,
    error_body,
    form_delimiter,
    train_form,
)
from unirender.transport.serving import ConnectionPolicy
from unirender.transport.wsgi import wsgi_player_env

log = logging.getLogger(__name__)

# One player keeps one keep-alive connection and opens a new one on each scene reset (the old one is dropped, not
# closed, until the player's GC closes it); 16 leaves room for those and a few strangers.
_MAX_CONNECTIONS = 16
# Bytes asked of recv() for a request head: Unity's head is ~120 bytes and its body follows it at once, so one
# call usually brings the head and a body's first part; the rest of a frame body goes straight into its buffer.
_HEAD_RECV = 64 * 1024
# An action is a few hundred bytes and the player's socket buffer takes it whole; a player that stops reading
# anyway must not block the controller forever.
_SEND_TIMEOUT_S = 30.0
_BODY_POOL = 4
_PING = build_response(b"pong", "200 OK", "text/plain")
_RELEASE = b"{}"  # the action-less body answering a request pending at stop(), as 5.0.0's stop() sends


class _Connection:
    """One accepted socket: its request framing and what it has proven."""

    __slots__ = ("sock", "reader", "verified", "last_activity", "head_started")

    def __init__(self, sock: socket.socket, now: float, pool: BufferPool):
        self.sock = sock
        self.reader = RequestReader(pool=pool)  # the pool serves its bodies once it is trusted
        self.verified = False  # a request on it carried this player's token
        self.last_activity = now
        self.head_started: float | None = None  # when a request head that is not yet complete began


class _Refused(Exception):
    """A request answered with an error that ends nothing for the session (the connection may be closed)."""


class DirectWsgiTransport(Transport):
    """Python's end of the WSGI transport for one private player, served in the caller's thread (see module doc).

    ``accept_any_token``: for a player we did not launch (``Controller(start_unity=False)``): it was given no
    token, so any token is its own."""

    server_type = "WSGI"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, accept_any_token: bool = False,
                 connection_policy: ConnectionPolicy | None = None):  # fmt: skip
        super().__init__()
        self.host, self.port = host, port
        self.accept_any_token = accept_any_token
        self.connection_policy = connection_policy or ConnectionPolicy()
        self.part_sizes: dict[str, int] = {}  # this player's form part sizes, learnt from its verified forms
        self.player_connected = False
        self.rejected_tokens = 0  # requests answered 403
        self.bad_requests = 0  # requests answered 400/411/413
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._connections: dict[socket.socket, _Connection] = {}
        self._pending: _Connection | None = None  # the connection whose request our next send() answers
        self._backlog: collections.deque[tuple[_Connection, HttpRequest]] = collections.deque()
        self._watched_pidfd: int | None = None
        # The player's frame bodies, recycled once no event holds them (as the hub's; the last event usually
        # still holds one, a Reset's new connection may hold another).
        self._pool = BufferPool(_BODY_POOL, bytearray)

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(_MAX_CONNECTIONS)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self.player_connected = False

    @property
    def address(self) -> tuple[str, int]:
        if self._listener is None:
            raise RuntimeError("DirectWsgiTransport.address before start()")
        host, port = self._listener.getsockname()[:2]
        return host, port

    def player_env(self) -> dict[str, str]:
        return wsgi_player_env(self.address, self.client_token)

    def stop(self) -> None:
        """Answer a pending request with an empty action, close every socket. Idempotent."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.sock.sendall(build_response(_RELEASE))
            except OSError:
                pass
        for connection in list(self._connections.values()):
            self._close(connection)
        self._backlog.clear()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._watched_pidfd = None
        self._close_pidfd()

    # -- Python -> player ---------------------------------------------------------------------------------
    def send(self, action: dict) -> dict:
        connection = self._pending
        if connection is None:
            raise RuntimeError("DirectWsgiTransport.send() without a pending /train request: receive() first")
        prepared = self._prepare(action)
        self._pending = None
        try:
            connection.sock.sendall(build_response(encode_json_action(prepared)))
        except OSError:  # the player is gone: receive() reports its exit (or its silence)
            self._close(connection)
        return prepared

    # -- player -> Python ---------------------------------------------------------------------------------
    def receive(self, timeout: float | None) -> Payload:
        if self._selector is None:
            raise RuntimeError("DirectWsgiTransport.receive() before start()")
        deadline = deadline_after(timeout)
        while self._backlog:
            payload = self._handle(*self._backlog.popleft())
            if payload is not None:
                return payload
        self._watch_pidfd()
        while True:
            wait = WATCH_PERIOD_S if self._watched_pidfd is None else 1.0  # pidfd: the kernel says when
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            exited = False
            for key, _ in self._selector.select(wait):
                if key.data is None:
                    self._accept()
                elif key.data == "exit":
                    exited = True
                else:
                    payload = self._serve(key.data)
                    if payload is not None:
                        return payload
            now = time.monotonic()
            self._close_idle(now)
            if exited or self._exited():
                what = "exited" if self.protocol.previous else "exited before connecting"
                raise self._crash_error(what)
            if deadline is not None and now >= deadline:
                connected = self.protocol.previous is not None
                what = "did not answer" if connected else "did not connect (no POST /train)"
                raise self._timeout_error(what, timeout)

    # -- serving ------------------------------------------------------------------------------------------
    def _watch_pidfd(self) -> None:
        if self._watched_pidfd is not None and self._watched_pidfd != self._pidfd:
            try:  # attach() replaced (and closed) the pidfd watched so far; its number may come back
                self._selector.unregister(self._watched_pidfd)
            except (KeyError, ValueError):
                pass
            self._watched_pidfd = None
        if self._pidfd is not None and self._watched_pidfd is None:
            self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")
            self._watched_pidfd = self._pidfd

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:  # the peer gave up before we took it
            return
        if len(self._connections) >= _MAX_CONNECTIONS:
            strangers = [c for c in self._connections.values() if not c.verified and c is not self._pending]
            if not strangers:
                sock.close()
                return
            self._close(min(strangers, key=lambda c: c.last_activity))
        sock.setblocking(True)
        sock.settimeout(_SEND_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(sock, time.monotonic(), self._pool)
        self._connections[sock] = connection
        self._selector.register(sock, selectors.EVENT_READ, connection)

    def _serve(self, connection: _Connection) -> Payload | None:
        """Read what arrived on ``connection`` and handle the requests it completes (the first payload wins; any
        request after it waits in the backlog for the next receive)."""
        reader = connection.reader
        try:
            window = reader.body_window()
            if window is not None:
                n = connection.sock.recv_into(window)
                requests = [] if n == 0 else [r for r in (reader.body_received(n),) if r is not None]
            else:
                data = connection.sock.recv(_HEAD_RECV)
                n = len(data)
                requests = reader.feed(data) if n else []
        except OSError:
            n, requests = 0, []
        except LengthRequiredError as exc:
            return self._refuse_framing(connection, "411 Length Required", str(exc), pin=True)
        except FrameTooLargeError as exc:
            return self._refuse_framing(connection, "413 Payload Too Large", str(exc))
        except HttpFramingError as exc:
            return self._refuse_framing(connection, "400 Bad Request", str(exc))
        if n == 0:  # closed by the peer (Unity drops its socket on reset; a crash is seen on the pidfd)
            self._close(connection)
            return None
        now = time.monotonic()
        connection.last_activity = now
        if reader.head_pending:
            if connection.head_started is None:
                connection.head_started = now
        else:
            connection.head_started = None
        for index, request in enumerate(requests):
            payload = self._handle(connection, request)
            if payload is not None:
                self._backlog.extend((connection, later) for later in requests[index + 1 :])
                return payload
        return None

    def _handle(self, connection: _Connection, request: HttpRequest) -> Payload | None:
        """One framed request: answered here, or (a verified ``/train`` form) the payload to return."""
        path = request.target.partition("?")[0]
        if path == "/ping":
            self._respond(connection, _PING)
            return None
        if path != "/train":
            return self._refuse(connection, "404 Not Found", f"no route {path}; players POST /train")
        if request.method != "POST":
            return self._refuse(connection, "405 Method Not Allowed", "/train takes POST")
        content_type = request.headers.get("content-type")
        body = _body_bytes(request.body)
        delimiter = form_delimiter(content_type)
        claims_ours = self.accept_any_token or claimed_token(content_type, body, delimiter) == self.client_token
        if not claims_ours and count_parts(body, delimiter) > MAX_FORM_PARTS:  # not parsed, nothing built
            return self._bad(connection, "400 Bad Request", f"/train form has more than {MAX_FORM_PARTS} parts",
                             None)  # fmt: skip
        part_sizes = dict(self.part_sizes) if claims_ours else {}
        try:
            metadata, files, token = train_form(content_type, body, part_sizes)
        except ProtocolError as exc:
            return self._bad(connection, "400 Bad Request", f"bad /train form: {exc}", getattr(exc, "token", None),
                             exc)
        if not (self.accept_any_token or token == self.client_token):
            self.rejected_tokens += 1
            log.warning("rejected POST /train with an unknown client token")
            self._respond(connection, build_response(error_body("403 Forbidden", "unknown client token"),
                                                     "403 Forbidden"))  # fmt: skip
            if not self.player_connected:  # a misconfigured player fails fast; once it is in, no stranger can
                process = self.process
                raise PlayerError(
                    f"the player sent a wrong client token {token!r} (answered 403); the player is not trusted",
                    log_path=process.log_path if process else None,
                    log_tail=process.log_tail() if process else "",
                )
            return None
        self.player_connected = True
        if len(part_sizes) <= PART_SIZES_MAX:
            self.part_sizes = part_sizes
        connection.verified = True
        connection.reader.trusted = True  # its next bodies get their whole buffer at once
        self._pending = connection
        return self.protocol.accept(metadata, files)

    def _respond(self, connection: _Connection, response: bytes) -> None:
        try:
            connection.sock.sendall(response)
        except OSError:
            self._close(connection)

    def _refuse(self, connection: _Connection, status: str, text: str) -> None:
        self._respond(connection, build_response(error_body(status, text), status))
        return None

    def _refuse_framing(self, connection: _Connection, status: str, text: str, pin: bool = False) -> None:
        """A request that cannot be framed: answered, and its connection closed (its bytes cannot be resynced).
        Only a missing ``Content-Length`` is the app's to judge (the hub answers it, a WSGI server the rest)."""
        try:
            if pin:
                self._bad(connection, status, text, None)  # raises when pinned on the player
            else:
                self._refuse(connection, status, text)
        finally:
            self._close(connection)
        return None

    def _bad(self, connection: _Connection, status: str, text: str, token: str | None,
             exc: Exception | None = None) -> None:  # fmt: skip
        """Answer a malformed request; it fails the session when pinned on the player (as the hub's ``_bad``):
        its token is the player's, it came on the player's verified connection, or the player is not in yet."""
        self.bad_requests += 1
        self._refuse(connection, status, text)
        ours = token is not None and token == self.client_token
        if ours or connection.verified or not self.player_connected:
            raise exc if exc is not None else ProtocolError(text)
        return None

    def _close_idle(self, now: float) -> None:
        """Close connections idle past their limit, and any whose request head is incomplete too long."""
        policy = self.connection_policy
        for connection in list(self._connections.values()):
            if connection is self._pending:
                continue
            limit = policy.player_idle_s if connection.verified else policy.untrusted_idle_s
            started = connection.head_started
            if connection.last_activity < now - limit or (
                started is not None and started < now - policy.untrusted_idle_s
            ):
                self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if self._connections.pop(connection.sock, None) is None:
            return
        if self._selector is not None:
            try:
                self._selector.unregister(connection.sock)
            except (KeyError, ValueError):
                pass
        connection.sock.close()
        if self._pending is connection:
            self._pending = None


def _body_bytes(body: memoryview) -> bytes | bytearray:
    """A request body as ``bytes``/``bytearray`` (the form parser's scans need ``find``): a frame body's own
    buffer without copying, a small body received within its head's ``recv`` copied."""
    owner = body.obj
    if isinstance(owner, bytearray) and len(owner) == body.nbytes:
        return owner
    return bytes(body)
