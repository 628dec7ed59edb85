"""``FloatPropertiesChannel``: the legacy ``key -> float`` properties shared both ways."""

from __future__ import annotations

import uuid

from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.protocol.mlagents import side_channels as core


class FloatPropertiesChannel(SideChannel):
    """Properties set here are sent to the game; properties the game sends are recorded."""

    def __init__(self, channel_id: uuid.UUID | None = None) -> None:
        self._float_properties: dict[str, float] = {}
        super().__init__(channel_id or core.FLOAT_PROPERTIES)

    def on_message_received(self, msg: IncomingMessage) -> None:
        key = msg.read_string()
        self._float_properties[key] = msg.read_float32()

    def set_property(self, key: str, value: float) -> None:
        self._float_properties[key] = value
        message = OutgoingMessage()
        message.write_string(key)
        message.write_float32(value)
        self.queue_message_to_send(message)

    def get_property(self, key: str) -> float | None:
        return self._float_properties.get(key)

    def list_properties(self) -> list[str]:
        return list(self._float_properties)

    def get_property_dict_copy(self) -> dict[str, float]:
        return dict(self._float_properties)
