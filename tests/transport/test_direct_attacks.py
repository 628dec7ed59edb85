"""Attack-style tests of the private fast path (``transport.direct``): nothing a request says is trusted before
its token is verified, memory follows the bytes that arrived, idle strangers are closed (the waitress hub's
counterparts are in ``tests/service/test_attacks.py``)."""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc

import pytest
from test_wsgi_server import Receiving, UnitySocket

from unirender.transport import DirectWsgiTransport
from unirender.transport.serving import ConnectionPolicy

IDLE_S = 1.0


@pytest.fixture
def direct():
    server = DirectWsgiTransport(connection_policy=ConnectionPolicy(untrusted_idle_s=IDLE_S))
    server.start()
    yield server
    server.stop()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """The server closed ``sock`` (EOF or reset) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def player_in(server) -> UnitySocket:
    """A player whose first form was verified (the controller answered it)."""
    unity = UnitySocket(server.address)
    receiving = Receiving(server)
    reply = {}
    t = threading.Thread(target=lambda: reply.setdefault("r", unity.post(server.client_token, 0)))
    t.start()
    assert receiving.join().error is None
    server.send({"action": "Pass"})
    t.join(10)
    assert json.loads(reply["r"][1])["sequenceId"] == 1
    return unity


def test_a_stranger_with_a_wrong_token_gets_403_and_fails_nothing_once_the_player_is_in(direct):
    unity = player_in(direct)
    stranger = UnitySocket(direct.address)
    receiving = Receiving(direct, timeout=10)
    try:
        head, body = stranger.post("not-the-token", 5, image=b"x" * 100_000)
        assert head.startswith(b"HTTP/1.1 403")
        assert json.loads(body)["error"]["code"] == "unknown_client_token"
        t = threading.Thread(target=unity.post, args=(direct.client_token, 1))  # the player goes on
        t.start()
        assert receiving.join().error is None and receiving.result.metadata["sequenceId"] == 1
        direct.send({"action": "Pass"})
        t.join(10)
    finally:
        unity.close()
        stranger.close()
    assert direct.rejected_tokens == 1 and direct.part_sizes  # learnt from the player's forms only


def test_a_huge_content_length_without_a_body_reserves_nothing_and_is_closed_when_idle(direct):
    unity = player_in(direct)
    attacker = socket.create_connection(direct.address)
    receiving = Receiving(direct, timeout=IDLE_S * 4)
    tracemalloc.start()
    try:
        attacker.sendall(b"POST /train HTTP/1.1\r\nContent-Length: 900000000\r\nContent-Type: x\r\n\r\n" + b"a" * 10)
        assert closed_within(attacker, IDLE_S * 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        attacker.close()
    assert peak < 8 << 20, f"{peak} bytes allocated for a 900 MB claim with 10 bytes sent"
    assert "did not answer" in str(receiving.join().error)  # the player's connection was not the one dropped
    unity.sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        unity.sock.recv(1)  # still open: a verified player's connection is not idle-closed
    unity.close()


def test_idle_and_trickling_strangers_are_closed_but_the_player_is_kept(direct):
    unity = player_in(direct)
    idle = socket.create_connection(direct.address)
    trickle = socket.create_connection(direct.address)
    receiving = Receiving(direct, timeout=IDLE_S * 5)
    try:
        started = time.monotonic()
        for _ in range(int(IDLE_S * 3 / 0.3)):  # a head one byte at a time, never idle, never complete
            try:
                trickle.sendall(b"P")
            except OSError:
                break
            time.sleep(0.3)
        assert closed_within(trickle, IDLE_S * 2) and closed_within(idle, IDLE_S * 2)
        assert time.monotonic() - started < IDLE_S * 5
    finally:
        idle.close()
        trickle.close()
    assert "did not answer" in str(receiving.join().error)
    unity.sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        unity.sock.recv(1)
    unity.close()


def test_a_content_length_above_the_body_limit_is_413_and_closed(direct):
    attacker = UnitySocket(direct.address)
    receiving = Receiving(direct, timeout=IDLE_S * 2)
    try:
        attacker.sock.sendall(b"POST /train HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n")
        head, body = attacker.read_response()
        assert head.startswith(b"HTTP/1.1 413") and json.loads(body)["error"]["code"] == "payload_too_large"
        assert closed_within(attacker.sock, 2)
    finally:
        attacker.close()
    assert "did not connect" in str(receiving.join().error)  # a stranger's refusal fails no one
