"""The gRPC shell of the ML-Agents communicator: the server Unity connects to, moving bytes only.

Unity (the client) calls ``/communicator_objects.UnityToExternalProto/Exchange`` with its output and waits for our
answer, which carries its next input. :class:`ExchangeServer` queues each call's request bytes for
:meth:`receive` and keeps the call open until :meth:`reply`; the protocol core
(:class:`unirender.protocol.mlagents.TrainerProtocol`) decides what the bytes mean.

Every wait is bounded and watches the player process: its exit ends a wait within ``WATCH_PERIOD_S`` with
:class:`PlayerCrashedError` (exit status and log tail), silence ends it with :class:`PlayerTimeoutError`.
Needs the ``mlagents`` extra (grpcio), imported only when a server is created.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

from unirender._process import ManagedProcess, describe_exit, signal_name
from unirender.errors import PlayerCrashedError, PlayerError, PlayerTimeoutError
from unirender.protocol.mlagents.versions import GRPC_SERVICE as SERVICE
from unirender.transport.base import WATCH_PERIOD_S, deadline_after, remaining

# Read by gRPC when it is first imported. Our children are fork+exec'd (ManagedProcess): with fork support on, gRPC
# restarts its poller thread in the forked child, where closing the inherited descriptors before exec makes it
# abort (SIGABRT, "epoll_wait error: Bad file descriptor") at random. Import grpc after this, or set it yourself.
if "grpc" in sys.modules and "GRPC_ENABLE_FORK_SUPPORT" not in os.environ:
    warnings.warn(
        "grpc was imported before unirender's ML-Agents support with GRPC_ENABLE_FORK_SUPPORT unset: launched "
        "players may abort at random; set GRPC_ENABLE_FORK_SUPPORT=false before importing grpc",
        RuntimeWarning,
        stacklevel=2,
    )
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# gRPC's own default is 4 MiB, which one raw 1024x1024 camera (12 MiB of floats) already exceeds.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_CLOSE_MESSAGE = b"\x0a\x03\x08\x90\x03"  # header{status: 400}: what a stopping server answers a waiting call
_HANDLER_WAKE_S = 0.5  # a handler blocked on our answer re-checks for stop() this often


class _Call:
    __slots__ = ("request", "response", "answered", "cancelled")

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.response: bytes | None = None
        self.answered = threading.Event()
        self.cancelled = False

    def end(self) -> None:
        """The RPC is over (answered, or the client went away): nobody waits for an answer any more."""
        self.cancelled = self.response is None
        self.answered.set()


class ExchangeServer:
    """One player's gRPC endpoint on ``host:port`` (port 0: a free one, read it back from ``port``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        self.host, self.requested_port = host, int(port)
        self.port: int | None = None
        self.max_message_bytes = int(max_message_bytes)
        self.process: ManagedProcess | None = None
        self._incoming: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._pending: _Call | None = None
        self._stopping = False
        self._server = None

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> int:
        import grpc

        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.so_reuseport", 0),  # gRPC's default lets a second server share the port silently
        ]
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {"Exchange": grpc.unary_unary_rpc_method_handler(self._exchange)}
        )
        # One Exchange is in flight at a time; a spare worker lets a stray second call fail fast, not queue.
        self._server = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="mlagents-grpc"),
                                   handlers=[handler], options=options)  # fmt: skip
        try:
            bound = self._server.add_insecure_port(f"{self.host}:{self.requested_port}")
        except RuntimeError as exc:  # grpcio >= 1.60 raises instead of returning 0
            self._server = None
            raise PlayerError(f"cannot listen on {self.host}:{self.requested_port} for ML-Agents ({exc})") from None
        if not bound:
            self._server = None
            raise PlayerError(f"cannot listen on {self.host}:{self.requested_port} for ML-Agents (port in use?)")
        self._server.start()
        self.port = bound
        return bound

    def attach(self, process: ManagedProcess | None) -> None:
        self.process = process

    def stop(self, grace: float = 0.5) -> None:
        """Answer a still-open call with the close message, stop the server, wait for its threads. Idempotent."""
        self._stopping = True
        self._answer_pending(_CLOSE_MESSAGE)
        while True:
            try:
                self._incoming.get_nowait().answered.set()
            except queue.Empty:
                break
        if self._server is not None:
            self._server.stop(grace).wait(grace + 1.0)
            self._server = None

    # -- the hot path ---------------------------------------------------------------------------------------
    def _exchange(self, request: bytes, context) -> bytes:  # runs on a gRPC worker thread
        call = _Call(request)
        if self._stopping:
            return _CLOSE_MESSAGE
        context.add_callback(call.end)
        self._incoming.put(call)
        while not call.answered.wait(_HANDLER_WAKE_S):
            if self._stopping:
                return _CLOSE_MESSAGE
        return call.response if call.response is not None else _CLOSE_MESSAGE

    def receive(self, timeout: float | None, what: str = "did not send its next message") -> bytes:
        """The next request's bytes; the call stays open until :meth:`reply`."""
        if self._pending is not None:
            raise RuntimeError("the previous request has not been answered (reply() first)")
        deadline = deadline_after(timeout)
        while True:
            try:
                call = self._incoming.get(timeout=WATCH_PERIOD_S)
            except queue.Empty:
                if self.process is not None and self.process.poll() is not None:
                    raise self._crash_error(what) from None
                left = remaining(deadline)
                if left is not None and left <= 0:
                    raise self._timeout_error(what, timeout) from None
                continue
            if call.cancelled:  # the client gave up on it (its process is dying): look again
                continue
            self._pending = call
            return call.request

    def reply(self, data: bytes) -> None:
        """Answer the open call."""
        if self._pending is None:
            raise RuntimeError("no open call to answer")
        self._answer_pending(data)

    def _answer_pending(self, data: bytes) -> None:
        call, self._pending = self._pending, None
        if call is not None:
            call.response = data
            call.answered.set()

    # -- error reports --------------------------------------------------------------------------------------
    def _crash_error(self, what: str) -> PlayerCrashedError:
        process = self.process
        rc = process.poll() if process else None
        return PlayerCrashedError(
            f"{process.name} (pid {process.pid}) exited and {what} (ML-Agents gRPC on port {self.port}): "
            f"{describe_exit(rc)}",
            returncode=rc,
            signal_name=signal_name(rc),
            log_path=process.log_path,
            log_tail=process.log_tail(),
        )

    def _timeout_error(self, what: str, timeout: float | None) -> PlayerTimeoutError:
        process = self.process
        who = f"{process.name} (pid {process.pid})" if process else f"no player on port {self.port}"
        return PlayerTimeoutError(
            f"{who} {what} within {timeout:g} s (ML-Agents gRPC on port {self.port})",
            log_path=process.log_path if process else None,
            log_tail=process.log_tail() if process else "",
        )
