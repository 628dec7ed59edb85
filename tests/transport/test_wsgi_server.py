"""WsgiServer and PlayerHub against raw sockets speaking exactly like Unity (protocol.md 2.2, 2.7, 2.8).

The wire-behaviour tests run on both paths of a private player: the waitress ``PlayerHub`` (``hub``) and the
fast path served in the controller's thread (``direct``, ``transport.direct.DirectWsgiTransport``)."""

from __future__ import annotations

import json
import re
import socket
import threading

import pytest
from waitress import create_server, wasyncore

from fixtures.fake_player import wwwform
from unirender.errors import PlayerError
from unirender.protocol import MultipartError
from unirender.transport import DirectWsgiTransport, PlayerHub, WsgiServer

PATHS = {"hub": WsgiServer, "direct": DirectWsgiTransport}


def metadata(seq: int) -> dict:
    return {"agents": [{"screenWidth": 2, "screenHeight": 1, "lastActionSuccess": True}], "sequenceId": seq,
            "activeAgentId": 0, "thirdPartyCameras": None}  # fmt: skip


class UnitySocket:
    """Unity's HTTP client: one socket, head and body in two sends, 1 KiB header buffer, Content-Length."""

    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=10)
        self.heads: list[bytes] = []

    def post(self, token: str, seq: int, image: bytes | None = b"\x01\x02\x03\x04\x05\x06", raw_body=None):
        fields = [("metadata", json.dumps(metadata(seq)).encode(), False)]
        if image is not None:
            fields.append(("image", image, True))
        fields.append(("token", token.encode(), False))
        content_type, parts = wwwform(fields)
        body = b"".join(parts) if raw_body is None else raw_body
        head = f"POST /train HTTP/1.1\r\nContent-Length: {len(body)}\r\nContent-Type: {content_type}\r\n\r\n"
        self.sock.sendall(head.encode())
        self.sock.sendall(body)
        return self.read_response()

    def read_response(self) -> tuple[bytes, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(1024)
            assert chunk, "server closed the keep-alive socket"
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        assert len(head) + 4 <= 1024, f"response head exceeds Unity's 1 KiB buffer: {len(head)}"
        length = next(int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")[1:])
                      if k.strip().lower() == b"content-length")  # fmt: skip
        while len(body) < length:
            body += self.sock.recv(length - len(body))
        self.heads.append(head)
        return head, body

    def close(self):
        self.sock.close()


def serve_controller_side(server: WsgiServer, steps: int, received: list):
    """The controller's half: receive, then answer with the next action, ``steps`` times."""
    for i in range(steps):
        payload = server.receive(timeout=10)
        received.append(payload)
        server.send({"action": "MoveAhead", "moveMagnitude": 0.25 * i})


class Receiving:
    """The controller's ``receive()`` running in a thread while the test speaks for the player (the direct path
    serves its sockets only from inside ``receive()``, as a controller always is while its player sends)."""

    def __init__(self, server, timeout: float = 5):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(server, timeout))
        self.thread.start()

    def _run(self, server, timeout):
        try:
            self.result = server.receive(timeout=timeout)
        except Exception as exc:
            self.error = exc

    def join(self):
        self.thread.join(15)
        assert not self.thread.is_alive()
        return self


def counters(server) -> object:
    """Where a path counts its refusals (``rejected_tokens``, ``bad_requests``)."""
    return server.hub if isinstance(server, WsgiServer) else server


@pytest.fixture(params=list(PATHS))
def wsgi(request):
    server = PATHS[request.param]()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hub_wsgi():
    server = WsgiServer()
    server.start()
    yield server
    server.stop()


