"""Unity ML-Agents games: ``MLAgentsController`` and the types its events carry (see ``docs/mlagents.md``).

Needs the ``mlagents`` extra (grpcio, protobuf); they are imported when a controller is created or a protocol
type is first used, so ``import unirender`` does not need them.
"""

from __future__ import annotations

import unirender.transport.grpc  # noqa: F401  (first: it sets GRPC_ENABLE_FORK_SUPPORT before grpc loads)
from unirender.mlagents.controller import BUILTIN, EDITOR_PORT, MLAgentsController

_PROTOCOL_NAMES = ("ActionSpec", "ActionTuple", "BehaviorSpec", "DecisionSteps", "MLAgentsEvent", "ObservationSpec",
                   "Sampler", "TerminalSteps", "VersionMismatchError", "CommunicatorStoppedError", "HWC", "CHW")  # fmt: skip


def __getattr__(name: str):  # the protocol types need protobuf: load them on first use
    if name in _PROTOCOL_NAMES:
        import unirender.protocol.mlagents as core

        return getattr(core, name)
    raise AttributeError(f"module 'unirender.mlagents' has no attribute {name!r}")


__all__ = ["BUILTIN", "EDITOR_PORT", "MLAgentsController", *_PROTOCOL_NAMES]
