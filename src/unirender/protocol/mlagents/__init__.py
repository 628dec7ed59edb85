"""Sans-I/O Unity ML-Agents communicator protocol (communication API 1.5.0): messages, handshake and step state
machine, observation decoding, side channels. Needs the ``mlagents`` extra (protobuf); nothing here does I/O.

- ``communicator_objects.proto`` / ``_pb2``: the wire messages (package ``communicator_objects``).
- :mod:`.trainer`: :class:`TrainerProtocol`, the Python (server) side's state machine over request bytes.
- :mod:`.steps`: ``BehaviorSpec``, ``DecisionSteps``/``TerminalSteps``, ``ActionTuple``.
- :mod:`.observations`: PNG / concatenated PNG / float decoding, HWC and CHW.
- :mod:`.side_channels`: record framing and the engine, environment-parameter and stats payloads.
- :mod:`.versions`: communication version check, layout per package generation.
"""

from unirender.protocol.mlagents.errors import (
    CommunicatorStoppedError,
    MLAgentsProtocolError,
    ObservationError,
    SideChannelError,
    VersionMismatchError,
)
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
from unirender.protocol.mlagents.trainer import MLAgentsEvent, TrainerProtocol, UnityInfo
from unirender.protocol.mlagents.versions import CHW, COMMUNICATION_VERSION, HWC

__all__ = [
    "CHW", "COMMUNICATION_VERSION", "HWC", "ActionSpec", "ActionTuple", "BehaviorSpec", "CommunicatorStoppedError",
    "DecisionSteps", "EngineConfig", "MLAgentsProtocolError", "ObservationError", "ObservationSpec", "Sampler",
    "SideChannelError", "SideChannelMessage", "StatsAggregation", "MLAgentsEvent", "TerminalSteps", "TrainerProtocol",
    "UnityInfo", "VersionMismatchError",
]  # fmt: skip
