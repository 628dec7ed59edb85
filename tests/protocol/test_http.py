"""HTTP framing of Unity's POST /train (protocol.md 2.2, 2.7): exact request bytes, keep-alive reading, responses."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirender.protocol import FrameTooLargeError, HttpFramingError, TruncatedFrameError
from unirender.protocol.http import (
    RequestReader,
    ResponseReader,
    build_response,
    build_train_request,
    response_headers,
)

CT = 'multipart/form-data; boundary="0123456789012345678901234567890123456789"'
# protocol.md 2.2 by hand: request line, Content-Length, then the one WWWForm header; no Host/Connection/Expect.
HAND_REQUEST = (
    b"POST /train HTTP/1.1\r\n"
    b"Content-Length: 5\r\n"
    b'Content-Type: multipart/form-data; boundary="0123456789012345678901234567890123456789"\r\n'
    b"\r\n"
    b"hello"
)


def test_unity_request_is_byte_exact():
    assert build_train_request(CT, b"hello") == HAND_REQUEST


def test_request_reader_keep_alive_without_host():
    stream = HAND_REQUEST + HAND_REQUEST.replace(b"hello", b"world") + b"GET /ping HTTP/1.1\r\n\r\n"
    first, second, ping = RequestReader().feed(stream)
    assert (first.method, first.target, first.version) == ("POST", "/train", "HTTP/1.1")
    assert first.headers == {"content-length": "5", "content-type": CT}
    assert bytes(first.body) == b"hello" and bytes(second.body) == b"world"
    assert first.body.obj is stream and first.body.readonly  # zero-copy when whole
    assert (ping.method, bytes(ping.body)) == ("GET", b"")


@settings(max_examples=50, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=500), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_request_reader_any_fragmentation(bodies, cuts):
    stream = b"".join(build_train_request(CT, body) for body in bodies)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    reader = RequestReader()
    got = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        got += reader.feed(stream[start:end])
    reader.end_of_stream()
    assert [bytes(r.body) for r in got] == bodies


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"POST /train HTTP/1.1\r\n\r\n", HttpFramingError, "has no Content-Length"),
        (
            b"POST /train HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            HttpFramingError,
            "Transfer-Encoding",
        ),
        (b"POST /train HTTP/1.1\r\nContent-Length: -1\r\n\r\n", HttpFramingError, "invalid Content-Length"),
        (
            b"POST /train HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
            FrameTooLargeError,
            "exceeds the limit",
        ),
        (b"POST /train\r\n\r\n", HttpFramingError, "malformed request line"),
        (b"POST /train SPDY/3\r\n\r\n", HttpFramingError, "unsupported HTTP version"),
        (b"POST /train HTTP/1.1\r\nbroken\r\n\r\n", HttpFramingError, "malformed header line"),
        (b"POST /train HTTP/1.1\r\n" + b"X: y\r\n" * 5000, HttpFramingError, "request head exceeds"),
    ],
)
def test_request_reader_errors(data, error, match):
    with pytest.raises(error, match=match):
        RequestReader().feed(data)


def test_request_reader_truncation():
    reader = RequestReader()
    assert reader.feed(HAND_REQUEST[:-2]) == []
    with pytest.raises(TruncatedFrameError, match="inside a request body: got 3 of 5"):
        reader.end_of_stream()
    reader = RequestReader()
    reader.feed(b"POST /tr")
    with pytest.raises(TruncatedFrameError, match="inside a request head"):
        reader.end_of_stream()
    RequestReader().end_of_stream()  # closing between requests is normal


def test_response_bytes():
    body = b'{"action": "Pass", "sequenceId": 1}'
    response = build_response(body)
    head, _, rest = response.partition(b"\r\n\r\n")
    assert rest == body
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and len(head) < 1024
    assert b"Content-Length: %d" % len(body) in head
    assert b"connection" not in head.lower()
    assert dict(response_headers(body))["Content-Length"] == str(len(body))
    with pytest.raises(HttpFramingError, match="ASCII"):
        build_response('{"a": "é"}'.encode())


def test_response_reader_reads_like_unity():
    body = b'{"action": "Pass"}'
    # status ignored, header names in any case, extra headers fine; byte-by-byte arrival
    data = b"HTTP/1.1 500 Whatever\r\nServer: x\r\ncontent-LENGTH: %d\r\n\r\n%s" % (len(body), body)
    reader = ResponseReader()
    got = []
    for i in range(len(data)):
        got += reader.feed(data[i : i + 1])
    assert got == [body]
    two = build_response(b"{}") + build_response(b"[]")
    assert ResponseReader().feed(two) == [b"{}", b"[]"]
    assert ResponseReader().feed(b"HTTP/1.1 200 OK\r\n\r\n") == [b""]  # missing Content-Length = 0


def test_response_reader_errors():
    with pytest.raises(HttpFramingError, match="within 1024 bytes"):
        ResponseReader().feed(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: y\r\n" * 120)
    with pytest.raises(HttpFramingError, match="invalid Content-Length"):
        ResponseReader().feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{}")
    with pytest.raises(TruncatedFrameError, match="got 2 of 4"):
        reader.end_of_stream()
