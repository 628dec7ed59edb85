"""One keep-alive HTTP/1.1 connection: the socket shell around :mod:`unirender.protocol.http_client`.

The client's path to a plain-HTTP service (``unirender.client``; https and proxies go through requests). One
``HttpConnection`` per thread. A request's head and a small body leave in one ``sendall``; the response head is
read line by line from a ``BufferedReader`` and a ``Content-Length`` body with one ``read(n)``, which fills a
single ``bytes`` object straight from the socket (no chunks to join).

Like urllib3 with ``retries=False``: a connection the server closed while it sat idle (or that holds bytes
nobody asked for) is replaced before a request is sent on it; one that fails during a request is closed and the
error raised, never retried (a step is not idempotent); an answer the server sent before it stopped reading the
body (a 413 from the head) is read and returned, not lost to the broken pipe. Errors: :class:`ConnectTimeout` /
:class:`ReadTimeout` (both ``TimeoutError``), ``OSError`` for the network, ``HttpFramingError`` for a response
that cannot be framed.
"""

from __future__ import annotations

import io
import select
import socket

from unirender.protocol.errors import HttpFramingError
from unirender.protocol.http_client import (
    CHUNKED,
    MAX_RESPONSE_HEAD,
    NO_BODY,
    UNTIL_CLOSE,
    ResponseHead,
    body_framing,
    keeps_alive,
    parse_chunk_size,
    parse_response_head,
    request_head,
)

# Bodies up to this size are joined to the head (one segment, one send); bigger ones follow in a second send.
_JOIN_BODY = 64 * 1024
_READ_BUFFER = 64 * 1024


class ConnectTimeout(TimeoutError):
    """The server did not accept the connection in time."""


class ReadTimeout(TimeoutError):
    """The server accepted the request but did not answer (or finish answering) in time."""


class HttpConnection:
    """A keep-alive connection to ``host:port``; not thread-safe (one per thread)."""

    def __init__(self, host: str, port: int, *, timeout: float | None = None):
        self.host, self.port, self.timeout = host, port, timeout
        self.host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._sock: socket.socket | None = None
        self._reader: io.BufferedReader | None = None
        self._poller: select.poll | None = None  # the socket registered for POLLIN (_dropped)
        self.generation = 0  # the owner's mark (unirender.client: which close() it has seen)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the connection unless one is open and usable (raises :class:`ConnectTimeout` or ``OSError``)."""
        if self._sock is not None and not self._dropped():
            return
        self.close()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except TimeoutError as exc:
            raise ConnectTimeout(f"connecting to {self.host_header} timed out after {self.timeout} s") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a head and its body, or a small request
        except OSError:
            pass
        self._sock = sock
        self._reader = io.BufferedReader(socket.SocketIO(sock, "rb"), _READ_BUFFER)
        self._poller = select.poll()  # not select(): it refuses descriptors above 1023, common in a busy process
        self._poller.register(sock, select.POLLIN)

    def _dropped(self) -> bool:
        """An idle keep-alive connection the server closed (or that has unread bytes): not to be reused."""
        try:
            return bool(self._poller.poll(0))  # readable (EOF or stray bytes), hung up or in error
        except OSError:
            return True

    def request(self, method: str, target: str, headers: dict[str, str],
                body: bytes | None = None) -> tuple[ResponseHead, bytes]:
        """Send one request and read its response: (head, body). Opens or reopens the connection as needed;
        closes it after a response that ends it, and on any error."""
        self.connect()
        sock, reader = self._sock, self._reader
        assert sock is not None and reader is not None
        head = request_head(method, target, self.host_header, headers, None if body is None else len(body))
        refused: OSError | None = None
        try:
            try:
                if body and len(body) > _JOIN_BODY:
                    sock.sendall(head)
                    sock.sendall(body)
                else:
                    sock.sendall(head + body if body else head)
            except (BrokenPipeError, ConnectionResetError) as exc:
                refused = exc  # the server may have answered from the head (a 413) and closed: read that
            try:
                while True:
                    response = parse_response_head(self._read_head(reader))
                    if not (100 <= response.status < 200) or response.status == 101:
                        break  # 1xx interim responses (100 Continue, 103 Early Hints) precede the real one
                framing = body_framing(method, response)
                content = self._read_body(reader, framing)
            except (OSError, HttpFramingError):
                if refused is not None:
                    raise refused from None  # no answer after all: the send's error is the one to report
                raise
        except TimeoutError as exc:
            self.close()
            raise ReadTimeout(f"{method} {target}: no complete answer within {self.timeout} s") from exc
        except BaseException:
            self.close()
            raise
        if refused is not None or not keeps_alive(response, framing):
            self.close()
        return response, content

    @staticmethod
    def _read_head(reader: io.BufferedReader) -> bytes:
        lines = []
        size = 0
        while True:
            line = reader.readline(MAX_RESPONSE_HEAD + 1)
            if not line:
                raise ConnectionResetError("the server closed the connection without a complete response head")
            if line in (b"\r\n", b"\n"):
                if lines:
                    return b"".join(lines)
                continue  # RFC 9112 2.2: a client may ignore blank lines before the status line
            size += len(line)
            if size > MAX_RESPONSE_HEAD:
                raise HttpFramingError(f"response head longer than {MAX_RESPONSE_HEAD} bytes")
            if not line.endswith(b"\n"):
                raise ConnectionResetError("the server closed the connection inside the response head")
            lines.append(line)

    @staticmethod
    def _read_exactly(reader: io.BufferedReader, n: int) -> bytes:
        data = reader.read(n)
        if len(data) != n:
            raise ConnectionResetError(f"the server closed the connection {len(data)} bytes into a {n}-byte body")
        return data

    def _read_body(self, reader: io.BufferedReader, framing: int | str) -> bytes:
        if framing == NO_BODY:
            return b""
        if framing == UNTIL_CLOSE:
            return reader.read()
        if framing != CHUNKED:
            return self._read_exactly(reader, framing)  # type: ignore[arg-type]
        pieces = []
        while True:
            line = reader.readline(1024)
            if not line.endswith(b"\n"):
                raise HttpFramingError("malformed or truncated chunk size line")
            size = parse_chunk_size(line)
            if size == 0:
                break
            pieces.append(self._read_exactly(reader, size))
            if reader.readline(3) not in (b"\r\n", b"\n"):
                raise HttpFramingError("a chunk does not end with CRLF")
        for _ in range(MAX_RESPONSE_HEAD):  # trailer fields, up to the blank line; ignored
            line = reader.readline(MAX_RESPONSE_HEAD + 1)
            if line in (b"\r\n", b"\n"):
                return b"".join(pieces)
            if not line.endswith(b"\n"):
                raise HttpFramingError("malformed or truncated chunked trailer")
        raise HttpFramingError("too many trailer lines")

    def close(self) -> None:
        sock, self._sock = self._sock, None
        reader, self._reader = self._reader, None
        self._poller = None
        if reader is not None:
            try:
                reader.close()  # closes its SocketIO, which holds a reference that keeps the socket open
            except (OSError, ValueError):
                pass
        if sock is not None:
            sock.close()


__all__ = ["ConnectTimeout", "HttpConnection", "ReadTimeout"]
