"""The render service: one WSGI app for clients (``/v1/*``) and for WSGI players (``/train``).

``create_app(config)`` builds the app; ``unirender serve`` runs it on waitress (see docs/service.md).
"""

from unirender.service.app import ServiceApp, create_app
from unirender.service.config import Limits, ServiceConfig, load_config

__all__ = ["Limits", "ServiceApp", "ServiceConfig", "create_app", "load_config"]