def test_keep_alive_over_100_steps_on_one_socket_with_unity_compatible_responses(wsgi):
    received = []
    t = threading.Thread(target=serve_controller_side, args=(wsgi, 101, received))
    t.start()
    unity = UnitySocket(wsgi.address)
    try:
        seq = 0
        for i in range(101):
            head, body = unity.post(wsgi.client_token, seq)
            action = json.loads(body.decode("ascii"))
            assert action == {"action": "MoveAhead", "moveMagnitude": 0.25 * i, "sequenceId": i + 1}
            seq = action["sequenceId"]
    finally:
        unity.close()
        t.join(10)
    assert len(received) == 101
    assert bytes(received[-1].files["image"][0]) == b"\x01\x02\x03\x04\x05\x06"
    for head in unity.heads:
        lines = head.split(b"\r\n")
        assert lines[0] == b"HTTP/1.1 200 OK"
        names = {line.split(b":")[0].strip().lower(): line.split(b":", 1)[1].strip() for line in lines[1:]}
        assert b"content-length" in names
        assert names.get(b"connection", b"").lower() != b"close"
        assert b"transfer-encoding" not in names


def test_wrong_token_is_403_and_the_player_is_not_trusted(wsgi):
    unity = UnitySocket(wsgi.address)
    receiving = Receiving(wsgi)
    try:
        head, body = unity.post("not-the-token", 0)
        assert head.startswith(b"HTTP/1.1 403")
        assert json.loads(body)["error"]["code"] == "unknown_client_token"
        assert isinstance(receiving.join().error, PlayerError)
        assert re.search("wrong client token.*not trusted", str(receiving.error))
    finally:
        unity.close()
    assert counters(wsgi).rejected_tokens == 1


def test_garbage_form_is_400_and_reported_to_the_channel(wsgi):
    unity = UnitySocket(wsgi.address)
    receiving = Receiving(wsgi)
    try:
        head, body = unity.post(wsgi.client_token, 0, raw_body=b"\x00\x01 not a form")
        assert head.startswith(b"HTTP/1.1 400")
        assert isinstance(receiving.join().error, MultipartError)
    finally:
        unity.close()


def test_post_without_content_length_is_411_and_reported_before_the_player_is_in(wsgi):
    client = UnitySocket(wsgi.address)
    receiving = Receiving(wsgi)
    try:
        client.sock.sendall(b"POST /train HTTP/1.1\r\nContent-Type: text/plain\r\n\r\n")
        head, body = client.read_response()
        assert head.startswith(b"HTTP/1.1 411") and json.loads(body)["error"]["code"] == "length_required"
        assert "Content-Length" in str(receiving.join().error)
    finally:
        client.close()
    assert counters(wsgi).bad_requests == 1


def test_ping_unknown_route_wrong_method(wsgi):
    client = UnitySocket(wsgi.address)
    receiving = Receiving(wsgi, timeout=2)  # nothing arrives for it: it ends with a timeout
    try:
        for request, status, text in [
            (b"GET /ping HTTP/1.1\r\n\r\n", b"200", b"pong"),
            (b"GET /nothing HTTP/1.1\r\n\r\n", b"404", None),
            (b"GET /train HTTP/1.1\r\n\r\n", b"405", None),
        ]:
            client.sock.sendall(request)
            head, body = client.read_response()
            assert head.split(b"\r\n")[0].split()[1] == status
            if text:
                assert body == text
            else:
                assert json.loads(body)["error"]["code"] in ("not_found", "method_not_allowed")
    finally:
        client.close()
    assert "did not connect" in str(receiving.join().error)


def test_reset_reconnects_on_a_new_socket_while_the_old_one_stays_open(wsgi):
    received = []
    t = threading.Thread(target=serve_controller_side, args=(wsgi, 3, received))
    t.start()
    first = UnitySocket(wsgi.address)
    second = UnitySocket(wsgi.address)
    try:
        first.post(wsgi.client_token, 0)
        # Unity drops (does not close) the old socket after Reset; the new scene posts on a new one.
        head, body = second.post(wsgi.client_token, 1)
        assert json.loads(body)["sequenceId"] == 2
        head, body = second.post(wsgi.client_token, 2, image=None)  # urlencoded branch
        assert json.loads(body)["sequenceId"] == 3
    finally:
        first.close()
        second.close()
        t.join(10)
    assert received[2].files == {}
    assert received[2].metadata["sequenceId"] == 2


