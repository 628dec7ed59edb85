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


def make_transport(server: str, *, hub: PlayerHub | None = None) -> Transport:
    """``"fifo"`` or ``"wsgi"`` (any case) -> a new, unstarted transport."""
    kind = server.lower()
    if kind == "fifo":
        if hub is not None:
            raise ValueError("player_hub only applies to server='wsgi'")
        return FifoServer()
    if kind == "wsgi":
        return WsgiServer(hub=hub)
    raise ValueError(f"server must be 'fifo' or 'wsgi', got {server!r}")
