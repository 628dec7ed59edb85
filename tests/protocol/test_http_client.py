"""The client's HTTP/1.1 framing (protocol.http_client), pure functions over bytes."""

from __future__ import annotations

import http.client
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirender.protocol.errors import HttpFramingError
from unirender.protocol.http_client import (
    CHUNKED,
    NO_BODY,
    UNTIL_CLOSE,
    body_framing,
    keeps_alive,
    parse_chunk_size,
    parse_response_head,
    request_head,
)


def head(*lines: str) -> bytes:
    return "".join(line + "\r\n" for line in lines).encode("latin-1")


def test_request_head_is_what_a_server_parses():
    raw = request_head("POST", "/v1/sessions/s1/step?modalities=rgb", "127.0.0.1:8200",
                       {"Accept": "application/x-msgpack", "Authorization": "Bearer t"}, 25)
    assert raw == (b"POST /v1/sessions/s1/step?modalities=rgb HTTP/1.1\r\nHost: 127.0.0.1:8200\r\n"
                   b"Accept: application/x-msgpack\r\nAuthorization: Bearer t\r\nContent-Length: 25\r\n\r\n")
    assert request_head("GET", "/healthz", "h:1", {}, None) == b"GET /healthz HTTP/1.1\r\nHost: h:1\r\n\r\n"
    assert b"Content-Length: 0\r\n" in request_head("POST", "/x", "h:1", {}, None)  # a POST says it has none


@pytest.mark.parametrize("method, target, headers", [
    ("GET", "/a b", {}),
    ("GET", "/a\r\nX-Injected: 1", {}),
    ("GE T", "/", {}),
    ("GET", "/", {"X-Ok": "fine\r\nX-Injected: 1"}),
    ("GET", "/", {"Bad Name": "v"}),
    ("GET", "/", {"X-Nul": "a\0b"}),
    ("GET", "/", {"Content-Length": "5"}),  # the connection frames the body itself
    ("GET", "/", {"Transfer-Encoding": "chunked"}),
])
def test_request_head_refuses_what_would_split_or_misframe_it(method, target, headers):
    with pytest.raises(ValueError):
        request_head(method, target, "h:1", headers, None)


def test_response_head_fields_and_lookups():
    parsed = parse_response_head(head("HTTP/1.1 404 Not Found", "Content-Type: application/json",
                                      "Set-Cookie: a=1", "set-cookie: b=2", "X-Empty:", "Server-Timing: step;dur=1.2"))
    assert (parsed.version, parsed.status, parsed.reason) == ((1, 1), 404, "Not Found")
    assert parsed.get("content-type") == "application/json" and parsed.get("SET-COOKIE") == "a=1, b=2"
    assert parsed.get("x-empty") == "" and parsed.get("missing") is None
    assert parsed.headers[0] == ("Content-Type", "application/json")  # names as sent
    assert parse_response_head(b"HTTP/1.0 200\n").reason == ""  # LF only, no reason phrase
    assert parse_response_head(b"HTTP/1.1 200 \r\n").status == 200


@pytest.mark.parametrize("raw", [
    b"", b"HTTP/2 200 OK\r\n", b"HTTP/2.0 200 OK\r\n", b"ICY 200 OK\r\n", b"HTTP/1.1 20 OK\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n", b"HTTP/1.1 200 OK\r\nBad Name: x\r\n",
    b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n", b"HTTP/1.1 200 OK\r\n" + b"X: 1\r\n" * 101,
])
def test_malformed_response_heads_are_errors(raw):
    with pytest.raises(HttpFramingError):
        parse_response_head(raw)


@pytest.mark.parametrize("method, lines, framing, alive", [
    ("GET", ["HTTP/1.1 200 OK", "Content-Length: 12"], 12, True),
    ("GET", ["HTTP/1.1 200 OK", "Content-Length: 12", "Content-Length: 12"], 12, True),  # the same twice
    ("GET", ["HTTP/1.1 200 OK", "Content-Length: 12, 12"], 12, True),
    ("GET", ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked"], CHUNKED, True),
    ("GET", ["HTTP/1.1 200 OK", "Transfer-Encoding: gzip, chunked", "Content-Length: 3"], CHUNKED, True),
    ("GET", ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked, gzip"], UNTIL_CLOSE, False),
    ("GET", ["HTTP/1.1 200 OK"], UNTIL_CLOSE, False),
    ("HEAD", ["HTTP/1.1 200 OK", "Content-Length: 12"], NO_BODY, True),
    ("GET", ["HTTP/1.1 204 No Content"], NO_BODY, True),
    ("GET", ["HTTP/1.1 304 Not Modified", "Content-Length: 12"], NO_BODY, True),
    ("GET", ["HTTP/1.1 100 Continue"], NO_BODY, True),
    ("GET", ["HTTP/1.1 200 OK", "Content-Length: 0", "Connection: close"], 0, False),
    ("GET", ["HTTP/1.1 200 OK", "Content-Length: 0", "Connection: Keep-Alive, CLOSE"], 0, False),
    ("GET", ["HTTP/1.0 200 OK", "Content-Length: 3"], 3, False),
    ("GET", ["HTTP/1.0 200 OK", "Content-Length: 3", "Connection: keep-alive"], 3, True),
])
def test_body_framing_and_keep_alive(method, lines, framing, alive):
    parsed = parse_response_head(head(*lines))
    assert body_framing(method, parsed) == framing
    assert keeps_alive(parsed, framing) is alive


@pytest.mark.parametrize("length", ["-1", "1e3", "0x10", "12, 13", " ", "12a"])
def test_bad_content_lengths_cannot_be_framed(length):
    parsed = parse_response_head(head("HTTP/1.1 200 OK", f"Content-Length: {length}"))
    with pytest.raises(HttpFramingError):
        body_framing("GET", parsed)


def test_chunk_size_lines():
    assert parse_chunk_size(b"1a\r\n") == 26 and parse_chunk_size(b"0\r\n") == 0
    assert parse_chunk_size(b"FF;name=value\r\n") == 255 and parse_chunk_size(b"10 \n") == 16
    for bad in (b"\r\n", b"-1\r\n", b"g\r\n", b"1" * 17 + b"\r\n", b"0x10\r\n"):
        with pytest.raises(HttpFramingError):
            parse_chunk_size(bad)


@settings(max_examples=500, deadline=None)
@given(status=st.integers(200, 599), reason=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
       headers=st.lists(st.tuples(st.from_regex(r"[A-Za-z][A-Za-z0-9\-]{0,15}", fullmatch=True),
                                  st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30)),
                        max_size=10))
def test_heads_parse_as_http_client_parses_them(status, reason, headers):
    """Any well-formed final (non-1xx: http.client skips those) head reads as the standard library's http.client
    reads it."""
    raw = head(f"HTTP/1.1 {status} {reason}".rstrip(" ") if reason else f"HTTP/1.1 {status}",
               *(f"{k}: {v}" for k, v in headers))
    ours = parse_response_head(raw)

    class Sock:
        def makefile(self, *args, **kwargs):
            return io.BytesIO(raw + b"\r\n")

    theirs = http.client.HTTPResponse(Sock())
    theirs.begin()
    assert ours.status == theirs.status and ours.reason == theirs.reason
    assert [(k, v) for k, v in ours.headers] == [(k, v.strip()) for k, v in theirs.getheaders()]
