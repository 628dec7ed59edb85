"""The service's web console under ``/ui/`` (docs/console.md)."""

from unirender.service.ui.console import PREFIX, Console

__all__ = ["PREFIX", "Console"]
