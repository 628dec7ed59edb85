"""OpenEnv servers for unirender environments (the ``openenv`` extra): ``unirender openenv serve SPEC`` serves the
declared environment (AI2-THOR, ML-Agents or a WebGL build; any session backend) to OpenEnv clients over
OpenEnv's own ``create_app``, one player per WebSocket session. See docs/openenv.md.

The models load on first use: importing this package (as the CLI does to register ``openenv serve``) must not
load openenv-core, whose server module pulls in gradio and pandas (seconds of CPU on every ``unirender`` call)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unirender.openenv.models import UnirenderAction, UnirenderObservation, UnirenderState

__all__ = ["UnirenderAction", "UnirenderObservation", "UnirenderState"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from unirender.openenv import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
