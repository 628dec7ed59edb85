"""``PlayerHub``: one WSGI endpoint (``/train``, ``/ping``) for many players, each routed to its session by token.

The hub either serves itself (waitress, in a thread, on 127.0.0.1 and an ephemeral port) or is mounted into
another WSGI application as ``hub.wsgi_app`` (the service mounts it so players reach the service's own port; then
``PlayerHub(address=(host, port))`` says where that is, for ``AI2THOR_HOST``/``AI2THOR_PORT``).

Why waitress and how it is tuned (``shared/docs/serving-and-scale.md``): it keeps HTTP/1.1 connections alive and
never adds ``Connection: close`` (werkzeug's server does, which breaks Unity); every ``/train`` blocks a worker
thread until the controller's next action, so threads = 2 x players + 4; frames of several MiB must stay in memory
(``outbuf_overflow``/``inbuf_overflow``), and an idle Unity socket between episodes must not be dropped
(``channel_timeout``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING

from unirender.protocol import ProtocolError
from unirender.protocol.multipart import form_payload_parts, parse_form
from unirender.protocol.pool import BufferPool

if TYPE_CHECKING:
    from unirender.transport.wsgi import WsgiServer

log = logging.getLogger(__name__)

_BUFFER_OVERFLOW = 64 * 1024 * 1024  # 1024x1024 rgb+depth+ids is ~11 MiB; 4 such payloads stay in memory
# waitress reads 8 KiB per call by default: 1,400 loop turns for one 11 MiB frame. Not 1 MiB either: each recv()
# allocates a bytes object of this size and shrinks it; at 1 MiB glibc serves that with a fresh mmap every time
# (580 page faults and ~2 ms of system time per 300x300 rgb+depth+ids step, measured); 256 KiB reuses heap memory.
_RECV_BYTES = 256 * 1024
_IDLE_CHANNEL_TIMEOUT_S = 24 * 3600  # a Unity socket idles between episodes; waitress only closes idle ones


_COALESCE_LIMIT = 64 * 1024  # a held response head is joined with a body up to this size (copying more costs more)
_FRAME_BODY_MIN = 64 * 1024  # request bodies at least this big (frames) are received straight into one buffer
_FRAME_BODY_POOL = 4  # recycled frame buffers per server (the last event usually still holds one)


class FrameBody:
    """A request body received into one buffer of its own (the subset of waitress's buffer API its
    ``FixedStreamReceiver`` and request use). ``in_place`` counts bytes the channel already wrote into the tail
    with ``recv_into``: appending them only moves the fill mark."""

    def __init__(self, data: bytearray) -> None:
        self.data: bytearray | None = data
        self.filled = 0
        self.in_place = 0

    def __len__(self) -> int:
        return self.filled

    def append(self, chunk) -> None:
        n = len(chunk)
        if self.in_place:
            self.in_place -= n
        else:
            self.data[self.filled : self.filled + n] = chunk
        self.filled += n

    def tail(self) -> memoryview:
        return memoryview(self.data)[self.filled :]

    def getfile(self) -> FrameBodyStream:
        return FrameBodyStream(self.data, self.filled)

    def close(self) -> None:
        self.data = None  # the buffer lives on only in the views parsed out of it


class FrameBodyStream:
    """``wsgi.input`` over a :class:`FrameBody`: a read-only file for any WSGI code, and ``frame_body`` (the
    buffer itself) for the hub, which parses it in place."""

    def __init__(self, data: bytearray, length: int) -> None:
        self.frame_body = data if length == len(data) else memoryview(data)[:length]
        self._data, self._length, self._pos = data, length, 0

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


def quick_ack_channel_class():
    """waitress's channel, tuned for Unity: every read ACKed at once, every small response sent in one write.

    Unity sends the request head and the body in two ``Send`` calls on a socket without ``NoDelay``: Nagle holds
    the body until the head is ACKed, and Linux delays that ACK (up to 40 ms) hoping to piggyback it on a response
    that cannot come before the body. ``TCP_QUICKACK`` after each read sends the ACK now.
    waitress hands the response head and the body to the channel separately and sends them as two segments; the
    spec wants one write (2.7), so a head announcing a body is held until the body arrives and joined with it.
    """
    from waitress.channel import HTTPChannel
    from waitress.parser import HTTPRequestParser
    from waitress.receiver import FixedStreamReceiver

    quickack = getattr(socket, "TCP_QUICKACK", None)
    pool = BufferPool(_FRAME_BODY_POOL, bytearray)  # bytearrays: the form parser searches them in place

    class FrameBodyParser(HTTPRequestParser):
        """waitress's parser; a frame-sized body goes into a buffer of its own instead of waitress's chain of
        buffers (bytes, then a growing ``BytesIO``), which ``wsgi.input.read`` would then copy out again."""

        def parse_header(self, header_plus):
            super().parse_header(header_plus)
            length = self.content_length
            # Up to inbuf_overflow only: above it waitress spills to a file, and a bogus Content-Length must not
            # reserve more memory than waitress itself would hold for one request.
            if self.chunked or not _FRAME_BODY_MIN <= length <= self.adj.inbuf_overflow:
                return
            if length >= self.adj.max_request_body_size:
                return  # refused by waitress (413) right after this
            try:
                self.body_rcv = FixedStreamReceiver(length, FrameBody(pool.take(length)))
            except MemoryError:  # waitress's own buffers grow as the bytes arrive instead
                pass

    class QuickAckChannel(HTTPChannel):
        parser_class = FrameBodyParser
        _held_head: bytes | None = None

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


def waitress_options(max_players: int) -> dict:
    """waitress settings for serving Unity players (also for a service that mounts ``hub.wsgi_app``): a thread
    per blocked ``/train`` plus spare, multi-MiB frames kept in memory, idle sockets kept open."""
    return {
        "threads": 2 * max_players + 4,
        "outbuf_overflow": _BUFFER_OVERFLOW,
        "inbuf_overflow": _BUFFER_OVERFLOW,
        "channel_timeout": _IDLE_CHANNEL_TIMEOUT_S,
        "recv_bytes": _RECV_BYTES,
    }


def _plain(start_response, status: str, text: str) -> list[bytes]:
    body = text.encode("ascii", "replace")
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


class PlayerHub:
    """Routes ``POST /train`` by the form's ``token`` to the registered :class:`WsgiServer`.

    ``PlayerHub()`` serves itself after :meth:`start`; ``PlayerHub(address=(host, port))`` is mounted elsewhere.
    """

    def __init__(self, address: tuple[str, int] | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 max_players: int = 8, owner: WsgiServer | None = None):  # fmt: skip
        self._external_address = address
        self.host, self.port = host, port
        self.max_players = max_players
        self._owner = owner  # a private hub reports unroutable requests to its only channel
        self._channels: dict[str, WsgiServer] = {}
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self._part_sizes: dict[str, int] = {}  # frame sizes by form field, so parsing skips the boundary scan
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
                                     expose_tracebacks=False, **waitress_options(self.max_players))  # fmt: skip
        self._server.channel_class = quick_ack_channel_class()
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
            channel._release_pending()
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
    def register(self, channel: WsgiServer) -> None:
        with self._lock:
            self._channels[channel.client_token] = channel

    def unregister(self, channel: WsgiServer) -> None:
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
            return _plain(start_response, "404 Not Found", f"no route {path}; players POST /train")
        if method != "POST":
            return _plain(start_response, "405 Method Not Allowed", "/train takes POST")
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return self._bad(start_response, "411 Length Required", "POST /train needs a Content-Length", None)
        body = _read_body(environ["wsgi.input"], length)
        if len(body) != length:
            return self._bad(start_response, "400 Bad Request", "request body shorter than Content-Length", None)
        token = None
        try:
            fields, files = parse_form(environ.get("CONTENT_TYPE"), body, part_sizes=self._part_sizes)
            token = (fields.get("token") or [None])[0]
            metadata, files, token = form_payload_parts(fields, files)  # metadata decoded when read
        except ProtocolError as exc:
            return self._bad(start_response, "400 Bad Request", f"bad /train form: {exc}", token, exc)
        channel = self._channels.get(token) if token is not None else None
        if channel is None and self._owner is not None and self._owner.accept_any_token:
            channel = self._owner
        if channel is None:
            self.rejected_tokens += 1
            log.warning("rejected POST /train with an unknown client token")
            if self._owner is not None:
                self._owner._reject(f"the player sent a wrong client token {token!r} (answered 403)")
            return _plain(start_response, "403 Forbidden", "unknown client token")
        reply = channel._exchange(metadata, files)
        if reply is None:  # the session is stopping: an action-less body, as 5.0.0's stop() sends
            reply = b"{}"
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(reply)))])
        return [reply]

    def _bad(self, start_response, status: str, text: str, token: str | None, exc: Exception | None = None):
        self.bad_requests += 1
        channel = (self._channels.get(token) if token is not None else None) or self._owner
        if channel is not None:
            channel._fail(exc if exc is not None else ProtocolError(text))
        return _plain(start_response, status, text)


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
