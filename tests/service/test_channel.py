"""The service's waitress channel: big response bodies go to the socket directly (server.service_channel_class).

Checked on a real waitress server: every body arrives whole and in order on one keep-alive connection, whether
the socket takes it at once or only a part (a tiny send buffer forces the rest through waitress's own buffer),
and whether the app returns it as bytes or as a ``GatheredBody`` of pieces (views among them), which is never
joined on the way unless it is small.
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import urllib3
from waitress.server import create_server

from unirender.service.gathered_body import GatheredBody, takes_gathered_body
from unirender.service.server import _DIRECT_SEND_MIN, service_channel_class

SIZES = [0, 10, _DIRECT_SEND_MIN - 1, _DIRECT_SEND_MIN, 300 * 300 * 4, 3 * 1024 * 1024 + 7]


def _bodies() -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    return {n: rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in SIZES}


def _pieces(body: bytes) -> list:
    """``body`` as a frame response's pieces: small bytes, a view of the body, a view of a copy of its end."""
    a = min(7, len(body))
    b, c = max(a, len(body) // 3), max(a, 2 * len(body) // 3)
    return [body[:a], memoryview(body)[a:b], body[b:c], memoryview(bytearray(body[c:]))]


@pytest.fixture(params=[("default send buffer", "bytes"), ("tiny send buffer", "bytes"),
                        ("default send buffer", "gathered"), ("tiny send buffer", "gathered")], ids=" + ".join)
def server(request, monkeypatch):
    bodies = _bodies()
    joins = []
    monkeypatch.setattr(GatheredBody, "join", lambda self: joins.append(len(self)) or b"".join(self.pieces))

    def app(environ, start_response):
        body = bodies[int(environ["PATH_INFO"].strip("/"))]
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
        if request.param[1] == "gathered":
            assert takes_gathered_body(environ)
            return [GatheredBody(_pieces(body))]
        return [body]

    srv = create_server(app, host="127.0.0.1", port=0, threads=2)
    srv.channel_class = service_channel_class()
    if request.param[0] == "tiny send buffer":  # accepted sockets inherit it: sendmsg takes only a part
        srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    yield srv.effective_port, bodies, joins
    srv.close()
    thread.join(5)


def test_a_gathered_body_is_one_bytes_body_to_waitress():
    body = bytes(range(256)) * 300
    gathered = GatheredBody(_pieces(body))
    assert len(gathered) == len(body) and gathered and not GatheredBody([])
    assert gathered[: len(body)] is gathered and gathered[:] is gathered and gathered[: 10**9] is gathered
    assert gathered[: 100] == body[:100] and gathered[5:9] == body[5:9]  # other slices: real bytes
    assert gathered == body and gathered != body[:-1] and gathered.join() == body
    assert GatheredBody([np.arange(4, dtype=np.float32)]).join() == np.arange(4, dtype=np.float32).tobytes()
    assert not takes_gathered_body({})  # a request from any other server gets bytes


def test_every_body_arrives_whole_and_in_order_on_one_connection(server):
    port, bodies, joins = server
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1, retries=False)
    for _ in range(3):
        for n in SIZES:
            resp = pool.request("GET", f"/{n}")
            assert resp.status == 200
            assert int(resp.headers["Content-Length"]) == n
            assert resp.data == bodies[n]
    assert pool.num_connections == 1  # keep-alive held throughout
    # A gathered body is joined only where it is too small to be sent directly (never when empty); here nothing
    # is queued before a response (pipelined ones, below, may be: then it is joined and queued behind).
    assert all(0 < n < _DIRECT_SEND_MIN for n in joins), joins


def test_pipelined_requests_keep_their_order(server):
    port, bodies, _ = server
    order = [SIZES[-1], 10, SIZES[-2], 0, SIZES[-1]]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"".join(f"GET /{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for n in order))
        reader = sock.makefile("rb")
        for n in order:
            assert reader.readline().startswith(b"HTTP/1.1 200")
            length = None
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length == n
            assert reader.read(n) == bodies[n]
