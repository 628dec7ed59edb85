"""HTTP/1.1 framing for Unity's ``POST /train`` (protocol.md 2.2, 2.7, 2.8), both directions, sans-I/O.

Unity's side: :func:`build_train_request` (its exact header block) and :class:`ResponseReader` (how it reads the
answer: 1 KiB header buffer, ``Content-Length``, status ignored). Python's side: :class:`RequestReader`
(incremental request framing on a keep-alive connection, no ``Host`` required, no chunked bodies) and
:func:`build_response` (``Content-Length``, ASCII JSON, never ``Connection: close``).
"""

from __future__ import annotations

from dataclasses import dataclass

from unirender.protocol.errors import (
    FrameTooLargeError,
    HttpFramingError,
    LengthRequiredError,
    TruncatedFrameError,
)

# Unity reads the status line and headers into a fixed 1024-byte buffer (protocol.md 2.2); a response head must fit.
UNITY_RESPONSE_HEAD_LIMIT = 1024
# Unity's request head is ~120 bytes (request line, Content-Length, Content-Type). 16 KiB is h11's default and
# far above any client we serve; a peer that never sends the blank line gets an error, not unbounded buffering.
DEFAULT_MAX_REQUEST_HEAD = 16 * 1024
# A body is one payload: metadata plus raw images, e.g. 12 modalities at 2048x2048x4 B = 192 MiB. 1 GiB leaves
# room for many third-party cameras while refusing a corrupt Content-Length before allocating it.
DEFAULT_MAX_REQUEST_BODY = 1024 * 1024 * 1024

RESPONSE_CONTENT_TYPE = "application/json"


def train_request_head(content_type: str, content_length: int) -> bytes:
    """Unity's header block: request line, ``Content-Length``, then ``WWWForm.headers`` (only Content-Type)."""
    return b"POST /train HTTP/1.1\r\nContent-Length: %d\r\nContent-Type: %s\r\n\r\n" % (
        content_length,
        content_type.encode("ascii"),
    )


def build_train_request(content_type: str, body: bytes) -> bytes:
    """The whole request Unity sends for one emission (it uses two ``Send`` calls: head, then body)."""
    return train_request_head(content_type, len(body)) + body


def response_headers(body: bytes) -> list[tuple[str, str]]:
    """Headers for the action response, for a WSGI ``start_response`` (no ``Connection: close``)."""
    return [("Content-Type", RESPONSE_CONTENT_TYPE), ("Content-Length", str(len(body)))]


def build_response(body: bytes, status: str = "200 OK", content_type: str = RESPONSE_CONTENT_TYPE) -> bytes:
    """``status`` (``200 OK``: an action) with ``Content-Length`` and an ASCII body, as one buffer to send in one
    write (protocol.md 2.7); never ``Connection: close``."""
    if not body.isascii():
        raise HttpFramingError("response body must be ASCII: Unity decodes it with Encoding.ASCII")
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
        status.encode("ascii"),
        content_type.encode("ascii"),
        len(body),
    )
    return head + body


