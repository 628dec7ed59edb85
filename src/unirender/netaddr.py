"""Which hosts are this machine's own: what the service, its console and the OpenEnv server ask before they
serve without tokens."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost``, ``127.x.y.z``, ``::1`` (bracketed or not): True; any other name or address: False (a name
    other than ``localhost`` could resolve anywhere)."""
    host = host.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
