"""HTTP/1.1 framing for the client's side of any server (the render service, or a proxy before it), sans-I/O.

:func:`request_head` builds a request's head; :func:`parse_response_head` reads a response's status line and
header lines; :func:`body_framing` says how its body is delimited (RFC 9112 6.3: none, ``Content-Length``,
``chunked``, or up to the end of the connection) and :func:`keeps_alive` whether the connection can carry the
next request; :func:`parse_chunk_size` reads a chunk's size line. ``unirender.http_connection`` is the socket
shell around them.

Why not http.client (under urllib3 and requests): it parses every response head with the ``email`` package and
urllib3 adds its own per-request machinery; on two cores that is ~0.2-0.5 ms of each ~3 ms remote step
(``benchmarks/service.py`` measures the HTTP floor both ways). h11 is sans-I/O too, but copies a large body
chunk by chunk and was slower than urllib3 here for a 1 MB response.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from unirender.protocol.errors import HttpFramingError

MAX_RESPONSE_HEAD = 64 * 1024  # as http.client's line limit; a status line and ~20 headers are < 1 KiB
MAX_RESPONSE_HEADERS = 100  # http.client's limit

# RFC 9110 5.6.2 token characters (a header name) and 5.5 field values (no CR, LF or NUL).
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_STATUS_LINE = re.compile(rb"HTTP/(\d)\.(\d) (\d{3})(?: (.*))?")
_BAD_VALUE = re.compile(r"[\r\n\0]")

NO_BODY = "none"  # HEAD, 1xx, 204, 304
CHUNKED = "chunked"
UNTIL_CLOSE = "close"  # neither Content-Length nor chunked: the body ends with the connection


@dataclass(frozen=True)
class ResponseHead:
    """A response's status line and headers; header names as sent (look them up with :meth:`get`)."""

    version: tuple[int, int]
    status: int
    reason: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        """The value of header ``name`` (any case); repeated headers joined with ``", "`` (RFC 9110 5.3)."""
        name = name.lower()
        values = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(values) if values else None

    def tokens(self, name: str) -> list[str]:
        """A comma-separated header's items, lower-cased (``Connection``, ``Transfer-Encoding``)."""
        value = self.get(name)
        return [item.strip().lower() for item in value.split(",") if item.strip()] if value else []


def request_head(method: str, target: str, host: str, headers: dict[str, str], body_length: int | None) -> bytes:
    """``method target HTTP/1.1``, ``Host``, ``headers``, and ``Content-Length`` where there is a body (or the
    method normally has one: ``POST``/``PUT``/``PATCH`` with none send ``Content-Length: 0``).
    Refuses values that would split the head (CR, LF, NUL) and names that are not tokens."""
    if not _TOKEN.fullmatch(method.encode("ascii", "replace")) or any(c in target for c in " \r\n\0"):
        raise ValueError(f"invalid request line: {method!r} {target!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        lines.append(_header_line(name, value if type(value) is str else str(value)))
    if body_length is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {body_length or 0}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@functools.lru_cache(maxsize=1024)  # a client sends the same few headers with every request: checked once
def _header_line(name: str, value: str) -> str:
    if not _TOKEN.fullmatch(name.encode("ascii", "replace")) or _BAD_VALUE.search(value):
        raise ValueError(f"invalid header {name!r}: {value!r}")
    if name.lower() in ("host", "content-length", "transfer-encoding"):
        raise ValueError(f"header {name!r} is set by the connection")
    return f"{name}: {value}"


def parse_response_head(head: bytes) -> ResponseHead:
    """A response head (status line and header lines, CRLF or LF separated, without the blank line)."""
    lines = head.split(b"\n")
    if len(lines) > 1 and lines[-1] == b"":
        lines.pop()  # the last line's own line end
    status_line = lines[0].rstrip(b"\r")
    match = _STATUS_LINE.fullmatch(status_line)
    if match is None:
        raise HttpFramingError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    major, minor, status, reason = match.groups()
    if major != b"1":
        raise HttpFramingError(f"unsupported HTTP version {major.decode()}.{minor.decode()}")
    if len(lines) - 1 > MAX_RESPONSE_HEADERS:
        raise HttpFramingError(f"more than {MAX_RESPONSE_HEADERS} response headers")
    headers = []
    for line in lines[1:]:
        line = line.rstrip(b"\r")
        if line[:1] in (b" ", b"\t"):
            raise HttpFramingError("obsolete line folding in a response header")  # RFC 9112 5.2: may reject
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise HttpFramingError(f"malformed response header line {line[:80]!r}")
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    return ResponseHead((1, int(minor)), int(status), (reason or b"").strip(b" \t").decode("latin-1"), headers)


def body_framing(method: str, head: ResponseHead) -> int | str:
    """How the body after ``head`` ends (RFC 9112 6.3): its length in bytes, :data:`NO_BODY`, :data:`CHUNKED` or
    :data:`UNTIL_CLOSE`. An invalid or conflicting ``Content-Length`` is an error (the response cannot be framed)."""
    if method == "HEAD" or 100 <= head.status < 200 or head.status in (204, 304):
        return NO_BODY
    codings = head.tokens("Transfer-Encoding")
    if codings:  # it overrides Content-Length (6.3 point 3)
        return CHUNKED if codings[-1] == "chunked" else UNTIL_CLOSE
    lengths = {item.strip() for k, v in head.headers if k.lower() == "content-length" for item in v.split(",")}
    if not lengths:
        return UNTIL_CLOSE
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise HttpFramingError(f"invalid Content-Length in the response: {sorted(lengths)}")
    return int(next(iter(lengths)))


def keeps_alive(head: ResponseHead, framing: int | str) -> bool:
    """Whether the connection can carry the next request once this response is read (RFC 9112 9.3)."""
    if framing == UNTIL_CLOSE:
        return False
    connection = head.tokens("Connection")
    if "close" in connection:
        return False
    return head.version >= (1, 1) or "keep-alive" in connection


def parse_chunk_size(line: bytes) -> int:
    """A chunk's size line (hex size, optional ``;extensions``, CRLF) -> its size; 0 ends the body."""
    size = line.split(b";", 1)[0].strip()
    if not size or len(size) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size):
        raise HttpFramingError(f"malformed chunk size line {line[:40]!r}")
    return int(size, 16)


__all__ = [
    "CHUNKED",
    "MAX_RESPONSE_HEAD",
    "MAX_RESPONSE_HEADERS",
    "NO_BODY",
    "UNTIL_CLOSE",
    "ResponseHead",
    "body_framing",
    "keeps_alive",
    "parse_chunk_size",
    "parse_response_head",
    "request_head",
]
