"""Unity ML-Agents games (see ``docs/mlagents.md``): ``MLAgentsController``, and mlagents-envs 1.1's low-level
API as a drop-in (``UnityEnvironment``, ``ActionTuple``, ``BehaviorSpec``, ..., with mlagents-envs' names and
semantics; ``unirender.mlagents.side_channel`` and ``unirender.mlagents.envs`` mirror mlagents-envs' modules).

Needs the ``mlagents`` extra (grpcio, protobuf); they are imported when a controller or environment is created or
a protocol type is first used, so ``import unirender`` does not need them.
"""

from __future__ import annotations

import importlib

import unirender.transport.grpc  # noqa: F401  (first: it sets GRPC_ENABLE_FORK_SUPPORT before grpc loads)
from unirender.mlagents.controller import BUILTIN, EDITOR_PORT, MLAgentsController

# The protocol core's types (what MLAgentsController's events carry).
_PROTOCOL_NAMES = ("MLAgentsEvent", "Sampler", "VersionMismatchError", "CommunicatorStoppedError", "HWC", "CHW")
# mlagents-envs' names, by the module that defines them here (as in mlagents_envs).
_DROP_IN_NAMES = {
    "unirender.mlagents.environment": ("UnityEnvironment",),
    "unirender.mlagents.base_env": (
        "ActionSpec", "ActionTuple", "BaseEnv", "BehaviorMapping", "BehaviorSpec", "DecisionStep", "DecisionSteps",
        "DimensionProperty", "ObservationSpec", "ObservationType", "TerminalStep", "TerminalSteps",
    ),
    "unirender.mlagents.exception": (
        "UnityActionException", "UnityCommunicationException", "UnityCommunicatorStoppedException",
        "UnityEnvironmentException", "UnityException", "UnityObservationException", "UnityPolicyException",
        "UnitySideChannelException", "UnityTimeOutException", "UnityWorkerInUseException",
    ),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _DROP_IN_NAMES.items() for name in names}


def __getattr__(name: str):  # protobuf and numpy-heavy types load on first use
    if name in _PROTOCOL_NAMES:
        import unirender.protocol.mlagents as core

        return getattr(core, name)
    if name in _MODULE_OF:
        return getattr(importlib.import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module 'unirender.mlagents' has no attribute {name!r}")


__all__ = ["BUILTIN", "EDITOR_PORT", "MLAgentsController", *_PROTOCOL_NAMES, *_MODULE_OF]
