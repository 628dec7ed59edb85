"""unirender: declarative headless rendering for Unity-based environments.

Public surface (imported lazily so that ``import unirender`` stays cheap):
``Controller``, ``Event``, ``MultiAgentEvent``, ``render``, ``load_dataset`` and the errors in
:mod:`unirender.errors`.
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
}

__all__ = [
    "ActionError",
    "Controller",
    "Event",
    "MultiAgentEvent",
    "PlatformError",
    "PlayerCrashedError",
    "PlayerError",
    "PlayerTimeoutError",
    "RestartError",
    "SpecError",
    "UnirenderError",
    "load_dataset",
    "render",
    "__version__",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'unirender' has no attribute {name!r}")
