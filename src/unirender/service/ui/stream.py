"""The live view: a session's frames as Server-Sent Events, latest frame only, never queued.

Why SSE (``text/event-stream``) and not ``multipart/x-mixed-replace`` or WebSocket: waitress has no WebSocket
upgrade; an MJPEG ``<img>`` gives the page no per-frame callback, so it could show neither the frame rate nor the
latency. An SSE event carries the frame (base64) with its step and render time, ``EventSource`` reconnects by
itself and passes cookies, and it is plain HTTP/1.1 that any proxy forwards. Cost: base64's third more bytes.

Flow control: the stream yields the next frame only when the previous one has left waitress's output buffer
(the channel's ``total_outbufs_len``), and takes the *latest* frame at that moment; the socket's send buffer is
sized to a couple of frames (``_size_send_buffer``) so the kernel cannot hold many frames either. A slow viewer therefore skips frames
(counted in ``skipped``) instead of queueing them; the owner's step only swaps a reference (``FrameSlot``).
Under a server that writes synchronously (gunicorn's gthread) the write itself blocks: the same effect.

Each stream holds one server worker thread for as long as it is open: viewers are capped per session
(``FrameSlot.max_viewers``) and service-wide (``Console.max_viewers``).
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from unirender.service.frame_slot import FrameSlot
from unirender.service.ui.images import encode_image

if TYPE_CHECKING:
    from unirender.service.ui.families import ConsoleFamily

# The socket's send buffer: two frames' worth of the first frame sent (Linux doubles it, so ~4 frames can be in
# flight), at least SEND_BUFFER_MIN; the default autotunes to megabytes, i.e. seconds of frames for a slow reader.
SEND_BUFFER_MIN, SEND_BUFFER_MAX = 32 * 1024, 4 * 2**20
KEEPALIVE_S = 10.0  # a comment line this often finds a viewer that went away while nothing was rendered
POLL_S = 0.25  # how often an idle stream checks the service is still up
DRAIN_POLL_S, DRAIN_POLL_MAX_S = 0.002, 0.05  # while the previous frame is still in waitress's buffer
# Frames per second sent to one viewer at most (``?fps=`` up to MAX_FPS): a person sees no more, and each frame
# sent is an encode on the server's CPU, which the session's owner shares: a session stepping at 100 steps/s
# costs a third of the encodes at 30 frames/s.
DEFAULT_FPS, MAX_FPS = 30.0, 60.0


def waitress_channel(environ: dict) -> Any:
    """The connection's waitress channel (its output buffer length tells us the viewer keeps up); None elsewhere."""
    check = environ.get("waitress.client_disconnected")
    return getattr(check, "__self__", None)


def sse_frame(seq: int, published_at: float, event: Any, view: str, family: ConsoleFamily) -> bytes | None:
    """One SSE ``frame`` event (id = the slot's sequence number), or None when the event lacks the view.
    ``family``: the session's console adapter (``ui.families``), which knows the event's views and captions."""
    array = family.view_array(event, view) if event is not None else None
    if array is None:
        return None
    mime, data = encode_image(view, array)
    doc = {
        "seq": seq,
        "rendered_ms": round(published_at * 1000, 1),  # wall clock: the page's latency = its now - this
        "encoded_ms": round(time.time() * 1000, 1),
        "width": int(array.shape[1]), "height": int(array.shape[0]),
        **family.caption(event),
        "image": f"data:{mime};base64,{base64.b64encode(data).decode()}",
    }
    return f"id: {seq}\nevent: frame\ndata: {json.dumps(doc)}\n\n".encode()


class ViewerStream:
    """The WSGI body of one viewer. ``close()`` (called by the server when it ends) releases the viewer slot."""

    def __init__(self, slot: FrameSlot, view: str, environ: dict, *, family: ConsoleFamily,
                 stopping: Callable[[], bool], on_close: Callable[[ViewerStream], None], fps: float = DEFAULT_FPS):
        self.slot = slot
        self.view = view
        self.family = family  # the session's console adapter (ui.families): its views and captions
        self.interval = 1.0 / min(MAX_FPS, max(0.1, fps))
        self.stopping = stopping
        self.on_close = on_close
        self.channel = waitress_channel(environ)
        self.sent = 0
        self.skipped = 0
        self._closed = False
        self._buffer_set = False

    def _size_send_buffer(self, frame_bytes: int) -> None:
        self._buffer_set = True
        sock = getattr(self.channel, "socket", None)
        if sock is not None:
            size = min(SEND_BUFFER_MAX, max(SEND_BUFFER_MIN, 2 * frame_bytes))
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            except OSError:
                pass

    def describe(self) -> dict:
        return {"view": self.view, "sent": self.sent, "skipped": self.skipped, "fps_limit": round(1 / self.interval, 2)}

    def _connected(self) -> bool:
        if self.channel is None:
            return True
        if not self.channel.connected:
            return False
        # waitress does not read a connection while its request runs, so it learns of a viewer that went away
        # only when a write fails; between frames, peek: an empty read is the viewer's FIN (its slot frees at
        # once instead of at the next frame or keepalive).
        sock = getattr(self.channel, "socket", None)
        if sock is None:
            return False
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except (BlockingIOError, InterruptedError):
            return True  # nothing to read: still there
        except OSError:
            return False

    def _wait_for_room(self) -> bool:
        """Until the previous frame has left waitress's buffer; False if the viewer or the service went away."""
        pause = DRAIN_POLL_S
        while self.channel is not None and self.channel.total_outbufs_len:
            if not self._connected() or self.stopping() or self.slot.closed:
                return False
            time.sleep(pause)
            pause = min(DRAIN_POLL_MAX_S, pause * 2)  # a slow viewer: wake rarely, the GIL is the owner's too
        return True

    def __iter__(self) -> Iterator[bytes]:
        yield b"retry: 2000\n\n"  # EventSource reconnects after 2 s if the stream breaks
        shown = 0
        last_write = next_frame_at = time.monotonic()
        while self._connected() and not self.stopping():
            pause = next_frame_at - time.monotonic()
            if pause > 0:  # the frame-rate cap: frames published meanwhile are skipped
                time.sleep(min(pause, POLL_S))
                continue
            got = self.slot.wait_newer(shown, POLL_S)
            if got is None:
                if self.slot.closed:
                    yield b"event: end\ndata: {}\n\n"
                    return
                if time.monotonic() - last_write > KEEPALIVE_S:
                    last_write = time.monotonic()
                    yield b": keepalive\n\n"
                continue
            if not self._wait_for_room():
                return
            seq, event, published_at = self.slot.latest()  # the newest once the viewer has room: skip the rest
            if shown:
                self.skipped += max(0, seq - shown - 1)
            shown = seq
            payload = self.slot.encoded(seq, self.view, sse_frame, seq, published_at, event, self.view,
                                         self.family)
            if payload is None:
                continue
            if not self._buffer_set:
                self._size_send_buffer(len(payload))
            last_write = time.monotonic()
            next_frame_at = last_write + self.interval
            self.sent += 1
            yield payload

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.on_close(self)
