"""unirender: declarative headless rendering for Unity-based environments.

Public surface (imported lazily so that ``import unirender`` stays cheap):
``Controller``, ``Event``, ``MultiAgentEvent``, ``render``, ``load_dataset``; the port every family implements
(``Simulator``, ``Description``: :mod:`unirender.simulator`); the entry points of a program that drives sessions
(``Client``: :mod:`unirender.client`; ``load_spec``: :mod:`unirender.spec`; ``create_backend``:
:mod:`unirender.cluster`); and the errors in :mod:`unirender.errors`.
"""

from __future__ import annotations

from importlib import import_module

from unirender.errors import (
    ActionError,
    PlatformError,
    PlayerCrashedError,
    PlayerError,
    PlayerTimeoutError,
    RestartError,
    SpecError,
    UnirenderError,
)

__version__ = "0.1.0"

_LAZY = {
    "Controller": "unirender.controller",
    "Event": "unirender.protocol.event",
    "MultiAgentEvent": "unirender.protocol.event",
    "render": "unirender.jobs",
    "load_dataset": "unirender.jobs",
    "Simulator": "unirender.simulator",
    "Description": "unirender.simulator",
    "Client": "unirender.client",
    "load_spec": "unirender.spec",
    "create_backend": "unirender.cluster",
}

__all__ = [
    "ActionError",
    "Client",
    "Controller",
    "Description",
    "Event",
    "MultiAgentEvent",
    "PlatformError",
    "PlayerCrashedError",
    "PlayerError",
    "PlayerTimeoutError",
    "RestartError",
    "Simulator",
    "SpecError",
    "UnirenderError",
    "create_backend",
    "load_dataset",
    "load_spec",
    "render",
    "__version__",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'unirender' has no attribute {name!r}")
