"""FifoServer against hand-written pipe peers: open order, fragmentation, EOF, garbage, cleanup."""

from __future__ import annotations

import json
import os
import struct
import threading

import msgpack
import pytest

from fixtures import no_leaks  # noqa: F401
from unirender.errors import PlayerCrashedError, PlayerTimeoutError
from unirender.protocol import UnknownFieldTypeError
from unirender.transport import FifoServer

META = {"agents": [{"screenWidth": 2, "screenHeight": 1, "lastActionSuccess": True}], "sequenceId": 0,
        "activeAgentId": 0, "thirdPartyCameras": None}  # fmt: skip
IMAGE = bytes(range(6))  # 2x1 RGB24


def message(meta=META, image=IMAGE) -> bytes:
    body = msgpack.packb(meta)
    return (struct.pack("!BI", 0x01, len(body)) + body + struct.pack("!BI", 0x04, len(image)) + image
            + b"\xff\x00\x00\x00\x00")  # fmt: skip


@pytest.fixture
def server(no_leaks):  # noqa: F811
    s = FifoServer(open_timeout=5)
    s.start()
    yield s
    s.stop()


def test_player_env_names_private_pipes(server):
    env = server.player_env()
    assert env["AI2THOR_SERVER_TYPE"] == "FIFO"
    assert env["AI2THOR_CLIENT_TOKEN"] == server.client_token
    for key in ("AI2THOR_FIFO_SERVER_PIPE_PATH", "AI2THOR_FIFO_CLIENT_PIPE_PATH"):
        path = env[key]
        assert os.path.dirname(path) == server.tmp_dir
        assert oct(os.stat(server.tmp_dir).st_mode & 0o777) == "0o700"


def test_stop_removes_pipes_and_dir():
    s = FifoServer()
    s.start()
    tmp = s.tmp_dir
    assert os.path.exists(os.path.join(tmp, "server.pipe"))
    s.stop()
    s.stop()  # idempotent
    assert not os.path.exists(tmp)


def test_message_fed_one_byte_at_a_time_then_action_round_trip(server):
    data = message()
    received_action = {}

    def player():
        fd = os.open(server.server_pipe_path, os.O_WRONLY)
        for i in range(len(data)):  # worst-case fragmentation
            os.write(fd, data[i : i + 1])
        with open(server.client_pipe_path, "rb", buffering=0) as inp:
            header = inp.read(5)
            code, length = struct.unpack("!BI", header)
            received_action["code"] = code
            received_action["body"] = json.loads(inp.read(length))
            received_action["eom"] = inp.read(5)
        os.close(fd)

    t = threading.Thread(target=player)
    t.start()
    payload = server.receive(timeout=10)
    assert payload.metadata["agents"][0]["screenWidth"] == 2
    assert bytes(payload.files["image"][0]) == IMAGE
    sent = server.send({"action": "RotateRight", "rotation": 90})
    t.join(10)
    assert sent == {"action": "RotateRight", "rotation": {"y": 90}, "sequenceId": 1}
    assert received_action == {"code": 0x02, "body": sent, "eom": b"\xff\x00\x00\x00\x00"}


def test_never_connecting_peer_times_out_without_hanging(server):
    with pytest.raises(PlayerTimeoutError, match="did not connect"):
        server.receive(timeout=0.3)


def test_send_before_first_message_is_refused(server):
    with pytest.raises(RuntimeError, match="open order"):
        server.send({"action": "Pass"})


def test_eof_inside_a_message_is_a_crash_report_not_a_timeout(server):
    data = message()
    fd = os.open(server.server_pipe_path, os.O_WRONLY)
    os.write(fd, data[:20])
    os.close(fd)
    with pytest.raises(PlayerCrashedError, match="closed server.pipe in the middle of a message") as info:
        server.receive(timeout=30)
    assert info.value.returncode is None  # no process attached: nothing to report but the EOF


def test_garbage_frame_type_is_a_protocol_error(server):
    fd = os.open(server.server_pipe_path, os.O_WRONLY)
    os.write(fd, b"\x42\x00\x00\x00\x03abc\xff\x00\x00\x00\x00")
    try:
        with pytest.raises(UnknownFieldTypeError, match="0x42.*garbage on server.pipe"):
            server.receive(timeout=5)
    finally:
        os.close(fd)


def test_two_messages_in_one_write_are_both_delivered(server):
    second = dict(META, sequenceId=0)
    fd = os.open(server.server_pipe_path, os.O_WRONLY)
    os.write(fd, message() + message(second, IMAGE[::-1]))
    os.close(fd)
    first = server.receive(timeout=5)
    assert bytes(first.files["image"][0]) == IMAGE
    again = server.receive(timeout=5)
    assert bytes(again.files["image"][0]) == IMAGE[::-1]


def test_start_sweeps_pipe_dirs_left_by_dead_owners(tmp_path, monkeypatch):
    import subprocess
    import sys

    from unirender.transport.fifo import FIFO_DIR_PREFIX, FifoServer

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_dir = tmp_path / f"{FIFO_DIR_PREFIX}{int(dead.stdout)}-abc"
    live_dir = tmp_path / f"{FIFO_DIR_PREFIX}{os.getppid()}-def"
    for d in (dead_dir, live_dir):
        d.mkdir()
        os.mkfifo(d / "server.pipe")
    server = FifoServer()
    server.start()
    try:
        assert not dead_dir.exists()
        assert live_dir.exists()
        assert os.path.dirname(server.tmp_dir) == str(tmp_path)
    finally:
        server.stop()
    assert live_dir.exists()  # stop() removes only its own dir


@pytest.mark.timeout(120)  # the bug was a send() blocked forever
def test_send_to_a_player_that_does_not_read_is_bounded(server):
    opened = threading.Event()
    done = threading.Event()
    fds = []

    def player():  # says hello, opens client.pipe for reading, then never reads
        fds.append(os.open(server.server_pipe_path, os.O_WRONLY))
        os.write(fds[0], message())
        fds.append(os.open(server.client_pipe_path, os.O_RDONLY))
        opened.set()
        done.wait(60)
        for fd in fds:
            os.close(fd)

    t = threading.Thread(target=player)
    t.start()
    try:
        server.receive(timeout=10)
        server.send({"action": "Pass"})  # small: fits in the pipe, returns at once
        assert opened.wait(10)
        server.send_timeout = 0.5
        with pytest.raises(PlayerTimeoutError, match="did not read its action"):
            server.send({"action": "CreateHouse", "house": "x" * (4 << 20)})  # larger than any pipe buffer
    finally:
        done.set()
        t.join(10)
