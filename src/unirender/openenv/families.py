"""The OpenEnv layer's family registry: ``environment.protocol`` -> the adapter that turns the family's events
into :class:`~unirender.openenv.models.UnirenderObservation` parts and OpenEnv actions into what the family's
session ``step`` takes. Looked up once, when the server starts; nothing per step. A family not listed here is
refused when ``unirender openenv serve`` starts, naming those that are.

An adapter is made per session, once its player has started, from ``session.describe()``
(:class:`unirender.simulator.Description`) and the declared modalities, and has:

- ``action_spec`` / ``observation_spec`` (dicts for ``state`` and every observation), ``behavior_name``;
- ``declare(environment, document)`` (static): controller kwargs and modalities from the loaded environment
  model and the spec document;
- ``launch_overrides(seed)``: controller kwargs for a launch by ``reset(seed=...)``;
- ``reseeds(seed)``: whether a reset with this seed needs a fresh player;
- ``first_event(session, launched, options)``: the event a reset starts from;
- ``session_action(action, last_event)``: what ``session.step`` takes (``ValueError`` for a bad action, before
  anything is sent);
- ``outcome(session, event, visual)``: an :class:`Outcome`, with images only when ``visual`` (the session asked
  for them: reading a frame decodes or converts it); the adapter may step the session again, e.g. while no agent
  asks for a decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, load_registered

OPENENV_FAMILIES: dict[str, str] = {
    AI2THOR: "unirender.openenv.ai2thor:AI2ThorAdapter",
    MLAGENTS: "unirender.openenv.mlagents:MLAgentsAdapter",
    WEBGL: "unirender.openenv.webgl:WebGLAdapter",
}


@dataclass
class Outcome:
    """One event as an OpenEnv observation's parts (images by name in declared order, not yet encoded)."""

    event: Any
    images: dict[str, np.ndarray] = field(default_factory=dict)
    vector: list[float] = field(default_factory=list)
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


def adapter_class(family: str) -> type:
    return load_registered(
        OPENENV_FAMILIES,
        family,
        lambda: ValueError(
            f"no OpenEnv adapter for protocol {family!r}; unirender openenv serves {', '.join(OPENENV_FAMILIES)}"
        ),
    )
