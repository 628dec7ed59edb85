"""What runs inside a Ray actor: one session's Controller, and how its Events cross the object store.

The actor owns its player: the Controller starts it with ``ManagedProcess`` (same process group as the actor
worker, ``PR_SET_PDEATHSIG``), so a SIGKILLed actor or a removed node never leaves a player behind.

The Controller is created lazily on the first call, not in ``__init__``: that lets the driver tell "not placed yet"
(a cheap ``placed()`` call stays pending while no node has room) from "player starting", and Ray's own restart of
the actor (``max_restarts``) just runs ``__init__`` again, after which the next call starts a fresh player.
Every call carries the *incarnation* the driver knows; a restarted actor has a new one and refuses the call, so
an episode never silently continues on a fresh player.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np

from unirender.cluster.placement import placement_info
from unirender.cluster.simulators import event_codec
from unirender.simulator import family_of


class IncarnationChanged(Exception):
    """The actor was restarted since the driver last saw it (``args[0]``: the new incarnation)."""


class AI2ThorEvents:
    """How an AI2-THOR ``Event`` (or ``MultiAgentEvent``) crosses the object store: as plain data, its frames made
    C-contiguous so that Ray serialises them out-of-band (one copy into the object store, none on the driver,
    which gets read-only views of it), its metadata as the player's msgpack bytes where the event still has them
    (never decoded in the actor; the driver's event decodes them on first access, its step keys given as read)."""

    @classmethod
    def pack(cls, event: Any) -> tuple:
        from unirender.protocol.event import MultiAgentEvent

        if isinstance(event, MultiAgentEvent):
            return ("multi", event.active_agent_id, [cls.pack(e) for e in event.events])
        frames = {name: np.ascontiguousarray(array) for name, array in event.frames().items()}
        options = {
            "depth_format": event.depth_format.name,
            "camera_near_plane": event.camera_near_plane,
            "camera_far_plane": event.camera_far_plane,
        }
        raw = event.metadata_msgpack()
        if raw is not None:
            return ("raw", bytes(raw), event.step_keys(), frames, options)
        return ("event", dict(event.metadata), frames, options)

    @classmethod
    def unpack(cls, packed: tuple) -> Any:
        from unirender.protocol.event import Event, MultiAgentEvent

        kind = packed[0]
        if kind == "multi":
            return MultiAgentEvent(packed[1], [cls.unpack(p) for p in packed[2]])
        if kind == "raw":
            from unirender.protocol.metadata import one_agent_document

            _, raw, step, frames, options = packed
            return Event.from_frames(one_agent_document(raw), frames, step=step, **options)
        _, metadata, frames, options = packed
        return Event.from_frames(metadata, frames, **options)


class PickledEvents:
    """Events that Ray pickles as they are (an ``MLAgentsEvent``: small, its images still PNG bytes)."""

    @staticmethod
    def pack(event: Any) -> Any:
        return event

    @staticmethod
    def unpack(packed: Any) -> Any:
        return packed


class SessionActor:
    """Plain class; :mod:`unirender.cluster.ray_backend` wraps it with ``ray.remote(...).options(...)``."""

    def __init__(self, controller_kwargs: dict, build_fetch: dict | None = None):
        self._kwargs = dict(controller_kwargs)
        # The pinned build to fetch into this node's store before the player starts (ray_builds.ensure_build).
        self._build_fetch = build_fetch
        self.build_fetched: dict | None = None  # what the fetch moved (None: not asked yet)
        self._events = event_codec(family_of(self._kwargs))  # the family's, looked up once
        self._controller: Any = None
        self.incarnation = uuid.uuid4().hex

    # -- cheap, no player needed --------------------------------------------------------------------------
    def ping(self) -> None:
        """An empty call: the floor of any per-step cost through Ray (measured by benchmarks/scale.py)."""

    def placed(self) -> dict:
        import ray

        ctx = ray.get_runtime_context()
        info = {
            "incarnation": self.incarnation,
            "node": ctx.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "actor_pid": os.getpid(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "build_fetched": self.build_fetched,
        }
        if self._controller is not None:
            info.update(placement_info(self._controller))
        return info

    # -- player ---------------------------------------------------------------------------------------------
    def start(self, incarnation: str | None) -> tuple[dict, Any]:
        """Start the player if needed; returns ``(placed(), packed first event or None)``."""
        self._check(incarnation)
        self._ensure_started()
        event = getattr(self._controller, "last_event", None)
        return self.placed(), (self._events.pack(event) if event is not None else None)

    def step(self, incarnation: str, action: Any, kwargs: dict) -> Any:
        """The family's action as the session was given it (the simulator normalises it)."""
        self._check(incarnation)
        return self._events.pack(self._ensure_started().step(action, **kwargs))

    def reset(self, incarnation: str, scene: str | None, params: dict) -> tuple[dict, dict]:
        self._check(incarnation)
        return self._events.pack(self._ensure_started().reset(scene, **params))

    def describe(self, incarnation: str | None):
        """The player's ``Description`` (``unirender.simulator``)."""
        self._check(incarnation)
        return self._ensure_started().describe()

    def last_event(self) -> tuple[dict, dict] | None:
        event = getattr(self._controller, "last_event", None)
        return self._events.pack(event) if event is not None else None

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()

    # -- internals ---------------------------------------------------------------------------------------
    def _check(self, incarnation: str | None) -> None:
        if incarnation is not None and incarnation != self.incarnation:
            raise IncarnationChanged(self.incarnation)

    def _ensure_started(self) -> Any:
        if self._controller is None and self._build_fetch is not None and self.build_fetched is None:
            # Before the player: the build in this node's store (a lock makes sessions starting at once on this
            # node fetch once). A failed fetch raises BuildFetchError, which fails the session's creation.
            from dataclasses import asdict

            from unirender.cluster.ray_builds import ensure_build

            self.build_fetched = asdict(ensure_build(self._build_fetch))
        if self._controller is None:
            # A GPU Ray gave this actor shows up as CUDA_VISIBLE_DEVICES, which the Controller reads (protocol.md 6.2).
            from unirender.cluster.simulators import launch

            self._controller = launch(self._kwargs)
        return self._controller