@dataclass
class HttpRequest:
    """One framed request. Header names are lower-cased; ``body`` is a read-only memoryview."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: memoryview


# First size of the buffer of a body whose sender is not trusted: it doubles as bytes arrive, so a Content-Length
# alone reserves nothing (a 1 GiB claim with no body costs 256 KiB).
_UNTRUSTED_BODY_FIRST = 256 * 1024


class _BodyFiller:
    """Collects a body of known length into one buffer: the whole length at once when ``reserve`` (a trusted
    sender), else grown (doubling) as bytes arrive. Filled by copying (:meth:`fill`) or in place
    (:meth:`window` + :meth:`advance`, for ``recv_into``)."""

    def __init__(self, length: int, reserve: bool = True, buffer: bytearray | None = None):
        self.length = length
        if buffer is None:
            buffer = bytearray(length if reserve else min(length, _UNTRUSTED_BODY_FIRST))
        self.buffer = buffer
        self.filled = 0

    def _grow(self, need: int) -> None:
        if need > len(self.buffer):
            grown = bytearray(min(self.length, max(need, 2 * len(self.buffer))))
            grown[: self.filled] = memoryview(self.buffer)[: self.filled]
            self.buffer = grown

    def fill(self, view: memoryview, pos: int) -> int:
        take = min(len(view) - pos, self.length - self.filled)
        self._grow(self.filled + take)
        self.buffer[self.filled : self.filled + take] = view[pos : pos + take]
        self.filled += take
        return pos + take

    def window(self) -> memoryview:
        """The writable rest of the buffer (grown if full): where the next bytes of the body go."""
        self._grow(self.filled + 1)
        return memoryview(self.buffer)[self.filled :]

    def advance(self, n: int) -> None:
        self.filled += n

    @property
    def done(self) -> bool:
        return self.filled == self.length


class RequestReader:
    """Incremental server-side framing of requests on one keep-alive connection.

    ``feed(data)`` returns the requests that ``data`` completes. Bodies are read by ``Content-Length`` exactly;
    ``Transfer-Encoding`` is refused (Unity never sends it). ``end_of_stream()`` raises if the peer closed
    mid-request; a close between requests is normal (Unity drops its socket on scene reset).

    ``trusted``: the peer has proven itself (a verified token), so a body's whole buffer is reserved from its
    ``Content-Length`` at once (from ``pool``, a :class:`~unirender.protocol.pool.BufferPool` of bytearrays, where
    given: a frame body of last step's size reuses a buffer nothing references any more, no page faults); until
    then a body's buffer grows only as its bytes arrive.
    """

    def __init__(self, max_head: int = DEFAULT_MAX_REQUEST_HEAD, max_body: int = DEFAULT_MAX_REQUEST_BODY,
                 trusted: bool = False, pool=None):  # fmt: skip
        self.max_head = max_head
        self.max_body = max_body
        self.trusted = trusted
        self.pool = pool
        self._head = bytearray()
        self._pending: HttpRequest | None = None
        self._body: _BodyFiller | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[HttpRequest]:
        zero_copy = isinstance(data, bytes)
        view = memoryview(data)
        requests: list[HttpRequest] = []
        pos = 0
        while pos < len(view):
            if self._body is not None:
                pos = self._body.fill(view, pos)
                if self._body.done:
                    self._pending.body = memoryview(self._body.buffer).toreadonly()
                    requests.append(self._pending)
                    self._pending = self._body = None
                continue
            # Search only the new bytes (plus 3 of overlap) for the blank line: linear, never rescanning.
            before = len(self._head)
            self._head += view[pos : pos + self.max_head + 4 - before]
            end = self._head.find(b"\r\n\r\n", max(0, before - 3))
            if end < 0:
                if len(self._head) > self.max_head:
                    raise HttpFramingError(
                        f"request head exceeds {self.max_head} bytes without an empty line"
                    )
                pos += len(self._head) - before
                continue
            pos += end + 4 - before
            head_bytes = bytes(self._head[: end + 4])
            self._head.clear()
            request = self._parse_head(head_bytes)
            length = self._content_length(request)
            if length == 0:
                request.body = memoryview(b"")
                requests.append(request)
            elif zero_copy and len(view) - pos >= length:
                request.body = view[pos : pos + length].toreadonly()
                pos += length
                requests.append(request)
            else:
                self._pending = request
                pooled = self.pool.take(length) if self.trusted and self.pool is not None else None
                self._body = _BodyFiller(length, reserve=self.trusted, buffer=pooled)
        return requests

    @property
    def head_pending(self) -> bool:
        """Part of a request head has arrived, not yet its end."""
        return bool(self._head)

    def body_window(self) -> memoryview | None:
        """Where the next bytes of a body being read go (None between bodies), to receive them in place."""
        return self._body.window() if self._body is not None else None

    def body_received(self, n: int) -> HttpRequest | None:
        """``n`` bytes were written into :meth:`body_window`: the request, if its body is now complete."""
        body = self._body
        body.advance(n)
        if not body.done:
            return None
        request = self._pending
        request.body = memoryview(body.buffer).toreadonly()
        self._pending = self._body = None
        return request

    def end_of_stream(self) -> None:
        if self._body is not None:
            raise TruncatedFrameError(
                f"connection closed inside a request body: got {self._body.filled} of {len(self._body.buffer)} bytes"
            )
        if self._head:
            raise TruncatedFrameError(f"connection closed inside a request head ({len(self._head)} bytes)")

    def _parse_head(self, head: bytes) -> HttpRequest:
        lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = lines[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError) as exc:
            raise HttpFramingError(f"malformed request line {lines[0][:100]!r}") from exc
        if not version.startswith("HTTP/1."):
            raise HttpFramingError(f"unsupported HTTP version {version!r} (expected HTTP/1.x)")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, colon, value = line.partition(b":")
            if not colon or not key.strip():
                raise HttpFramingError(f"malformed header line {line[:100]!r}")
            headers[key.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
        return HttpRequest(method, target, version, headers, memoryview(b""))

    def _content_length(self, request: HttpRequest) -> int:
        if "transfer-encoding" in request.headers:
            raise HttpFramingError("Transfer-Encoding is not supported; send Content-Length (as Unity does)")
        raw = request.headers.get("content-length")
        if raw is None:
            if request.method in ("POST", "PUT", "PATCH"):
                raise LengthRequiredError(f"{request.method} {request.target} has no Content-Length header")
            return 0
        if not raw.isdigit():
            raise HttpFramingError(f"invalid Content-Length {raw!r}")
        length = int(raw)
        if length > self.max_body:
            raise FrameTooLargeError(
                f"request body of {length} bytes exceeds the limit of {self.max_body} bytes",
                size=length,
                limit=self.max_body,
            )
        return length


class ResponseReader:
    """Reads responses the way Unity does (protocol.md 2.2): head within 1 KiB, ``Content-Length`` (missing = 0).

    The status code is ignored, like Unity. ``feed(data)`` returns the bodies ``data`` completes.
    """

    def __init__(self, head_limit: int = UNITY_RESPONSE_HEAD_LIMIT):
        self.head_limit = head_limit
        self._head = bytearray()
        self._body: _BodyFiller | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        view = memoryview(data)
        bodies: list[bytes] = []
        pos = 0
        while pos < len(view):
            if self._body is not None:
                pos = self._body.fill(view, pos)
                if self._body.done:
                    bodies.append(bytes(self._body.buffer))
                    self._body = None
                continue
            before = len(self._head)
            self._head += view[pos : pos + self.head_limit - before]
            # Unity only accepts the blank line after at least one byte of head (offset > 0)
            end = self._head.find(b"\r\n\r\n", max(1, before - 3))
            if end < 0:
                if len(self._head) >= self.head_limit:
                    raise HttpFramingError(
                        f"response head does not end within {self.head_limit} bytes (Unity's header buffer)"
                    )
                pos += len(self._head) - before
                continue
            pos += end + 4 - before
            length = self._content_length(bytes(self._head[:end]))
            self._head.clear()
            if length == 0:
                bodies.append(b"")
            else:
                self._body = _BodyFiller(length)
        return bodies

    @staticmethod
    def _content_length(head: bytes) -> int:
        for line in head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                try:
                    return int(value.strip())
                except ValueError as exc:
                    raise HttpFramingError(f"invalid Content-Length {value.strip()!r} in response") from exc
        return 0

    def end_of_stream(self) -> None:
        if self._body is not None:
            raise TruncatedFrameError(
                f"connection closed inside a response body: got {self._body.filled} of {len(self._body.buffer)} bytes"
            )
        if self._head:
            raise TruncatedFrameError(f"connection closed inside a response head ({len(self._head)} bytes)")


__all__ = [
    "HttpRequest",
    "RequestReader",
    "ResponseReader",
    "build_response",
    "build_train_request",
    "response_headers",
    "train_request_head",
]
