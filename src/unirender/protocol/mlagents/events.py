"""The decoded form of one Unity output, :class:`MLAgentsEvent`: per behavior the decision and terminal steps, the
stats and other side-channel records. Numpy only (no protobuf): the trainer protocol builds it from the game's
messages, a remote client (``unirender.client.mlagents``) from the arrays the service sends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unirender.protocol.mlagents import side_channels as sc
from unirender.protocol.mlagents.steps import DecisionSteps, TerminalSteps


@dataclass
class MLAgentsEvent:
    """One Unity output, decoded (what ``reset()``/``step()`` return).

    - ``decision_steps[behavior]`` / ``terminal_steps[behavior]``: :class:`DecisionSteps` / :class:`TerminalSteps`
      (an agent whose episode just ended and that already wants its next decision is in both).
    - ``frames(behavior)``: the decision agents' camera frames, ``{sensor name: uint8 (n, H, W, C)}``.
    - ``stats``: the stats channel's records, ``{key: [(value, aggregation), ...]}``.
    - ``side_channel_messages``: every other side-channel record (user channels), unparsed, in order.
    - ``metadata``: what the service sent with an event a remote client built (``step``, ``behaviors``: the
      records as sent); empty for a game's own event.
    """

    decision_steps: dict[str, DecisionSteps]
    terminal_steps: dict[str, TerminalSteps]
    stats: dict[str, list[tuple[float, sc.StatsAggregation | int]]] = field(default_factory=dict)
    side_channel_messages: list[sc.SideChannelMessage] = field(default_factory=list)
    new_behaviors: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def behavior_names(self) -> list[str]:
        return list(self.decision_steps)

    @property
    def step(self) -> int:
        """A remote event's step count on the service (``metadata["step"]``; a reset does not count); 0 for a
        game's own event."""
        return int(self.metadata.get("step", 0))

    def _name(self, behavior: str | None) -> str:
        if behavior is None:
            if len(self.decision_steps) != 1:
                raise ValueError(f"pass a behavior name; this environment has {self.behavior_names}")
            return next(iter(self.decision_steps))
        if behavior not in self.decision_steps:
            raise KeyError(f"unknown behavior {behavior!r}; known: {self.behavior_names}")
        return behavior

    def frames(self, behavior: str | None = None) -> dict[str, np.ndarray]:
        """``{sensor name: uint8 (n, H, W, C)}`` for the decision agents of ``behavior`` (default: the only one)."""
        return self.decision_steps[self._name(behavior)].frames

    def steps(self, behavior: str | None = None) -> tuple[DecisionSteps, TerminalSteps]:
        name = self._name(behavior)
        return self.decision_steps[name], self.terminal_steps[name]


__all__ = ["MLAgentsEvent"]
