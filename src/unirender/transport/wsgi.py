"""WSGI transport (protocol.md 2): the player POSTs its result to ``/train``; the response body is our next action.

A :class:`WsgiTransport` (AI2-THOR's name: ``WsgiServer``, kept as an alias) is one player's end on a
:class:`PlayerHub`, which is the server. The hub talks to it only through the public
:class:`~unirender.transport.hub.HubChannel` methods: its request thread calls :meth:`deliver` with the parsed
form and blocks on a per-request reply slot; :meth:`receive` takes the form, :meth:`send` fills that slot, so an
action can never go to a later request than the one it answers (docs/protocol.md 2.8). A Reset's new TCP
connection simply arrives as the next request.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from unirender.errors import PlayerError
from unirender.protocol import Payload
from unirender.protocol.state import encode_json_action
from unirender.transport.base import WATCH_PERIOD_S, Transport, deadline_after
from unirender.transport.hub import PART_SIZES_MAX, PlayerHub

_RELEASE = None  # reply-slot value that ends a blocked request without an action (session stopping)
_REPLY_CHECK_S = 1.0


def wsgi_player_env(address: tuple[str, int], client_token: str) -> dict[str, str]:
    """The ``AI2THOR_*`` variables that send a player's ``POST /train`` to ``address`` with ``client_token``."""
    host, port = address
    return {
        "AI2THOR_SERVER_TYPE": "WSGI",
        "AI2THOR_HOST": str(host),
        "AI2THOR_PORT": str(port),
        "AI2THOR_CLIENT_TOKEN": client_token,
    }


class _Reply:
    """The response slot of one blocked ``POST /train``."""

    __slots__ = ("slot",)

    def __init__(self) -> None:
        self.slot: queue.SimpleQueue = queue.SimpleQueue()


# What the hub's threads put in a transport's inbox, for receive() to take in order.
@dataclass(frozen=True)
class Delivery:
    """A player's verified request: its form, and the reply slot its action goes to."""

    metadata: dict
    files: dict
    reply: _Reply


@dataclass(frozen=True)
class Failure:
    """A malformed request pinned on this player: receive() raises ``error``."""

    error: Exception


@dataclass(frozen=True)
class Rejection:
    """A request with a wrong token on a private hub before the player was in: the player is not trusted."""

    message: str


class WsgiTransport(Transport):
    """Python's end of the WSGI transport for one player, on its own hub or on a shared one (``hub=``).

    ``accept_any_token``: for a player we did not launch (``Controller(start_unity=False)``): it was given no
    token, so its private hub takes any."""

    server_type = "WSGI"
    accept_any_token = False

    def __init__(self, *, hub: PlayerHub | None = None, host: str = "127.0.0.1", port: int = 0,
                 accept_any_token: bool = False):
        super().__init__()
        self.accept_any_token = accept_any_token
        self._own_hub = hub is None
        self.hub = hub if hub is not None else PlayerHub(host=host, port=port, max_players=1, owner=self)
        self._inbox: queue.SimpleQueue[Delivery | Failure | Rejection] = queue.SimpleQueue()
        self._reply: _Reply | None = None  # the request our next send() answers
        self._waiting: set[_Reply] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._started = False
        # This player's form part sizes (frames keep their size from step to step), so the hub's parser can
        # skip scanning them for the boundary. Learnt only from this player's own verified forms.
        self.part_sizes: dict[str, int] = {}
        self.player_connected = False  # a request with this channel's token has come in

    def verified_request(self, part_sizes: dict[str, int]) -> None:
        """Called by the hub once a request's token is verified as this channel's: the player is in, and the
        sizes of that form's parts are the ones to try for its next form (at most ``PART_SIZES_MAX`` names)."""
        self.player_connected = True
        if len(part_sizes) <= PART_SIZES_MAX:
            self.part_sizes = part_sizes

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._stopped = False
        self.player_connected = False
        if self._own_hub:
            self.hub.start()
        self.hub.register(self)

    def player_env(self) -> dict[str, str]:
        return wsgi_player_env(self.hub.address, self.client_token)

    @property
    def address(self) -> tuple[str, int]:
        return self.hub.address

    def stop(self) -> None:
        """Unregister, release a blocked request, and close the hub if it is ours. Idempotent."""
        self._stopped = True
        self.hub.unregister(self)
        self.release()
        if self._own_hub:
            self.hub.close()
        self._close_pidfd()
        self._started = False

    # -- Python -> player ---------------------------------------------------------------------------------
    def send(self, action: dict) -> dict:
        reply = self._reply
        if reply is None:
            raise RuntimeError("WsgiTransport.send() without a pending /train request: receive() first")
        prepared = self._prepare(action)
        self._reply = None
        reply.slot.put(encode_json_action(prepared))
        return prepared

    # -- player -> Python ---------------------------------------------------------------------------------
    def receive(self, timeout: float | None) -> Payload:
        if not self._started:
            raise RuntimeError("WsgiTransport.receive() before start()")
        deadline = deadline_after(timeout)
        inbox = self._inbox
        while True:
            wait = WATCH_PERIOD_S
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            try:
                item = inbox.get(timeout=wait)
            except queue.Empty:
                if self._exited():
                    what = "exited" if self.protocol.previous else "exited before connecting"
                    raise self._crash_error(what) from None
                if deadline is not None and time.monotonic() >= deadline:
                    connected = self.protocol.previous is not None
                    what = "did not answer" if connected else "did not connect (no POST /train)"
                    raise self._timeout_error(what, timeout) from None
                continue
            if isinstance(item, Failure):
                raise item.error
            if isinstance(item, Rejection):
                process = self.process
                raise PlayerError(
                    f"{item.message}; the player is not trusted",
                    log_path=process.log_path if process else None,
                    log_tail=process.log_tail() if process else "",
                )
            self._reply = item.reply
            return self.protocol.accept(item.metadata, item.files)

    # -- the hub's side (transport.hub.HubChannel), called from its request threads ----------------------------
    def deliver(self, metadata: dict, files) -> bytes | None:
        """Hand one verified request to the controller and block until its action (None: released by stop())."""
        reply = _Reply()
        with self._lock:
            if self._stopped:
                return _RELEASE
            self._waiting.add(reply)
        try:
            self._inbox.put(Delivery(metadata, files, reply))
            while True:
                try:
                    return reply.slot.get(timeout=_REPLY_CHECK_S)
                except queue.Empty:
                    if self._stopped:
                        return _RELEASE
        finally:
            with self._lock:
                self._waiting.discard(reply)

    def fail(self, error: Exception) -> None:
        """A malformed request pinned on this player: the controller's receive() raises ``error``."""
        self._inbox.put(Failure(error))

    def reject(self, message: str) -> None:
        """A wrong token on this transport's private hub before its player was in: receive() says so."""
        self._inbox.put(Rejection(message))

    def release(self) -> None:
        """End every blocked request without an action (the session is stopping)."""
        with self._lock:
            waiting = list(self._waiting)
        for reply in waiting:
            reply.slot.put(_RELEASE)
        self._reply = None


WsgiServer = WsgiTransport  # AI2-THOR's name for it
