"""``EnvironmentParametersChannel``: floats and samplers the game reads with ``Academy.Instance
.EnvironmentParameters`` (Python -> Unity). The payloads are the core's
:func:`~unirender.protocol.mlagents.side_channels.environment_parameter_message`."""

from __future__ import annotations

from unirender.mlagents.exception import UnityCommunicationException
from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.protocol.mlagents import side_channels as core


class EnvironmentParametersChannel(SideChannel):
    """Set a parameter to a float or to a sampler Unity draws a value from on every read."""

    EnvironmentDataTypes = core.ParameterType
    SamplerTypes = core.SamplerType

    def __init__(self) -> None:
        super().__init__(core.ENVIRONMENT_PARAMETERS)

    def on_message_received(self, msg: IncomingMessage) -> None:
        raise UnityCommunicationException(
            "The EnvironmentParametersChannel received a message from Unity, this should not have happened."
        )

    def _queue(self, key: str, value: float | core.Sampler) -> None:
        message = OutgoingMessage()
        message.set_raw_bytes(bytearray(core.environment_parameter_message(key, value).payload))
        self.queue_message_to_send(message)

    def set_float_parameter(self, key: str, value: float) -> None:
        self._queue(key, float(value))

    def set_uniform_sampler_parameters(self, key: str, min_value: float, max_value: float, seed: int) -> None:
        self._queue(key, core.Sampler.uniform(min_value, max_value, int(seed)))

    def set_gaussian_sampler_parameters(self, key: str, mean: float, st_dev: float, seed: int) -> None:
        self._queue(key, core.Sampler.gaussian(mean, st_dev, int(seed)))

    def set_multirangeuniform_sampler_parameters(
        self, key: str, intervals: list[tuple[float, float]], seed: int
    ) -> None:
        self._queue(key, core.Sampler.multirange_uniform(intervals, int(seed)))
