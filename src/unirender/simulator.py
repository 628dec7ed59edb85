"""The simulator port: the verbs every Unity family shares, and what a simulator says about itself.

unirender speaks two families of Unity games below the controllers (AI2-THOR builds over FIFO or WSGI, ML-Agents
games over gRPC), and they are rightly different there. Above the controllers (spec, jobs, service, console,
cluster, gym, client) everything is written once against this port:

- a :class:`Simulator` has ``reset``, ``step``, ``describe`` and ``stop``, and ``last_event``; it is *launched* by
  the family registry of the cluster layer (``unirender.cluster.simulators.launch(kwargs)``), which is the one
  place that maps ``environment.protocol`` to a launcher;
- :meth:`Simulator.describe` returns a :class:`Description`: where it runs (pid, log, platform, device, build
  version) and a declared description of its actions and observations, from which validation, Gymnasium spaces,
  random and scripted policies and the console's controls are derived without asking which family it is.

Events are *not* unified (RLlib's lesson: a port that unifies events grows into a lowest common denominator): an
AI2-THOR simulator returns :class:`unirender.Event`, an ML-Agents one :class:`unirender.mlagents.MLAgentsEvent`;
each is a public compatibility surface. Layers that must read events (a dataset writer, a service document, a
console view, a gym observation) find the family's reader in their own small registry, once, when the session,
job or env is created, never per step.

This module is plain data and numpy (no imports of controllers, transports or extras), so every layer may import
it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import import_module
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

AI2THOR, MLAGENTS, WEBGL = "ai2thor", "mlagents", "webgl"
BUILTIN = "builtin"  # the executable name of the reference player, in every family
FAMILIES: tuple[str, ...] = (AI2THOR, MLAGENTS, WEBGL)  # every environment.protocol unirender knows


_import_lock = threading.Lock()


def load_target(target: str) -> Any:
    """``"module:attribute"`` (a registry entry of any layer) imported and returned, under one process-wide lock:
    two threads importing a family's modules for the first time at once can each meet the other's
    half-initialised module (Python's import deadlock avoidance) and fail with an ImportError; players are
    launched from worker and launcher threads, requests arrive on many."""
    module_name, _, attribute = target.partition(":")
    with _import_lock:
        module = import_module(module_name)
    return getattr(module, attribute)


def load_registered(table: Mapping[str, str], name: str, missing: Callable[[], BaseException]) -> Any:
    """The target of ``name``'s line in a registry ``table`` (``{name: "module:attribute"}``), loaded with
    :func:`load_target`; ``missing()`` is raised when the table has no such line."""
    try:
        target = table[name]
    except KeyError:
        raise missing() from None
    return load_target(target)


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module's ``__getattr__`` for names whose home is now another module (``{name: "module:attribute"}``,
    loaded on first use): ``__getattr__ = moved_names(__name__, {...})``."""

    def __getattr__(name: str) -> Any:
        if name in moved:
            return load_target(moved[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def family_of(controller_kwargs: Mapping[str, Any]) -> str:
    """The family named by a session's controller kwargs (``protocol``; AI2-THOR when absent)."""
    family = controller_kwargs.get("protocol") or AI2THOR
    if family not in FAMILIES:
        raise ValueError(f"unknown environment protocol {family!r}; expected one of {', '.join(FAMILIES)}")
    return family


@dataclass(frozen=True)
class BehaviorActions:
    """One ML-Agents behavior's action space: ``continuous`` floats in [-1, 1] and one choice per discrete
    branch (``discrete[i]`` choices in branch ``i``)."""

    continuous: int
    discrete: tuple[int, ...] = ()


@dataclass(frozen=True)
class ActionDescription:
    """What ``step`` takes.

    ``kind="named"`` (AI2-THOR): an action name and its parameters; ``names`` are the actions the player is known
    to implement (the reference player's table), empty when unknown (a Unity build implements what it implements).
    ``kind="behaviors"`` (ML-Agents): ``{behavior: actions}`` with ``behaviors`` giving each behavior's space.
    """

    kind: Literal["named", "behaviors"]
    names: tuple[str, ...] = ()
    behaviors: Mapping[str, BehaviorActions] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservationDescription:
    """One observation an event carries.

    ``key``: where it is found: an AI2-THOR frame attribute (``frame``, ``depth_frame``, ``third_party_camera_frames.0``)
    or ``<behavior>/<sensor>`` for ML-Agents. ``kind``: ``image`` (``shape`` is H, W[, C] as handed to users:
    HWC uint8 for colour, H, W float32 for depth) or ``vector``. ``camera``: a rendered camera view (a flat one
    means no GPU context or ``-nographics``). ``behavior``: the ML-Agents behavior it belongs to. ``layout``: an
    ML-Agents camera's ``HWC`` or ``CHW``, how the game lays out its float observation (``obs``; its frames and
    ``shape`` are HWC whatever the layout), so a remote event lays its ``obs`` out as a local one.
    """

    key: str
    kind: Literal["image", "vector"]
    shape: tuple[int, ...]
    dtype: str
    camera: bool = False
    behavior: str | None = None
    layout: Literal["HWC", "CHW"] | None = None


@dataclass(frozen=True)
class Description:
    """What a simulator says about itself (:meth:`Simulator.describe`)."""

    family: str
    actions: ActionDescription
    observations: tuple[ObservationDescription, ...] = ()
    pid: int | None = None
    log_path: str | None = None
    platform: str | None = None
    device: str | None = None
    software_device: bool | None = None
    server_type: str | None = None
    build_version: str | None = None

    def placement(self) -> dict:
        """The where-it-runs part, as ``Session.info()`` reports it."""
        return {
            "platform": self.platform,
            "device": self.device,
            "software_device": self.software_device,
            "pid": self.pid,
            "server_type": self.server_type,
            "log_path": self.log_path,
        }

    def cameras(self) -> tuple[ObservationDescription, ...]:
        return tuple(o for o in self.observations if o.camera)

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["actions"]["behaviors"] = {k: asdict(v) for k, v in self.actions.behaviors.items()}
        return doc


@runtime_checkable
class Simulator(Protocol):
    """One launched player of some family, as the upper layers use it.

    ``reset(scene=None, **params)``: new episode(s) (AI2-THOR: a scene and Initialize parameters; ML-Agents:
    environment parameters, no scene); ``step(action)``: one action in the family's own form (see
    :attr:`ActionDescription.kind`); both return the family's event and raise the controllers' errors
    (``RestartError`` after a crash the controller recovered from, ``PlayerError`` when it could not).
    ``describe()`` is cheap after the first event; ``stop()`` is idempotent and leaves nothing behind.
    """

    family: str
    last_event: Any

    def reset(self, scene: Any = None, **params: Any) -> Any: ...

    def step(self, action: Any = None) -> Any: ...

    def describe(self) -> Description: ...

    def stop(self) -> None: ...


@runtime_checkable
class SplitStepSimulator(Protocol):
    """The optional capability of a simulator whose step can be split in two: ``begin_step(action)`` sends the
    action now and returns a function that receives its event (or raises what ``step`` would). AI2-THOR's
    ``Controller`` has it; a session asks once, when its player starts, and steps one without it on a thread."""

    def begin_step(self, action: Any = None, **kwargs: Any) -> Callable[[], Any]: ...


def describe_placement(controller: Any) -> dict:
    """pid, log, platform and device of a controller of either family (their shared attributes)."""
    resolution = getattr(controller, "resolution", None)
    platform = getattr(resolution, "platform", None)
    device = getattr(resolution, "device", None)
    process = getattr(controller, "process", None)
    return {
        "platform": getattr(platform, "name", None) or (type(platform).__name__ if platform else None),
        "device": getattr(device, "name", None),
        "software_device": getattr(device, "software", None),
        "pid": getattr(process, "pid", None),
        "log_path": str(getattr(controller, "log_path", None) or "") or None,
    }


class FlatCameraWarning(UserWarning):
    """A declared camera delivered one flat colour in its first frame (see :func:`flat_cameras`)."""


def flat_cameras(frames: Mapping[str, np.ndarray]) -> list[str]:
    """The keys of ``frames`` (camera key -> uint8 image, or a batch ``(n, H, W, C)`` of agents' images) whose
    image is a single flat colour. A real first frame of a lit scene never is; one that is flat means the player
    had no rendering context (``-nographics``, no GPU or display reachable, a failed graphics device) and every
    later frame will be as empty: training on it "never converges" (ml-agents #6206, #4874)."""
    flat = []
    for key, image in frames.items():
        array = np.asarray(image)
        if array.size == 0:
            continue
        batch = array.reshape(-1, *array.shape[-3:]) if array.ndim >= 4 else array[None]
        if any(np.all(one == one.reshape(-1, one.shape[-1] if one.ndim == 3 else 1)[0]) for one in batch):
            flat.append(key)
    return flat


def flat_camera_message(keys: list[str], description: Description) -> str:
    """What to tell a user whose cameras came back flat (names the platform and the likely causes)."""
    where = description.platform or "an unknown platform"
    device = f" on {description.device}" if description.device else ""
    return (
        f"camera{'s' if len(keys) > 1 else ''} {', '.join(keys)} of the {description.family} player rendered one "
        f"flat colour in the first frame ({where}{device}): the player most likely has no rendering context "
        "(started with -nographics / no_graphics, no GPU or display it can use, or its graphics device failed); "
        "every frame will be blank. Check `unirender doctor` and the player log"
        + (f" ({description.log_path})" if description.log_path else "")
    )
