"""Thin I/O shells that move the protocol's bytes between the controller and one player process.

``FifoServer`` (named pipes) and ``WsgiServer`` (HTTP ``POST /train`` on a ``PlayerHub``) share the
:class:`~unirender.transport.base.Transport` interface: ``start``, ``player_env``, ``attach``, ``send``,
``receive``, ``stop``.
"""

from unirender.transport.base import Transport
from unirender.transport.fifo import FifoServer
from unirender.transport.hub import PlayerHub
from unirender.transport.wsgi import WsgiServer

__all__ = ["FifoServer", "PlayerHub", "Transport", "WsgiServer", "make_transport"]


def make_transport(server: str, *, hub: PlayerHub | None = None, host: str = "127.0.0.1", port: int = 0) -> Transport:
    """``"fifo"`` or ``"wsgi"`` (any case) -> a new, unstarted transport. ``host``/``port``: where a WSGI
    transport without a shared ``hub`` listens (port 0: any free one)."""
    kind = server.lower()
    if kind == "fifo":
        if hub is not None or port:
            raise ValueError("player_hub and port only apply to server='wsgi'")
        return FifoServer()
    if kind == "wsgi":
        if hub is not None and port:
            raise ValueError("a WSGI transport on a shared player_hub listens on the hub's port, not port=")
        return WsgiServer(hub=hub, host=host, port=port)
    raise ValueError(f"server must be 'fifo' or 'wsgi', got {server!r}")
