"""How a player hub (and the service around one) runs on waitress: the channel tuned for Unity players, its
settings, and the connection policy.

Why waitress and how it is tuned (docs/service.md): it keeps HTTP/1.1 connections alive and
never adds ``Connection: close`` (werkzeug's server does, which breaks Unity); every ``/train`` blocks a worker
thread until the controller's next action, so threads = 2 x players + 4; frames of several MiB must stay in memory
(``outbuf_overflow``/``inbuf_overflow``), and an idle Unity socket between episodes must not be dropped.

Nothing a request says is trusted before its token is verified (docs/service.md, "Hardening"): a connection is
closed after a few idle seconds until a request on it proves a token (:class:`ConnectionPolicy`), and a frame
body's buffer grows as its bytes arrive, whatever ``Content-Length`` claims, recycled only for a verified player.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from types import MethodType
from typing import Any

from unirender.protocol.pool import BufferPool

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


def trust_connection(environ, idle_s: float, player: Any = None) -> None:
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


def quick_ack_channel_class(policy: ConnectionPolicy | None = None, client_body_bytes=None,
                            authorize_body=None):
    """waitress's channel, tuned for Unity: every read ACKed at once, every small response sent in one write.

    Unity sends the request head and the body in two ``Send`` calls on a socket without ``NoDelay``: Nagle holds
    the body until the head is ACKed, and Linux delays that ACK (up to 40 ms) hoping to piggyback it on a response
    that cannot come before the body. ``TCP_QUICKACK`` after each read sends the ACK now.
    waitress hands the response head and the body to the channel separately and sends them as two segments; the
    spec wants one write (2.7), so a head announcing a body is held until the body arrives and joined with it.

    Hardening: each connection carries its own idle limit (``policy``; raised by :func:`trust_connection`) and
    is refused beyond ``policy.per_address`` per remote address; a body over ``client_body_bytes`` (bytes, or a
    function of the path and method: a build upload's limit is not a step's) to any path
    but the players' is refused (413) from its head, before a byte of it is read, and so is a body whose head
    ``authorize_body(path, length, headers, method=)`` finds fault with (it returns ``(status, code, message)`` or None: a client's
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
            # A function of the path decides for every path (the players' too); a number for the clients' only.
            if callable(client_body_bytes):
                limit = client_body_bytes(self.path, self.command)
            else:
                limit = client_body_bytes if self.path not in PLAYER_PATHS else None
            if limit is not None and length > limit:
                self.error = RequestEntityTooLarge(
                    f"request body of {length} bytes exceeds the limit of {limit} bytes")
                self.completed = True
                return
            if authorize_body is not None and length > 0 and self.path not in PLAYER_PATHS:
                refusal = authorize_body(self.path, length, self.headers, method=self.command)
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

        def finish(self):
            super().finish()
            # A response whose head announced a body that never came (HEAD: waitress sends no body) must not
            # keep its head held: send it now.
            self.channel.release_held_head()

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

        def release_held_head(self) -> None:
            held, self._held_head = self._held_head, None
            if held is not None:
                super().write_soon(held)

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


def stop_waitress(server, thread: Any) -> None:
    """Stop a waitress ``server`` whose loop runs on ``thread`` (or None): its task threads first, then every socket
    (listener, keep-alive channels) closed from inside the loop thread, so its poll ends now."""
    from waitress import wasyncore

    server.task_dispatcher.shutdown(timeout=2)
    try:
        server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
    except OSError:
        wasyncore.close_all(server._map)
    if thread is not None:
        thread.join(5)
        if thread.is_alive():  # pragma: no cover - the loop only ends once its map is empty
            wasyncore.close_all(server._map)
            thread.join(5)
