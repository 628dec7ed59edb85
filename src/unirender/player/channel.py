"""The player's side of the two transports: thin blocking I/O around ``unirender.protocol``.

One write per message (FIFO: one buffer; WSGI: head and body in one ``sendmsg``), blocking reads. ``receive()``
returns the next action dict, or None when the controller closed its end (the player then exits).
"""

from __future__ import annotations

import os
import socket

from unirender.player.session import Emission
from unirender.protocol import unity
from unirender.protocol.fifo import FifoDecoder
from unirender.protocol.http import ResponseReader, train_request_head

_READ_SIZE = 1 << 16


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FifoChannel:
    """Named pipes (protocol.md 3): write ``server.pipe``, read ``client.pipe``; both opened on first use and kept
    across scene loads (Unity's static FifoServer client)."""

    supports_patches = True

    def __init__(self, server_pipe: str, client_pipe: str):
        self.server_pipe, self.client_pipe = server_pipe, client_pipe
        self._out: int | None = None
        self._in: int | None = None
        self._decoder = FifoDecoder()
        self._pending: list = []

    def emit(self, emission: Emission) -> None:
        if emission.patch is not None:
            data = unity.encode_fifo_patch(emission.patch)
        else:
            data = unity.encode_fifo_emission(emission.metadata, emission.images)
        if self._out is None:  # blocks until the controller opens its read end (protocol.md 3.2 step 1)
            self._out = os.open(self.server_pipe, os.O_WRONLY)
        _write_all(self._out, data)

    def receive(self) -> dict | None:
        if self._in is None:
            self._in = os.open(self.client_pipe, os.O_RDONLY)
        while not self._pending:
            data = os.read(self._in, _READ_SIZE)
            if not data:
                self._decoder.end_of_stream()
                return None
            self._pending.extend(self._decoder.feed(data))
        return unity.decode_fifo_action(self._pending.pop(0))

    def close(self) -> None:
        for fd in (self._out, self._in):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._out = self._in = None


class WsgiChannel:
    """HTTP ``POST /train`` over one keep-alive TCP connection per scene (protocol.md 2.2, 2.8): a scene load opens a
    new connection, as a new Unity AgentManager does."""

    supports_patches = False

    def __init__(self, host: str, port: int, token: str):
        self.address = (host, port)
        self.token = token
        self._sock: socket.socket | None = None
        self._reader = ResponseReader()
        self._pending: list[bytes] = []

    def _connect(self) -> None:
        self.close()
        sock = socket.create_connection(self.address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._reader = ResponseReader()
        self._pending = []

    def emit(self, emission: Emission) -> None:
        content_type, body = unity.encode_wsgi_emission(emission.metadata, emission.images, self.token)
        if self._sock is None or emission.reconnect:
            self._connect()
        head = train_request_head(content_type, len(body))
        view = [memoryview(head), memoryview(body)]
        while view:  # sendmsg may stop short on a large body: finish it
            sent = self._sock.sendmsg(view)
            while view and sent >= len(view[0]):
                sent -= len(view[0])
                view.pop(0)
            if view and sent:
                view[0] = view[0][sent:]

    def receive(self) -> dict | None:
        while not self._pending:
            data = self._sock.recv(_READ_SIZE)
            if not data:
                self._reader.end_of_stream()
                return None
            self._pending.extend(self._reader.feed(data))
        return unity.decode_action_json(self._pending.pop(0))

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
