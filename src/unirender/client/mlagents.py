"""The ML-Agents family's client adapter: :class:`RemoteMLAgentsSession`, whose events are
:class:`unirender.remote_events.RemoteMLAgentsEvent` (``MLAgentsEvent``'s reading API, without protobuf), registered
in ``client.REMOTE_SESSIONS``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from unirender.client import RemoteSessionBase
from unirender.remote_events import RemoteMLAgentsEvent
from unirender.simulator import MLAGENTS

if TYPE_CHECKING:
    from unirender.client import Client


class RemoteMLAgentsSession(RemoteSessionBase[RemoteMLAgentsEvent]):
    """An ML-Agents session: ``step({behavior: {"continuous": rows, "discrete": rows}})`` (arrays or lists, one
    row per decision agent; a behavior left out gets zeros) and ``reset(**environment_parameters)`` return a
    :class:`RemoteMLAgentsEvent` (``steps(behavior)``, ``frames(behavior)``, ``decision_steps``, ... as
    ``MLAgentsEvent``; ``metadata``: the records as sent)."""

    family = MLAGENTS

    def __init__(self, client: Client, info: dict, modalities: list[str] | None = None):
        super().__init__(client, info, modalities)
        self._described = info.get("description")  # the sensors' order and shapes, once

    @staticmethod
    def event_of(doc: dict, description: dict | None) -> RemoteMLAgentsEvent:
        return RemoteMLAgentsEvent.from_document(doc, description)

    def _description(self) -> dict | None:
        if self._described is None:
            self._described = self.describe()
        return self._described

    def step(self, actions: Mapping | None = None) -> RemoteMLAgentsEvent:
        return self._event("step", self.action_body(actions))

    def action_body(self, actions: Mapping | None) -> dict:
        return {"actions": {name: {kind: (rows.tolist() if hasattr(rows, "tolist") else rows)
                                   for kind, rows in action_parts(given).items() if rows is not None}
                            for name, given in (actions or {}).items()}}  # fmt: skip

    def reset(self, scene: None = None, **environment_parameters: float) -> RemoteMLAgentsEvent:
        """New episodes with ``environment_parameters``; ``scene`` is there for the port's ``reset(scene, ...)``
        (an ML-Agents game has none)."""
        if scene is not None:
            raise ValueError("an ML-Agents game has no scenes: reset(None, **environment_parameters)")
        return self._event("reset", {"environment_parameters": environment_parameters})

    def __enter__(self) -> RemoteMLAgentsSession:
        return self


def action_parts(given: Any) -> dict:
    """A behavior's actions as ``{"continuous": rows, "discrete": rows}``: a mapping, or an object with those
    attributes (mlagents-envs' ``ActionTuple``, what the jobs' policies give)."""
    if isinstance(given, Mapping):
        return dict(given)
    return {"continuous": getattr(given, "continuous", None), "discrete": getattr(given, "discrete", None)}


__all__ = ["RemoteMLAgentsSession", "action_parts"]
