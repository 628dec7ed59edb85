"""The OpenEnv models of a unirender session: one action, observation and state model for every family.

Field names follow OpenEnv's own Unity environment (``envs/unity_env/models.py`` in OpenEnv's repository:
``UnityAction``, ``UnityObservation``, ``UnityState``) where a field means the same thing, so a client written for
it can be pointed at ``unirender openenv serve`` (what differs: ``docs/openenv.md``). AI2-THOR's action is its
action dict, in ``action``; a WebGL build's is a declared action's name, in ``action``.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field

# How images travel: "png" or "jpeg" (base64 strings in visual_observations, what vision-language agents read),
# "array" (raw pixels, base64 in `arrays` with dtype and shape: what RL trainers read, no codec cost).
ImageFormat = Literal["png", "jpeg", "array"]
IMAGE_FORMATS: tuple[str, ...] = ("png", "jpeg", "array")


class UnirenderAction(Action):
    """One step's action.

    AI2-THOR: ``action`` is the action dict (``{"action": "MoveAhead", "moveMagnitude": 0.25}``). WebGL: ``action``
    is a declared action's name (``"left"``; ``noop`` when left out). ML-Agents (as
    OpenEnv's ``UnityAction``): ``continuous_actions`` and/or ``discrete_actions``, a flat list given to every
    decision agent of ``behavior_name`` (the game's first behavior when left out), or one list per agent; a part
    left out is zeros.
    """

    action: dict[str, Any] | str | None = Field(
        default=None,
        description="AI2-THOR: the action dict, e.g. {'action': 'MoveAhead'}; WebGL: a declared action's name",
    )
    discrete_actions: list[int] | list[list[int]] | None = Field(
        default=None, description="ML-Agents: one index per discrete branch (or one such list per agent)"
    )
    continuous_actions: list[float] | list[list[float]] | None = Field(
        default=None, description="ML-Agents: continuous values in [-1, 1] (or one such list per agent)"
    )
    behavior_name: str | None = Field(
        default=None, description="ML-Agents: the behavior the actions are for (default: the game's first)"
    )


class EncodedArray(BaseModel):
    """A raw image: ``data`` is the C-ordered bytes, base64."""

    dtype: str
    shape: list[int]
    data: str


class UnirenderObservation(Observation):
    """What a reset or step returns. ``reward`` and ``done`` are OpenEnv's; ``info`` holds the family's step
    metadata (AI2-THOR: ``lastActionSuccess``, ``errorMessage``, the agent; ML-Agents: the agent id, the number of
    agents, ``interrupted``): OpenEnv's server leaves the observation's own ``metadata`` out of what it sends.

    Images, when the reset asked for them (``include_visual=True``), in the declared order of
    ``visual_observation_names``: ``visual_observations`` (base64 PNG or JPEG) or ``arrays`` (raw, by name).
    """

    vector_observations: list[float] = Field(
        default_factory=list, description="ML-Agents: the first agent's vector sensors, flattened"
    )
    visual_observations: list[str] | None = Field(
        default=None, description="base64 PNG or JPEG images (image_format png/jpeg), one per name"
    )
    visual_observation_names: list[str] = Field(
        default_factory=list, description="what each image is: the camera or modality, in declared order"
    )
    arrays: dict[str, EncodedArray] | None = Field(
        default=None, description="raw images by name (image_format array)"
    )
    info: dict[str, Any] = Field(
        default_factory=dict, description="the family's step metadata (OpenEnv's server drops `metadata`)"
    )
    behavior_name: str = Field(default="", description="ML-Agents: the behavior observed")
    action_spec_info: dict[str, Any] = Field(default_factory=dict, description="what step takes")
    observation_spec_info: dict[str, Any] = Field(default_factory=dict, description="what observations hold")


class UnirenderState(State):
    """``episode_id`` and ``step_count`` (OpenEnv's), the family, the declaration the server was started with,
    the action and observation specs, how images are sent, and where the player runs."""

    family: str = Field(default="", description="ai2thor, mlagents or webgl")
    env_id: str = Field(default="", description="the declared environment's name (its spec file)")
    declaration: dict[str, Any] = Field(default_factory=dict, description="the environment as declared")
    behavior_name: str = Field(default="", description="ML-Agents: the behavior observed")
    action_spec: dict[str, Any] = Field(default_factory=dict)
    observation_spec: dict[str, Any] = Field(default_factory=dict)
    include_visual: bool = False
    image_format: str = "png"
    player: dict[str, Any] = Field(
        default_factory=dict, description="pid, platform, device (none before reset)"
    )