def test_shared_hub_routes_each_player_by_token():
    with PlayerHub(max_players=2) as hub:
        a, b = WsgiServer(hub=hub), WsgiServer(hub=hub)
        a.start()
        b.start()
        assert a.player_env()["AI2THOR_PORT"] == b.player_env()["AI2THOR_PORT"]
        got_a, got_b = [], []
        ta = threading.Thread(target=serve_controller_side, args=(a, 2, got_a))
        tb = threading.Thread(target=serve_controller_side, args=(b, 2, got_b))
        ta.start()
        tb.start()
        ua, ub = UnitySocket(hub.address), UnitySocket(hub.address)
        try:
            ua.post(a.client_token, 0, image=b"A" * 6)
            ub.post(b.client_token, 0, image=b"B" * 6)
            ub.post(b.client_token, 1, image=b"b" * 6)
            ua.post(a.client_token, 1, image=b"a" * 6)
            head, _ = ua.post("someone-else", 2)
            assert head.startswith(b"HTTP/1.1 403")
        finally:
            ua.close()
            ub.close()
            ta.join(10)
            tb.join(10)
            a.stop()
            b.stop()
        assert [bytes(p.files["image"][0]) for p in got_a] == [b"A" * 6, b"a" * 6]
        assert [bytes(p.files["image"][0]) for p in got_b] == [b"B" * 6, b"b" * 6]


def test_hub_mounted_in_another_wsgi_app():
    """The service mounts ``hub.wsgi_app`` in its own app and tells the hub its address."""
    mounted = {}

    def service_app(environ, start_response):
        if environ["PATH_INFO"] in ("/train", "/ping"):
            return mounted["hub"].wsgi_app(environ, start_response)
        start_response("200 OK", [("Content-Length", "7")])
        return [b"service"]

    outer = create_server(service_app, host="127.0.0.1", port=0, threads=4)

    def run_outer():
        try:
            outer.run()
        except OSError:  # its sockets are closed under the loop at the end of the test
            pass

    thread = threading.Thread(target=run_outer, daemon=True)
    thread.start()
    try:
        hub = mounted["hub"] = PlayerHub(address=("127.0.0.1", int(outer.effective_port)))
        channel = WsgiServer(hub=hub)
        channel.start()
        assert channel.player_env()["AI2THOR_PORT"] == str(outer.effective_port)
        received = []
        t = threading.Thread(target=serve_controller_side, args=(channel, 1, received))
        t.start()
        unity = UnitySocket(hub.address)
        try:
            head, body = unity.post(channel.client_token, 0)
            assert json.loads(body)["sequenceId"] == 1
        finally:
            unity.close()
            t.join(10)
            channel.stop()
        assert not hub.serving  # the hub never started a server of its own
    finally:
        outer.task_dispatcher.shutdown(timeout=2)
        outer.trigger.pull_trigger(lambda: wasyncore.close_all(outer._map))
        thread.join(5)


@pytest.mark.parametrize("path", list(PATHS))
def test_stop_releases_a_blocked_request_with_an_empty_action(path):
    server = PATHS[path]()
    server.start()
    unity = UnitySocket(server.address)
    result = {}

    def post():
        result["response"] = unity.post(server.client_token, 0)

    t = threading.Thread(target=post)
    t.start()
    try:
        server.receive(timeout=10)  # the request is now blocked waiting for our action
        server.stop()
        t.join(10)
        assert not t.is_alive()
        assert result["response"][1] == b"{}"
    finally:
        unity.close()
        server.stop()


