"""The session backends by name: ``create_backend("local" | "ray" | "service", **options)``.

Each backend is imported by name only when asked for (the Ray one needs ``unirender[ray]``), so this module, not
``base``, knows the subclasses: ``base`` stays below every backend and no import cycle runs through it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from unirender.errors import UnirenderError

if TYPE_CHECKING:
    from unirender.cluster.base import SessionBackend

# kind -> (module, class, the extra it needs or None)
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "local": ("unirender.cluster.local", "LocalBackend", None),
    "ray": ("unirender.cluster.ray_backend", "RayBackend", "ray"),
    "service": ("unirender.cluster.service_backend", "ServiceBackend", None),
}
BACKEND_KINDS = tuple(BACKENDS)


def backend_class(kind: str) -> type[SessionBackend]:
    """The backend class registered as ``kind``; a clear error for an unknown kind or a missing extra."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown session backend {kind!r}; expected one of {', '.join(BACKEND_KINDS)}")
    module_name, class_name, extra = BACKENDS[kind]
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra is None or not exc.name or exc.name.split(".")[0] != extra:
            raise
        raise UnirenderError(f"the {kind} backend needs {exc.name}: pip install 'unirender[{extra}]'") from exc
    return getattr(module, class_name)


def create_backend(kind: str = "local", **options: Any) -> SessionBackend:
    """``"local"`` -> ``LocalBackend``, ``"ray"`` -> ``RayBackend`` (needs ``unirender[ray]``), ``"service"`` ->
    ``ServiceBackend`` (a running ``unirender serve``'s sessions).

    ``options`` go to the backend's constructor (e.g. ``max_sessions``, ``gpus``; for Ray ``address``; for the
    service ``url`` and ``token``).
    """
    return backend_class(kind)(**options)
