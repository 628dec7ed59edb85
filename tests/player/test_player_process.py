"""The player process on its own, driven byte for byte by a raw-socket / raw-pipe harness built on
unirender.protocol (no Controller): the launch contract, the hello, WSGI reconnect on Reset, exit codes."""

import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

from unirender.protocol.fifo import FieldType, FifoDecoder, decode_player_message, encode_message
from unirender.protocol.http import RequestReader, build_response
from unirender.protocol.multipart import parse_form, payload_parts_from_form
from unirender.protocol.state import encode_json_action

PLAYER = [sys.executable, "-m", "unirender.player"]


def spawn(args, env_extra, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI2THOR_") and k != "DISPLAY"}
    env.update(env_extra)
    return subprocess.Popen(PLAYER + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def finish(proc, timeout=30):
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_launch_failure_messages(tmp_path):
    log = tmp_path / "player.log"
    with open(log, "wb") as f:
        rc = subprocess.call(PLAYER + ["-screen-width", "wide"], stdout=f, stderr=f, timeout=30)
    assert rc == 2 and "-screen-width needs an integer, got 'wide'" in log.read_text()
    env = dict(os.environ, UNIRENDER_PLAYER_BACKEND="metal")
    with open(log, "wb") as f:
        rc = subprocess.call(PLAYER, stdout=f, stderr=f, env=env, timeout=30)
    assert rc == 2 and "UNIRENDER_PLAYER_BACKEND must be one of egl, glx, vulkan" in log.read_text()
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(UNIRENDER_PLAYER_BACKEND="glx", AI2THOR_PORT="1")
    with open(log, "wb") as f:
        rc = subprocess.call(PLAYER, stdout=f, stderr=f, env=env, timeout=30)
    assert rc == 1 and "DISPLAY" in log.read_text() and "Traceback" not in log.read_text()


def _serve_one(conn, reader):
    while True:
        data = conn.recv(1 << 16)
        assert data, "player closed the connection before sending a request"
        requests = reader.feed(data)
        if requests:
            (request,) = requests
            return request


def _payload(request):
    fields, files = parse_form(request.headers.get("content-type"), request.body)
    return (*payload_parts_from_form(fields, files), request.headers.get("content-type"))


def test_wsgi_hello_keepalive_and_new_connection_per_scene_load():
    """Metadata-only player (-nographics): urlencoded forms; one socket per scene, keep-alive within it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    port = server.getsockname()[1]
    env = {"AI2THOR_SERVER_TYPE": "WSGI", "AI2THOR_HOST": "127.0.0.1", "AI2THOR_PORT": str(port),
           "AI2THOR_CLIENT_TOKEN": "secret", "AI2THOR_SERVER_SIDE_SCREENSHOT": "False"}  # fmt: skip
    proc = spawn(["-batchmode", "-nographics"], env)
    conns = []
    try:
        conn, _ = server.accept()
        conn.settimeout(30)
        conns.append(conn)
        reader = RequestReader()
        request = _serve_one(conn, reader)
        assert (request.method, request.target) == ("POST", "/train")
        assert "host" not in request.headers  # Unity sends no Host header
        metadata, files, token, content_type = _payload(request)
        assert content_type == "application/x-www-form-urlencoded" and files == {}
        assert token == "secret" and metadata["sequenceId"] == 0
        assert metadata["agents"][0]["sceneName"] == "FloorPlan1_physics"
        # same connection: keep-alive
        conn.sendall(build_response(encode_json_action({"action": "RotateRight", "sequenceId": 1})))
        metadata, *_ = _payload(_serve_one(conn, reader))
        assert metadata["sequenceId"] == 1 and metadata["agents"][0]["agent"]["rotation"]["y"] == 90.0
        # Reset: the new scene's emission arrives on a NEW connection
        conn.sendall(
            build_response(
                encode_json_action({"action": "Reset", "sceneName": "FloorPlan201", "sequenceId": 0})
            )
        )
        conn2, _ = server.accept()
        conn2.settimeout(30)
        conns.append(conn2)
        metadata, *_ = _payload(_serve_one(conn2, RequestReader()))
        assert metadata["sequenceId"] == 0 and metadata["agents"][0]["sceneName"] == "FloorPlan201_physics"
        assert conn.recv(10) == b""  # the old socket was dropped
        conn2.close()  # the controller goes away: the player exits cleanly
        assert finish(proc) == 0
    finally:
        for c in conns:
            c.close()
        server.close()
        if proc.poll() is None:
            finish(proc)


def test_fifo_hello_is_rgb24_on_gl_and_actions_round_trip():
    with tempfile.TemporaryDirectory(prefix="unirender-test-fifo-") as tmp:
        server_pipe, client_pipe = os.path.join(tmp, "server.pipe"), os.path.join(tmp, "client.pipe")
        os.mkfifo(server_pipe)
        os.mkfifo(client_pipe)
        env = {"AI2THOR_SERVER_TYPE": "FIFO", "AI2THOR_FIFO_SERVER_PIPE_PATH": server_pipe,
               "AI2THOR_FIFO_CLIENT_PIPE_PATH": client_pipe, "UNIRENDER_PLAYER_BACKEND": "egl"}  # fmt: skip
        proc = spawn(["-screen-fullscreen", "0", "-screen-quality", "7", "-screen-width", "64", "-screen-height",
                      "48"], env)  # fmt: skip
        rfd = os.open(server_pipe, os.O_RDONLY)  # protocol.md 3.2: read end first, then the player writes
        decoder = FifoDecoder()
        try:

            def receive():
                while True:
                    data = os.read(rfd, 1 << 16)
                    assert data, "player closed its pipe"
                    messages = decoder.feed(data)
                    if messages:
                        return decode_player_message(messages[0])

            metadata, files, is_patch = receive()
            assert not is_patch and metadata["sequenceId"] == 0
            agent = metadata["agents"][0]
            assert (agent["screenWidth"], agent["screenHeight"]) == (64, 48)
            (image,) = files["image"]
            assert len(image) == 64 * 48 * 3  # RGB24 like a Linux64 build
            assert np.frombuffer(image, np.uint8).max() > 0
            wfd = os.open(client_pipe, os.O_WRONLY)
            try:
                os.write(wfd, encode_message([(FieldType.ACTION, json.dumps({"action": "GetScenesInBuild",
                                                                                 "sequenceId": 1}).encode())]))  # fmt: skip
                patch, files, is_patch = receive()
                assert is_patch and "FloorPlan301_physics" in patch["actionReturn"] and files == {}
                os.write(wfd, encode_message([(FieldType.ACTION, b'{"action": "Fly", "sequenceId": 2}')]))
                metadata, files, _ = receive()
                assert metadata["sequenceId"] == 2 and metadata["agents"][0]["errorCode"] == "InvalidAction"
                assert len(files["image"][0]) == 64 * 48 * 3
            finally:
                os.close(wfd)  # EOF: the player exits 0
            assert finish(proc) == 0
        finally:
            os.close(rfd)
            if proc.poll() is None:
                finish(proc)
