"""Session backends: where players live (this process, or one Ray actor per session).

``create_backend("local" | "ray", **options)`` is the one entry point the service, the jobs runner and the
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
    create_backend,
)

__all__ = [
    "CapacityError",
    "LocalBackend",
    "RayBackend",
    "Resources",
    "Session",
    "SessionBackend",
    "SessionClosedError",
    "SessionLostError",
    "create_backend",
]


def __getattr__(name: str):  # the backends import the Controller (and Ray) only when asked for
    if name == "LocalBackend":
        from unirender.cluster.local import LocalBackend

        return LocalBackend
    if name == "RayBackend":
        from unirender.cluster.ray_backend import RayBackend

        return RayBackend
    raise AttributeError(f"module 'unirender.cluster' has no attribute {name!r}")
