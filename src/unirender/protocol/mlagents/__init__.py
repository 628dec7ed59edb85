"""Sans-I/O Unity ML-Agents communicator protocol (communication API 1.5.0): messages, handshake and step state
machine, observation decoding, side channels. The messages need the ``mlagents`` extra (protobuf); nothing here
does I/O.

- ``communicator_objects.proto`` / ``_pb2``: the wire messages (package ``communicator_objects``).
- :mod:`.trainer`: :class:`TrainerProtocol`, the Python (server) side's state machine over request bytes.
- :mod:`.events`: :class:`MLAgentsEvent`, what a step gives (numpy only).
- :mod:`.steps`: ``BehaviorSpec``, ``DecisionSteps``/``TerminalSteps``, ``ActionTuple`` (numpy only).
- :mod:`.observations`: PNG / concatenated PNG / float decoding, HWC and CHW.
- :mod:`.side_channels`: record framing and the engine, environment-parameter and stats payloads.
- :mod:`.versions`: communication version check, layout per package generation.

The names below load their module on first use: ``import unirender.protocol.mlagents.steps`` (what a remote
client's events are made of) loads neither protobuf nor the trainer.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from unirender.protocol.mlagents.errors import (
        CommunicatorStoppedError,
        MLAgentsProtocolError,
        ObservationError,
        SideChannelError,
        VersionMismatchError,
    )
    from unirender.protocol.mlagents.events import MLAgentsEvent
    from unirender.protocol.mlagents.side_channels import (
        EngineConfig,
        Sampler,
        SideChannelMessage,
        StatsAggregation,
    )
    from unirender.protocol.mlagents.steps import (
        ActionSpec,
        ActionTuple,
        BehaviorSpec,
        DecisionSteps,
        ObservationSpec,
        TerminalSteps,
    )
    from unirender.protocol.mlagents.trainer import TrainerProtocol, UnityInfo
    from unirender.protocol.mlagents.versions import CHW, COMMUNICATION_VERSION, HWC

_HOMES = {
    "errors": ["CommunicatorStoppedError", "MLAgentsProtocolError", "ObservationError", "SideChannelError",
               "VersionMismatchError"],
    "events": ["MLAgentsEvent"],
    "side_channels": ["EngineConfig", "Sampler", "SideChannelMessage", "StatsAggregation"],
    "steps": ["ActionSpec", "ActionTuple", "BehaviorSpec", "DecisionSteps", "ObservationSpec", "TerminalSteps"],
    "trainer": ["TrainerProtocol", "UnityInfo"],
    "versions": ["CHW", "COMMUNICATION_VERSION", "HWC"],
}  # fmt: skip
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME_OF})


__all__ = [
    "CHW", "COMMUNICATION_VERSION", "HWC", "ActionSpec", "ActionTuple", "BehaviorSpec", "CommunicatorStoppedError",
    "DecisionSteps", "EngineConfig", "MLAgentsProtocolError", "ObservationError", "ObservationSpec", "Sampler",
    "SideChannelError", "SideChannelMessage", "StatsAggregation", "MLAgentsEvent", "TerminalSteps", "TrainerProtocol",
    "UnityInfo", "VersionMismatchError",
]  # fmt: skip
