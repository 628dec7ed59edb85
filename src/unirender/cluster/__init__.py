"""Session backends: where players live (this process, one Ray actor per session, or a render service).

``create_backend("local" | "ray" | "service", **options)`` is the one entry point the service, the jobs runner and the
Gymnasium envs use; see docs/cluster.md.
"""

from __future__ import annotations

from unirender.cluster.base import (
    CapacityError,
    Resources,
    Session,
    SessionBackend,
    SessionClosedError,
    SessionLostError,
)
from unirender.cluster.registry import BACKEND_KINDS, create_backend

__all__ = [
    "BACKEND_KINDS",
    "CapacityError",
    "LocalBackend",
    "RayBackend",
    "ServiceBackend",
    "Resources",
    "Session",
    "SessionBackend",
    "SessionClosedError",
    "SessionLostError",
    "create_backend",
]



def __getattr__(name: str):  # the backends import the Controller (and Ray) only when asked for
    from unirender.cluster.registry import backend_class

    kinds = {"LocalBackend": "local", "RayBackend": "ray", "ServiceBackend": "service"}
    if name in kinds:
        return backend_class(kinds[name])
    raise AttributeError(f"module 'unirender.cluster' has no attribute {name!r}")
