"""Run the service on waitress, tuned for this workload, and shut it down cleanly on SIGTERM/SIGINT.

Why waitress (docs/service.md compares the servers): pure Python, keep-alive that stays open for
players, a thread pool so a player's long poll never blocks a client, and no request time limit. Settings:

- ``threads = 2 x total_players + 8``: each WSGI player holds a thread in its long poll while its client's step
  holds another; the rest serve the API.
- buffers and receive size from ``transport.serving.waitress_options``: frames stay in memory (the default 1 MiB
  ``outbuf_overflow`` spills them to a temp file, 3x slower).
- connections (``transport.serving.ConnectionPolicy``): one without a verified token is closed after
  ``untrusted_idle_s`` idle seconds (10), a client's after ``client_idle_s`` (120), a verified player's after
  ``player_idle_s`` (a day: Unity never reconnects); ``connection_limit`` (1000) is far above what idle
  attackers can hold through that churn, and idle connections hold no thread (only a request in flight does).
- ``max_request_body_size``: the player limit (raw frames); a client body over ``limits.body_bytes``, or one
  whose head carries no valid token, is refused (JSON 413/401) from its head, before any of it is read.

Shutdown (SIGTERM): stop accepting, fail in-flight steps cleanly by stopping every player (clients get a JSON
error), wait for in-flight requests, then close every connection, the players' virtual displays and exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from waitress.server import create_server

from unirender.errors import SpecError
from unirender.service.app import ServiceApp, create_app, make_player_hub
from unirender.service.config import ServiceConfig
from unirender.service.gathered_body import GatheredBody
from unirender.transport.serving import apply_connection_policy, quick_ack_channel_class

log = logging.getLogger(__name__)

# Bodies at least this big are handed to the socket by the task thread itself when nothing is queued before them.
_DIRECT_SEND_MIN = 64 * 1024


def service_channel_class(config: ServiceConfig | None = None, authorize_body=None):
    """The transport's quick-ACK channel, plus one shortcut for big response bodies (frames).

    waitress copies every body into its output buffer (a ``BytesIO`` above 8 KiB), then copies it out again in
    ``SO_SNDBUF``-sized pieces to send them: two copies of fresh memory, ~0.5 ms per 300x300 step on 2 cores.
    A body of at least ``_DIRECT_SEND_MIN`` bytes with nothing queued before it goes to the socket at once
    instead, together with its held response head (one ``sendmsg``), under the channel's output lock; only what
    the socket does not take is buffered, and waitress sends that as usual. A :class:`GatheredBody` (a frame
    response's pieces) goes the same way without ever being joined.
    """
    from waitress.channel import ClientDisconnected, HTTPChannel
    from waitress.wasyncore import _DISCONNECTED as DISCONNECTED

    if config is None:
        base = quick_ack_channel_class()
    else:
        from unirender.service.app import body_limit

        base = quick_ack_channel_class(config.connection_policy,
                                       client_body_bytes=lambda path, method: body_limit(config, path, method),
                                       authorize_body=authorize_body)  # fmt: skip

    class ServiceChannel(base):
        takes_gathered_body = True  # service.gathered_body: a frame response's pieces, sent as they are

        def write_soon(self, data):
            if not isinstance(data, bytes) or len(data) < _DIRECT_SEND_MIN or self.total_outbufs_len:
                if isinstance(data, GatheredBody):
                    data = data.join()
                return super().write_soon(data)
            if not self.connected:
                raise ClientDisconnected
            body = data.pieces if isinstance(data, GatheredBody) else [data]
            with self.outbuf_lock:
                head, self._held_head = self._held_head, None
                pieces = body if head is None else [head, *body]
                sent = 0
                sock = self.socket  # None once the main loop has closed the channel
                if sock is not None and self.connected and not self.total_outbufs_len:  # else: queue behind
                    try:
                        sent = sock.sendmsg(pieces)
                    except OSError:  # full (EAGAIN) or broken: waitress's own flush handles it below
                        sent = 0
                    if sent:
                        self.last_activity = time.time()
                for piece in pieces:
                    if sent >= len(piece):
                        sent -= len(piece)
                        continue
                    # What the socket did not take, as bytes: a view would keep a player's buffer from being
                    # recycled while queued, and waitress slices and compares what it queues.
                    rest = piece[sent:] if sent else piece
                    HTTPChannel.write_soon(self, rest if type(rest) is bytes else bytes(rest))
                    sent = 0
            return len(data)

        def _flush_some(self, do_close=True):
            # waitress's own loop, but a file body (``wsgi.file_wrapper``: a build's blob, the export tar) leaves by
            # ``sendfile`` from the page cache. waitress reads SO_SNDBUF bytes (4 MiB on loopback) from the file
            # for each send and seeks back over what the socket did not take: every byte copied several times in
            # this one loop thread (1 GiB of blobs took 7.6 s from a loopback service against a 1.3 s hashing
            # floor, benchmarks/README.md).
            sent = 0
            while True:
                outbuf = self.outbufs[0]
                outbuflen = outbuf.__len__()
                fd = _file_descriptor(outbuf)
                while outbuflen > 0:
                    if fd is not None:
                        num_sent = self._sendfile(fd, outbuf, do_close)
                    else:
                        num_sent = self.send(outbuf.get(self.sendbuf_len), do_close=do_close)
                    if not num_sent:  # the socket is full (or gone): the loop calls again when writable
                        break
                    outbuf.skip(num_sent, True)
                    outbuflen -= num_sent
                    sent += num_sent
                    self.total_outbufs_len -= num_sent
                else:
                    if len(self.outbufs) > 1:  # the last outbuf is always a writable one: kept
                        toclose = self.outbufs.pop(0)
                        try:
                            toclose.close()
                        except Exception:
                            self.logger.exception("Unexpected error when closing an outbuf")
                        continue
                break
            if sent:
                self.last_activity = time.time()
                return True
            return False

        def _sendfile(self, fd: int, outbuf, do_close: bool) -> int:
            try:
                return os.sendfile(self.socket.fileno(), fd, outbuf.file.tell(), outbuf.remain)
            except BlockingIOError:
                return 0
            except OSError as exc:  # as waitress's own send: a peer gone closes the channel
                if exc.errno not in DISCONNECTED:
                    raise
                if do_close:
                    self.handle_close()
                return 0

    return ServiceChannel


def _file_descriptor(outbuf) -> int | None:
    """The open file behind a ``wsgi.file_wrapper`` body, when it has one ``sendfile`` can read."""
    from waitress.buffers import ReadOnlyFileBasedBuffer

    if type(outbuf) is not ReadOnlyFileBasedBuffer:
        return None
    try:
        return outbuf.file.fileno()
    except (AttributeError, OSError):  # io.UnsupportedOperation (an in-memory file) is an OSError
        return None


def waitress_settings(config: ServiceConfig) -> dict:
    """The transport's settings for serving players (buffers, idle timeout), plus the API's threads and limits."""
    from unirender.transport.serving import waitress_options

    settings = waitress_options(config.limits.total_players, config.connection_policy)
    settings.update(
        threads=config.wsgi_threads,
        max_request_body_size=max(config.player_body_bytes, config.limits.body_bytes, config.limits.build_bytes),
        connection_limit=config.connection_limit,
        asyncore_use_poll=True,
        expose_tracebacks=False,
        ident="unirender",
        clear_untrusted_proxy_headers=True,
    )
    return settings


class Server:
    """waitress + the app, driven by our own loop so that shutdown can keep serving while it drains."""

    def __init__(self, config: ServiceConfig, *, backend=None):
        self.config = config
        self.app: ServiceApp = create_app(config, backend=backend, player_hub=False, start=False)
        self.waitress = create_server(self.app, host=config.host, port=config.port, **waitress_settings(config))
        # Unity sends head and body in two writes: ACK each read at once or every step waits ~40 ms. Big
        # bodies skip waitress's output buffer when they can (service_channel_class).
        self.waitress.channel_class = service_channel_class(config, self.app.authorize_body)
        apply_connection_policy(self.waitress, config.connection_policy)
        self.host, self.port = self.waitress.getsockname()[:2]
        # Players connect to this very port (the app mounts the hub at /train): one port for everyone.
        self.app.hub = make_player_hub(self.host, self.port, config)
        self._done = threading.Event()
        self._shutdown_thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def serve_forever(self) -> None:
        """Serve until ``request_shutdown()``; then drain and close. Returns when everything is stopped."""
        self.app.start()
        try:
            while not self._done.is_set():
                # One poll at a time so the loop notices the end of a drain within 0.2 s.
                self.waitress.asyncore.loop(timeout=0.2, map=self.waitress._map, use_poll=True, count=1)
        finally:
            if self._shutdown_thread is None:  # an exception in the loop: still stop every player
                self.app.shutdown(timeout=5)
            self._close_connections()

    def request_shutdown(self, reason: str = "shutdown requested") -> None:
        """Safe from a signal handler: stop accepting now, drain on a thread, end the loop when drained."""
        if self._shutdown_thread is not None:
            return
        log.warning("%s: draining", reason)
        self.waitress.accepting = False  # waitress stops polling the listening socket
        self._shutdown_thread = threading.Thread(target=self._drain, name="unirender-shutdown", daemon=True)
        self._shutdown_thread.start()

    def _drain(self) -> None:
        try:
            self.app.shutdown(timeout=20)
        finally:
            self._done.set()

    def _close_connections(self) -> None:
        """Worker threads first (they may still write a response and pull the loop's trigger), then flush
        what they wrote, then close every socket."""
        self.waitress.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        socket_map = self.waitress._map
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(
            getattr(ch, "total_outbufs_len", 0) for ch in list(socket_map.values())
        ):
            self.waitress.asyncore.loop(timeout=0.05, map=socket_map, use_poll=True, count=1)
        for channel in list(socket_map.values()):
            try:
                channel.close()
            except Exception:
                pass


def refuse_open_non_loopback(config: ServiceConfig) -> ServiceConfig:
    """An open service (no client tokens) binds a non-loopback host only when ``allow_open`` says so.

    Refused rather than moved to 127.0.0.1: inside a container loopback is the container's own, so a service
    moved there would pass its health check and be unreachable from everywhere else.
    """
    if config.auth_enabled or config.is_loopback():
        return config
    if not config.allow_open:
        raise SpecError(f"no client tokens configured: refusing to serve {config.host} to other hosts (set tokens "
                        "in the config file or UNIRENDER_TOKENS, bind 127.0.0.1, or pass --allow-open where the "
                        "network itself is private)")
    log.warning("no client tokens configured: serving %s open to anyone who reaches it (allow_open)", config.host)
    return config


def serve(config: ServiceConfig, *, ready_message: bool = True) -> int:
    config = refuse_open_non_loopback(config)
    server = Server(config)

    def on_signal(signum, frame):
        server.request_shutdown(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        # Before the ready line: a client that sees it finds every job and session record already taken up.
        server.app.start()
        if ready_message:
            auth = ("bearer tokens required" if config.auth_enabled
                    else "no tokens configured: open" if config.allow_open else "no tokens configured: loopback only")
            print(f"unirender serving on {server.url} ({auth}; {config.wsgi_threads} threads)", flush=True)
        server.serve_forever()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print("unirender service stopped", file=sys.stderr, flush=True)
    return 0
