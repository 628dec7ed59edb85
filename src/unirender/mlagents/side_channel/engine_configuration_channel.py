"""``EngineConfigurationChannel``: screen resolution, quality level, time scale, frame rates (Python -> Unity).
The records are the core's :class:`~unirender.protocol.mlagents.side_channels.EngineConfig` ones."""

from __future__ import annotations

from typing import NamedTuple

from unirender.mlagents.exception import UnityCommunicationException, UnitySideChannelException
from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.protocol.mlagents import side_channels as core


class EngineConfig(NamedTuple):
    width: int | None
    height: int | None
    quality_level: int | None
    time_scale: float | None
    target_frame_rate: int | None
    capture_frame_rate: int | None

    @staticmethod
    def default_config():
        return EngineConfig(80, 80, 1, 20.0, -1, 60)


class EngineConfigurationChannel(SideChannel):
    """Engine settings for the game; each one set is sent as its own record with the next message."""

    ConfigurationType = core.EngineSetting

    def __init__(self) -> None:
        super().__init__(core.ENGINE_CONFIGURATION)

    def on_message_received(self, msg: IncomingMessage) -> None:
        raise UnityCommunicationException(
            "The EngineConfigurationChannel received a message from Unity, this should not have happened."
        )

    def set_configuration_parameters(
        self,
        width: int | None = None,
        height: int | None = None,
        quality_level: int | None = None,
        time_scale: float | None = None,
        target_frame_rate: int | None = None,
        capture_frame_rate: int | None = None,
    ) -> None:
        """Width and height go together; ``None`` leaves a setting as the game has it."""
        if (width is None) != (height is None):
            raise UnitySideChannelException(
                "You cannot set the width/height of the screen resolution without also setting the height/width"
            )
        config = core.EngineConfig(width, height, quality_level, time_scale, target_frame_rate, capture_frame_rate)
        for record in config.messages():
            message = OutgoingMessage()
            message.set_raw_bytes(bytearray(record.payload))
            self.queue_message_to_send(message)

    def set_configuration(self, config: EngineConfig) -> None:
        self.set_configuration_parameters(**config._asdict())