def test_each_response_leaves_in_one_send(hub_wsgi, monkeypatch):
    """protocol.md 2.7: head and body in one write (waitress alone would send them as two segments; the direct path
    writes ``build_response``'s one buffer with one ``sendall``)."""
    wsgi = hub_wsgi
    channel_class = wsgi.hub._server.channel_class
    sends: list[bytes] = []
    original = channel_class.send

    def recording_send(self, data, do_close=True):
        sends.append(bytes(data))
        return original(self, data, do_close=do_close)

    monkeypatch.setattr(channel_class, "send", recording_send)
    received = []
    t = threading.Thread(target=serve_controller_side, args=(wsgi, 10, received))
    t.start()
    unity = UnitySocket(wsgi.address)
    try:
        seq = 0
        for _ in range(10):
            head, body = unity.post(wsgi.client_token, seq)
            seq = json.loads(body)["sequenceId"]
    finally:
        unity.close()
        t.join(10)
    assert len(sends) == 10
    for data in sends:
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and json.loads(body)["action"] == "MoveAhead"


def test_frame_bodies_arrive_whole_in_recycled_buffers_over_many_steps(wsgi):
    # bodies above hub._FRAME_BODY_MIN are received straight into a buffer of their own (recv_into); sizes change
    # between steps (new buffers, remembered part sizes go stale) and every byte must still land where it belongs
    import numpy as np

    from unirender.transport import serving as serving_module

    rng = np.random.default_rng(7)
    images = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (300 * 300 * 3, 300 * 300 * 3, 1 << 20, 17)]
    assert len(images[0]) > serving_module._FRAME_BODY_MIN
    steps = 24
    received, buffers = [], set()
    t = threading.Thread(target=serve_controller_side, args=(wsgi, steps, received))
    t.start()
    unity = UnitySocket(wsgi.address)
    try:
        seq = 0
        for i in range(steps):
            _head, body = unity.post(wsgi.client_token, seq, image=images[(i // 6) % len(images)])
            seq = json.loads(body)["sequenceId"]
            image = received[-1].files["image"][0]
            assert bytes(image) == images[(i // 6) % len(images)]
            if len(image) > serving_module._FRAME_BODY_MIN:
                buffers.add(id(image.obj))
            received[-1] = None  # drop this step's payload: its buffer may be reused
    finally:
        unity.close()
        t.join(10)
    assert len(received) == steps
    assert 2 <= len(buffers) <= 8  # recycled: not one new buffer per step (18 frame-sized ones; a buffer still
    # referenced by the previous request thread when the next head arrives means one more)


def test_frame_body_stream_is_a_plain_file_for_other_wsgi_code():
    from unirender.transport.serving import FrameBody

    data = bytearray(b"line one\nline two\n" + b"x" * 300_000)
    body = FrameBody(len(data))  # reserves a first slice only: grows as the bytes arrive
    assert len(body.data) < len(data)
    body.append(bytes(data[:50]))
    body.append(memoryview(data)[50:])
    stream = body.getfile()
    assert stream.frame_body == data and len(body.data) == len(data)
    assert stream.readline() == b"line one\n" and stream.readline(4) == b"line"
    assert stream.read(5) == b" two\n" and stream.read() == b"x" * 300_000 and stream.read() == b""
    body.close()
    assert body.data is None and bytes(stream.frame_body[:4]) == b"line"  # parsed views outlive the request


@pytest.mark.parametrize(("length", "inbuf_overflow", "in_own_buffer"), [
    (1000, 8 << 20, False),  # small: waitress's own buffers
    (200_000, 8 << 20, True),  # a frame
    (3 << 20, 2 << 20, False),  # above inbuf_overflow: waitress spills it to a file; nothing reserved up front
    (5 << 20, 8 << 20, False),  # above max_request_body_size (4 MiB): refused with 413, nothing reserved
])  # fmt: skip
def test_which_bodies_get_a_frame_buffer(length, inbuf_overflow, in_own_buffer):
    from waitress.adjustments import Adjustments

    from unirender.transport.serving import FrameBody, quick_ack_channel_class

    adjustments = Adjustments(inbuf_overflow=inbuf_overflow, max_request_body_size=4 << 20)
    parser = quick_ack_channel_class().parser_class(adjustments)
    parser.received(f"POST /train HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode())
    assert isinstance(parser.body_rcv.buf, FrameBody) is in_own_buffer
    assert (parser.error is not None) is (length >= 4 << 20)
