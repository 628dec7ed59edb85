"""Deprecated: a remote ML-Agents session's events are the core ``MLAgentsEvent`` now.

``unirender.client.RemoteMLAgentsSession`` (and ``Client.render`` of an ML-Agents episode) return
:class:`unirender.protocol.mlagents.MLAgentsEvent` with :class:`~unirender.protocol.mlagents.DecisionSteps` /
:class:`~unirender.protocol.mlagents.TerminalSteps`, built from the service's arrays by
``unirender.client.mlagents.event_from_document`` (numpy only: no protobuf, no grpc). The names that were defined
here (``RemoteMLAgentsEvent``, ``RemoteSteps``, ``RemoteDecisionSteps``, ``RemoteTerminalSteps``) still resolve, to
those core classes (``isinstance`` checks keep holding), with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

# old name -> (module, class, what to use instead)
_ALIASES = {
    "RemoteMLAgentsEvent": ("events", "MLAgentsEvent", "unirender.protocol.mlagents.MLAgentsEvent"),
    "RemoteSteps": ("steps", "_Steps", "unirender.protocol.mlagents.DecisionSteps / TerminalSteps"),
    "RemoteDecisionSteps": ("steps", "DecisionSteps", "unirender.protocol.mlagents.DecisionSteps"),
    "RemoteTerminalSteps": ("steps", "TerminalSteps", "unirender.protocol.mlagents.TerminalSteps"),
}


def __getattr__(name: str) -> Any:
    if name not in _ALIASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from unirender.protocol.mlagents import events, steps

    module, target, instead = _ALIASES[name]
    warnings.warn(f"unirender.remote_events.{name} is deprecated: a remote ML-Agents session's events are the core "
                  f"event's classes, use {instead}", DeprecationWarning, stacklevel=2)
    return getattr(events if module == "events" else steps, target)


__all__: list[str] = []
