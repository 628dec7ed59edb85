"""The render service: one WSGI app for clients (``/v1/*``) and for WSGI players (``/train``).

``create_app(config)`` builds the app; ``unirender serve`` runs it on waitress (see docs/service.md). The names
below are imported on first use, so that ``unirender.service.cli`` (and ``unirender serve``'s message naming the
missing ``[service]`` extra) loads without the extra installed.
"""

from importlib import import_module

_LAZY = {
    "ServiceApp": "unirender.service.app",
    "create_app": "unirender.service.app",
    "Limits": "unirender.service.config",
    "ServiceConfig": "unirender.service.config",
    "load_config": "unirender.service.config",
}

__all__ = ["Limits", "ServiceApp", "ServiceConfig", "create_app", "load_config"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'unirender.service' has no attribute {name!r}")
