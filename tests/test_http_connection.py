"""The client's keep-alive HTTP/1.1 connection (unirender.http_connection) against real servers on loopback:
waitress (what the service runs) and scripted sockets for what waitress never sends."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import termios
import threading
import time

import pytest

from unirender.http_connection import ConnectTimeout, HttpConnection, ReadTimeout
from unirender.protocol.errors import HttpFramingError


class Scripted:
    """A loopback server answering each connection with ``handler(conn, count)`` (count: connections so far)."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                try:
                    self.handler(conn, self.connections)
                except OSError:
                    pass

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a close alone does not, on Linux)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive()


def wait_closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> None:
    """Until the peer's close (FIN) has arrived on ``sock``: readable, and a peek reads end of stream."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    assert poller.poll(timeout * 1000), f"the peer did not close within {timeout} s"
    assert sock.recv(1, socket.MSG_PEEK) == b"", "the peer sent bytes instead of closing"


def wait_all_acked(sock: socket.socket, timeout: float = 10.0) -> None:
    """Until everything written to ``sock`` has been acknowledged by the peer's kernel (Linux's SIOCOUTQ is 0):
    a close now cannot discard it."""
    deadline = time.monotonic() + timeout
    while struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]:
        assert time.monotonic() < deadline, f"the peer did not acknowledge within {timeout} s"
        time.sleep(0.001)


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(rest) < length:
        rest += conn.recv(65536)
    return head + b"\r\n\r\n" + rest


@pytest.fixture
def scripted():
    servers = []

    def start(handler):
        servers.append(Scripted(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def waitress_url():
    from waitress.server import create_server

    body = bytes(range(256)) * 4096  # 1 MiB, every byte value

    def app(environ, start_response):
        sent = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        if environ["PATH_INFO"] == "/big":
            out = body
        else:
            out = b"%s %s %s %s" % (environ["REQUEST_METHOD"].encode(), environ["PATH_INFO"].encode(),
                                    environ.get("QUERY_STRING", "").encode(), sent)
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(out))),
                                  ("X-Auth", environ.get("HTTP_AUTHORIZATION", ""))])
        return [out]

    server = create_server(app, host="127.0.0.1", port=0, threads=2)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield server.effective_host, server.effective_port, body
    server.close()
    thread.join(5)


def test_requests_share_one_connection_and_bodies_arrive_whole(waitress_url):
    host, port, big = waitress_url
    conn = HttpConnection(host, port, timeout=10)
    try:
        head, content = conn.request("POST", "/echo?x=1", {"Authorization": "Bearer t"}, b'{"action": "Pass"}')
        assert head.status == 200 and content == b'POST /echo x=1 {"action": "Pass"}'
        assert head.get("x-auth") == "Bearer t"
        local_port = conn._sock.getsockname()[1]
        for _ in range(3):
            head, content = conn.request("GET", "/big", {})
            assert content == big and isinstance(content, bytes)
        payload = os.urandom(300_000)  # a body bigger than one send: head and body in two writes
        assert conn.request("PUT", "/echo", {}, payload)[1] == b"PUT /echo  " + payload
        assert conn._sock.getsockname()[1] == local_port  # keep-alive: one connection throughout
    finally:
        conn.close()


def test_a_connection_the_server_closed_while_idle_is_replaced(scripted):
    def handler(conn, count):
        read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n" + str(count).encode())
        # then close while the client sits idle (as the service does with idle clients)

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=5)
    try:
        assert conn.request("GET", "/", {})[1] == b"1"
        wait_closed_by_peer(conn._sock)  # the server's close has arrived: the connection sits closed, idle
        assert conn.request("GET", "/", {})[1] == b"2"  # a new connection, not an error
    finally:
        conn.close()


def test_keep_alive_holds_with_descriptors_above_1023(scripted):
    """The idle check works for any descriptor number (select() would refuse those above 1023, and every
    request would then open a new connection)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit ({hard}) does not reach 1024")

    def handler(conn, count):  # keep-alive, blocking reads: no select() on this side either
        while read_request(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = scripted(handler)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    null = os.open(os.devnull, os.O_RDONLY)
    filler = [null] + [os.dup(null) for _ in range(1030)]  # the connection's socket gets a descriptor above 1023
    conn = HttpConnection("127.0.0.1", server.port, timeout=10)
    try:
        assert conn.request("GET", "/", {})[1] == b"ok" and conn._sock.fileno() > 1023
        first = conn._sock
        assert conn.request("GET", "/", {})[1] == b"ok"
        assert conn._sock is first and server.connections == 1  # reused, not replaced
    finally:
        conn.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connection_close_and_until_close_bodies(scripted):
    def handler(conn, count):
        read_request(conn)
        if count == 1:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=5)
    assert conn.request("GET", "/", {})[1] == b"ok" and not conn.connected
    assert conn.request("GET", "/", {})[1] == b"until the end" and not conn.connected
    assert server.connections == 2


def test_chunked_bodies_interim_responses_and_trailers(scripted):
    def handler(conn, count):
        while read_request(conn):
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: yes\r\n\r\n")

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=5)
    try:
        for _ in range(2):
            head, content = conn.request("POST", "/", {}, b"x")
            assert head.status == 200 and content == b"hello world"
        assert server.connections == 1
    finally:
        conn.close()


@pytest.mark.parametrize("reply, error", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", ConnectionResetError),
    (b"HTTP/1.1 200 OK\r\nContent-Le", ConnectionResetError),
    (b"", ConnectionResetError),
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", HttpFramingError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n", HttpFramingError),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", HttpFramingError),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n", HttpFramingError),
])
def test_broken_responses_raise_and_close(scripted, reply, error):
    def handler(conn, count):
        read_request(conn)
        conn.sendall(reply)

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=5)
    with pytest.raises(error):
        conn.request("GET", "/", {})
    assert not conn.connected


def test_an_answer_sent_before_the_body_was_read_is_returned(scripted):
    """A server that refuses a request from its head (413) and closes without reading the body: the send fails
    (broken pipe or reset) but the answer is there to read, as urllib3 reads it too."""
    def handler(conn, count):
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo big!")
        conn.shutdown(socket.SHUT_WR)
        wait_all_acked(conn)  # the answer is at the client's end; then close with the body unread (a reset)

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=10)
    head, content = conn.request("POST", "/", {}, b"x" * (8 * 2**20))
    assert (head.status, content) == (413, b"too big!") and not conn.connected


def test_timeouts_and_refusals(scripted):
    release = threading.Event()

    def handler(conn, count):
        read_request(conn)
        release.wait(10)  # never answers in time

    server = scripted(handler)
    conn = HttpConnection("127.0.0.1", server.port, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ReadTimeout):
        conn.request("GET", "/", {})
    assert time.monotonic() - started < 3 and not conn.connected
    release.set()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: refused
        with pytest.raises(ConnectionRefusedError):
            HttpConnection("127.0.0.1", s.getsockname()[1], timeout=1).request("GET", "/", {})
    assert issubclass(ConnectTimeout, TimeoutError) and issubclass(ReadTimeout, TimeoutError)


def test_close_releases_the_socket(waitress_url):
    host, port, _ = waitress_url
    conns = [HttpConnection(host, port, timeout=5) for _ in range(5)]
    for conn in conns:
        conn.request("GET", "/echo", {})
    socks = [conn._sock for conn in conns]
    assert all(sock.fileno() >= 0 for sock in socks)
    for conn in conns:
        conn.close()
        conn.close()  # twice is fine
    assert all(sock.fileno() == -1 for sock in socks)  # really closed (no reader left holding it open)
