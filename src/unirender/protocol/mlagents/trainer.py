"""The trainer (Python) side of the communicator as a sans-I/O state machine over message bytes.

Unity is the gRPC client and calls ``Exchange`` over and over; each request carries Unity's output and each
response Unity's next input. The transport hands every request's bytes to :meth:`TrainerProtocol.receive` and
sends back whatever bytes the protocol returns, when it returns them:

    H1 request (init output)  -> receive() checks versions and returns the H2 reply at once
    H3 request (header only)  -> receive() returns nothing: the call stays pending until reset()/step()/close()
    reset() / step(actions)   -> the reply bytes for the pending call
    next request (rl_output)  -> receive() returns a :class:`MLAgentsEvent`; the call stays pending again

States: ``AWAIT_INIT`` -> ``AWAIT_ACK`` -> ``READY`` (a call pending, we owe an input) -> ``AWAIT_OUTPUT`` ->
``READY`` ... -> ``CLOSED``.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unirender.protocol.mlagents import communicator_objects_pb2 as pb
from unirender.protocol.mlagents import side_channels as sc
from unirender.protocol.mlagents.actions import check_actions
from unirender.protocol.mlagents.errors import CommunicatorStoppedError, MLAgentsProtocolError
from unirender.protocol.mlagents.events import MLAgentsEvent
from unirender.protocol.mlagents.steps import (
    BehaviorSpec,
    behavior_spec_from,
    fill_action_list,
    split_steps,
)
from unirender.protocol.mlagents.versions import (
    COMMUNICATION_VERSION,
    HWC,
    check_communication_version,
    check_layout,
    unity_package_layout,
)

OK, CLOSE = 200, 400
# What we announce as our package: the current mlagents-envs, whose messages we match. A real game ignores it
# (com.unity.ml-agents 2.x-4.x only log it); a game that adapts to its trainer, like the reference player, reads
# its generation's image layout from it: 1.x CHW, 0.x HWC. We decode either, so we announce the HWC generation
# only when the caller forces HWC.
PACKAGE_VERSION = "1.1.0"
HWC_PACKAGE_VERSION = "0.28.0"


class State(enum.Enum):
    AWAIT_INIT = "await-init"
    AWAIT_ACK = "await-ack"
    READY = "ready"
    AWAIT_OUTPUT = "await-output"
    CLOSED = "closed"


@dataclass(frozen=True)
class UnityInfo:
    """What Unity said about itself in the handshake."""

    name: str
    communication_version: str
    package_version: str
    capabilities: dict[str, bool]
    layout: str  # HWC | CHW: the package generation's (unless overridden); see ObservationSpec.layout per sensor


@dataclass
class Received:
    """What :meth:`TrainerProtocol.receive` made of a request: ``reply`` to send now (or None: keep the call
    pending), and ``result`` when the request carried a step output."""

    reply: bytes | None = None
    result: MLAgentsEvent | None = None
    handshake_done: bool = False


def _message(status: int = OK) -> pb.UnityMessageProto:
    message = pb.UnityMessageProto()
    message.header.status = status
    return message


CLOSE_MESSAGE = _message(CLOSE).SerializeToString()  # b"\x0a\x03\x08\x90\x03"


def all_capabilities() -> pb.UnityRLCapabilitiesProto:
    return pb.UnityRLCapabilitiesProto(
        baseRLCapabilities=True, concatenatedPngObservations=True, compressedChannelMapping=True,
        hybridActions=True, trainingAnalytics=True, variableLengthObservation=True, multiAgentGroups=True,
    )  # fmt: skip


class TrainerProtocol:
    def __init__(
        self,
        *,
        seed: int = 0,
        num_areas: int = 1,
        layout: str | None = None,
        package_version: str | None = None,
        communication_version: str = COMMUNICATION_VERSION,
    ):
        self.seed, self.num_areas = int(seed), int(num_areas)
        if self.num_areas < 1:
            raise ValueError(f"num_areas must be >= 1, got {num_areas!r}")
        self.layout_override = check_layout(layout)
        if package_version is None:
            package_version = HWC_PACKAGE_VERSION if self.layout_override == HWC else PACKAGE_VERSION
        self.package_version, self.communication_version = package_version, communication_version
        self.state = State.AWAIT_INIT
        self.unity: UnityInfo | None = None
        self.behavior_specs: dict[str, BehaviorSpec] = {}
        # Non-done agents per behavior in the last output: how many actions each step must carry, in order.
        self.decision_counts: dict[str, int] = {}

    # -- Unity -> us ----------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> Received:
        if self.state in (State.READY, State.CLOSED):
            raise MLAgentsProtocolError(f"a Unity request arrived while {self.state.value} (one call at a time)")
        message = pb.UnityMessageProto()
        try:
            message.ParseFromString(data)
        except Exception as exc:  # protobuf's DecodeError, whatever the runtime
            raise MLAgentsProtocolError(f"a Unity request is not a UnityMessageProto ({exc})") from None
        if message.header.status != OK:
            self.state = State.CLOSED
            raise CommunicatorStoppedError(f"Unity closed the communicator (status {message.header.status})")
        if self.state is State.AWAIT_INIT:
            return Received(reply=self._handshake(message))
        if self.state is State.AWAIT_ACK:  # H3: header only; it stays pending until the first reset()
            self.state = State.READY
            return Received(handshake_done=True)
        self.state = State.READY
        return Received(result=self._decode_output(message.unity_output))

    def _handshake(self, message) -> bytes:
        if not message.unity_output.HasField("rl_initialization_output"):
            raise MLAgentsProtocolError("Unity's first request carries no rl_initialization_output")
        init = message.unity_output.rl_initialization_output
        try:
            check_communication_version(
                init.communication_version, ours=self.communication_version, package_version=init.package_version
            )
        except MLAgentsProtocolError:
            self.state = State.CLOSED
            raise
        caps = {f.name: getattr(init.capabilities, f.name) for f in pb.UnityRLCapabilitiesProto.DESCRIPTOR.fields}
        self.unity = UnityInfo(
            name=init.name,
            communication_version=init.communication_version,
            package_version=init.package_version,
            capabilities=caps,
            layout=self.layout_override or unity_package_layout(init.package_version),
        )
        reply = _message(OK)
        ri = reply.unity_input.rl_initialization_input
        ri.seed, ri.num_areas = self.seed, self.num_areas
        ri.communication_version, ri.package_version = self.communication_version, self.package_version
        ri.capabilities.CopyFrom(all_capabilities())
        self.state = State.AWAIT_ACK
        return reply.SerializeToString()

    def _decode_output(self, output) -> MLAgentsEvent:
        infos = output.rl_output.agentInfos
        new = []
        for brain in output.rl_initialization_output.brain_parameters:
            name = brain.brain_name
            if name not in self.behavior_specs and name in infos and len(infos[name].value):
                self.behavior_specs[name] = behavior_spec_from(brain, infos[name].value[0], self._layout(),
                                                               self.layout_override)  # fmt: skip
                new.append(name)
        decision, terminal = {}, {}
        layout = self._layout()
        for name, spec in self.behavior_specs.items():
            agent_infos = infos[name].value if name in infos else []
            decision[name], terminal[name] = split_steps(agent_infos, spec, layout)
        self.decision_counts = {name: len(steps) for name, steps in decision.items()}
        stats: dict[str, list] = defaultdict(list)
        others = []
        for record in sc.decode_records(output.rl_output.side_channel):
            if record.channel_id == sc.STATS:
                key, value, aggregation = sc.parse_stats(record.payload)
                stats[key].append((value, aggregation))
            else:
                others.append(record)
        return MLAgentsEvent(decision, terminal, dict(stats), others, new)

    def _layout(self) -> str:
        return self.unity.layout if self.unity else unity_package_layout("")

    # -- us -> Unity (answers to the pending call) -----------------------------------------------------------
    def reset(self, side_channel: Iterable[sc.SideChannelMessage] = ()) -> bytes:
        self._expect_ready("reset")
        message = _message(OK)
        rl_input = message.unity_input.rl_input
        rl_input.command = pb.RESET
        rl_input.side_channel = sc.encode_records(side_channel)
        self.state = State.AWAIT_OUTPUT
        return message.SerializeToString()

    def step(
        self, actions: Mapping[str, object] | None = None, side_channel: Iterable[sc.SideChannelMessage] = ()
    ) -> bytes:
        """Actions per behavior name (what :func:`~unirender.protocol.mlagents.actions.check_behavior_action`
        takes); behaviors left out get zeros. A wrong action raises ``ActionError`` (a ``ValueError``)."""
        self._expect_ready("step")
        actions = dict(actions or {})
        specs = {name: spec.action_spec for name, spec in self.behavior_specs.items()}
        strays = {name: value for name, value in actions.items() if name not in specs}  # refused first
        waiting = {name: actions.get(name) for name in self.decision_counts}
        # everything is checked before any state changes; behaviors without waiting agents are left out of the
        # map, as mlagents-envs does
        checked = {name: action for name, action in check_actions({**strays, **waiting}, specs,
                                                                   self.decision_counts).items()
                   if self.decision_counts[name]}  # fmt: skip
        message = _message(OK)
        rl_input = message.unity_input.rl_input
        for name, action in checked.items():
            fill_action_list(rl_input.agent_actions[name].value, action)
        rl_input.side_channel = sc.encode_records(side_channel)
        self.state = State.AWAIT_OUTPUT
        return message.SerializeToString()

    def close(self) -> bytes:
        """The close reply (status 400, nothing else), as mlagents-envs sends it."""
        self.state = State.CLOSED
        return CLOSE_MESSAGE

    def _expect_ready(self, what: str) -> None:
        if self.state is not State.READY:
            raise MLAgentsProtocolError(f"{what}() needs a pending Unity call; the communicator is {self.state.value}")
