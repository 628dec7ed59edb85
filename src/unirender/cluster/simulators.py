"""The simulator registry: ``environment.protocol`` -> the launcher of that family's :class:`Simulator`.

This is the one place above the controllers that maps a family name to code. Every backend starts a session's
player with :func:`launch` (``controller_kwargs["protocol"]`` names the family, AI2-THOR when absent); what comes
back has the port's verbs (``reset``, ``step``, ``describe``, ``stop``, ``last_event``: ``unirender.simulator``).
A third family adds one line here (and one per layer that reads its events: ``docs/internals.md``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from unirender.simulator import (
    AI2THOR,
    MLAGENTS,
    WEBGL,
    FlatCameraWarning,
    Simulator,
    family_of,
    flat_camera_message,
    flat_cameras,
    load_registered,
    load_target,
)

# family -> "module:callable" taking the controller kwargs (without "protocol") and returning a started Simulator
LAUNCHERS: dict[str, str] = {
    AI2THOR: "unirender.controller:Controller",
    MLAGENTS: "unirender.cluster.mlagents:MLAgentsSimulator",
    WEBGL: "unirender.webgl.controller:launch",
}
# family -> "module:callable" launching that family's builds made for the WebGL platform, from the same kwargs as
# its launcher; launch() picks it when they name a Unity WebGL build (builds.resolve.names_webgl_build), so that
# everything above the port runs such a build as it runs the family's other builds (docs/webgl.md)
WEBGL_LAUNCHERS: dict[str, str] = {
    AI2THOR: "unirender.webgl.ai2thor:launch",
}
# family -> "module:function" giving an event's camera views keyed as Description.observations names them
CAMERA_READERS: dict[str, str] = {
    AI2THOR: "unirender.controller:camera_frames",
    MLAGENTS: "unirender.mlagents.controller:camera_frames",
    WEBGL: "unirender.webgl.controller:camera_frames",
}
# family -> "module:attribute" of how its events cross Ray's object store (pack in the actor, unpack on the
# driver); a family not listed is pickled as it is
RAY_EVENT_CODECS: dict[str, str] = {
    AI2THOR: "unirender.cluster.ray_actor:AI2ThorEvents",
}
# family -> the Ray runtime_env its actors need. ML-Agents: Ray's worker has loaded grpc before the actor runs, so
# only the start environment can turn gRPC's fork support off, which would otherwise make the launched game abort
# at random (transport/grpc.py).
RAY_RUNTIME_ENV: dict[str, dict] = {
    MLAGENTS: {"env_vars": {"GRPC_ENABLE_FORK_SUPPORT": "false"}},
}


def _load(table: Mapping[str, str], family: str, what: str) -> Callable:
    return load_registered(table, family, lambda: ValueError(
        f"no {what} registered for protocol {family!r}; known: {', '.join(table)}"))


def launcher(family: str) -> Callable[..., Simulator]:
    """The launcher registered for ``family`` (imported on first use, ``simulator.load_target``)."""
    return _load(LAUNCHERS, family, "simulator")


def camera_reader(family: str) -> Callable[[Any], dict]:
    """``reader(event) -> {camera key: uint8 image or (n, H, W, C) batch}`` for ``family``'s events."""
    return _load(CAMERA_READERS, family, "camera reader")


def event_codec(family: str) -> Any:
    """``codec.pack(event)`` / ``codec.unpack(packed)`` for ``family``'s events through Ray (see
    :data:`RAY_EVENT_CODECS`)."""
    return load_target(RAY_EVENT_CODECS.get(family, "unirender.cluster.ray_actor:PickledEvents"))


def flat_first_frame(simulator: Any) -> list[str]:
    """The cameras of a started simulator or session (anything with ``family``, ``last_event`` and
    ``describe()``) whose first frame is one flat colour (``[]`` when fine); warns (:class:`FlatCameraWarning`)
    naming the platform and the likely cause when there are any. The backends call it on every new session."""
    event = simulator.last_event
    if event is None:
        return []
    flat = flat_cameras(camera_reader(simulator.family)(event))
    if flat:
        warnings.warn(flat_camera_message(flat, simulator.describe()), FlatCameraWarning, stacklevel=3)
    return flat


def launch(controller_kwargs: Mapping[str, Any]) -> Simulator:
    """A started simulator of the family ``controller_kwargs["protocol"]`` names (see the module doc): its
    :data:`WEBGL_LAUNCHERS` entry for a Unity WebGL build, else its :data:`LAUNCHERS` entry."""
    from unirender.builds.resolve import names_webgl_build

    family = family_of(controller_kwargs)
    kwargs = {k: v for k, v in controller_kwargs.items() if k != "protocol"}
    if family in WEBGL_LAUNCHERS and names_webgl_build(kwargs):
        return _load(WEBGL_LAUNCHERS, family, "WebGL launcher")(**kwargs)
    return launcher(family)(**kwargs)
