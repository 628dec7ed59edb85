"""The service's waitress channel: big response bodies go to the socket directly (server.service_channel_class).

Checked on a real waitress server: every body arrives whole and in order on one keep-alive connection, whether
the socket takes it at once or only a part (a tiny send buffer forces the rest through waitress's own buffer).
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import urllib3
from waitress.server import create_server

from unirender.service.server import _DIRECT_SEND_MIN, service_channel_class

SIZES = [0, 10, _DIRECT_SEND_MIN - 1, _DIRECT_SEND_MIN, 300 * 300 * 4, 3 * 1024 * 1024 + 7]


def _bodies() -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    return {n: rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in SIZES}


@pytest.fixture(params=["default send buffer", "tiny send buffer"])
def server(request):
    bodies = _bodies()

    def app(environ, start_response):
        body = bodies[int(environ["PATH_INFO"].strip("/"))]
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
        return [body]

    srv = create_server(app, host="127.0.0.1", port=0, threads=2)
    srv.channel_class = service_channel_class()
    if request.param == "tiny send buffer":  # accepted sockets inherit it: sendmsg takes only a part
        srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    yield srv.effective_port, bodies
    srv.close()
    thread.join(5)


def test_every_body_arrives_whole_and_in_order_on_one_connection(server):
    port, bodies = server
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1, retries=False)
    for _ in range(3):
        for n in SIZES:
            resp = pool.request("GET", f"/{n}")
            assert resp.status == 200
            assert int(resp.headers["Content-Length"]) == n
            assert resp.data == bodies[n]
    assert pool.num_connections == 1  # keep-alive held throughout


def test_pipelined_requests_keep_their_order(server):
    port, bodies = server
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
