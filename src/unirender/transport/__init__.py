"""Thin I/O shells that move the protocol's bytes between the controller and one player process.

``FifoServer`` (named pipes), ``DirectWsgiTransport`` (a private player's HTTP socket served in the caller's
thread: the fast path) and ``WsgiTransport`` (HTTP ``POST /train`` on a ``PlayerHub``, the server;
AI2-THOR's name ``WsgiServer`` is an alias) share the :class:`~unirender.transport.base.Transport` interface:
``start``, ``player_env``, ``attach``, ``send``, ``receive``, ``stop``, ``last_action``. The hub reaches a
WSGI transport only through :class:`~unirender.transport.hub.HubChannel` (``deliver``, ``fail``, ``reject``,
``release``).
"""

from unirender.transport.base import Transport
from unirender.transport.direct import DirectWsgiTransport
from unirender.transport.fifo import FifoServer
from unirender.transport.hub import HubChannel, PlayerHub
from unirender.transport.wsgi import WsgiServer, WsgiTransport

__all__ = ["DirectWsgiTransport", "FifoServer", "HubChannel", "PlayerHub", "Transport", "WsgiServer", "WsgiTransport", "make_transport"]


def make_transport(server: str, *, hub: PlayerHub | None = None, host: str = "127.0.0.1", port: int = 0,
                   accept_any_token: bool = False, send_timeout: float | None = None,
                   direct: bool = True) -> Transport:
    """``"fifo"`` or ``"wsgi"`` (any case) -> a new, unstarted transport. ``host``/``port``: where a WSGI
    transport without a shared ``hub`` listens (port 0: any free one). ``accept_any_token``: a WSGI player we
    did not launch was given no token (FIFO never checks one). ``send_timeout``: how long a FIFO action may wait
    for the player to read it (a WSGI action is a response: it never waits). ``direct``: a WSGI transport
    without a shared ``hub`` serves its player from the caller's thread (:class:`DirectWsgiTransport`, the fast
    path) rather than on a private waitress ``PlayerHub``; same wire behaviour."""
    kind = server.lower()
    if kind == "fifo":
        if hub is not None or port:
            raise ValueError("player_hub and port only apply to server='wsgi'")
        return FifoServer() if send_timeout is None else FifoServer(send_timeout=send_timeout)
    if kind == "wsgi":
        if hub is not None and port:
            raise ValueError("a WSGI transport on a shared player_hub listens on the hub's port, not port=")
        if hub is None and direct:
            return DirectWsgiTransport(host=host, port=port, accept_any_token=accept_any_token)
        return WsgiTransport(hub=hub, host=host, port=port, accept_any_token=accept_any_token)
    raise ValueError(f"server must be 'fifo' or 'wsgi', got {server!r}")
