"""Agent names and action masks shared by the PettingZoo wrappers (mlagents-envs' ``env_helpers``)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np


def behavior_to_agent_id(behavior_name: str, unique_id: int) -> str:
    return f"{behavior_name}?agent_id={unique_id}"


def agent_id_to_behavior(agent_id: str) -> str:
    return agent_id.split("?agent_id=")[0]


def _parse_behavior(full_behavior: str) -> tuple[str, int]:
    """``"Name?team=1"`` -> ``("Name", 1)``."""
    parsed = urlparse(full_behavior)
    ids = parse_qs(parsed.query)
    return parsed.path, int(ids["team"][0]) if "team" in ids else 0


def sample_mask(action_mask: list[np.ndarray], branches: tuple[int, ...], continuous: bool):
    """One agent's ML-Agents mask (per branch, True = forbidden) -> what its Gymnasium action space's
    ``sample(mask=...)`` takes (int8, 1 = allowed): an array for ``Discrete``, a tuple per branch for
    ``MultiDiscrete``, ``(None, that)`` for hybrid ``Tuple(Box, ...)`` spaces."""
    allowed = tuple((~np.asarray(m, bool)).astype(np.int8) for m in action_mask)
    discrete = allowed[0] if len(branches) == 1 else allowed
    return (None, discrete) if continuous else discrete
