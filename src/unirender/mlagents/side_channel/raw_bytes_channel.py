"""``RawBytesChannel``: uninterpreted bytes both ways, for a game's own channel."""

from __future__ import annotations

import uuid

from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel


class RawBytesChannel(SideChannel):
    def __init__(self, channel_id: uuid.UUID):
        self._received_messages: list[bytearray] = []
        super().__init__(channel_id)

    def on_message_received(self, msg: IncomingMessage) -> None:
        self._received_messages.append(msg.get_raw_bytes())

    def get_and_clear_received_messages(self) -> list[bytearray]:
        received, self._received_messages = self._received_messages, []
        return received

    def send_raw_data(self, data: bytearray) -> None:
        message = OutgoingMessage()
        message.set_raw_bytes(data)
        self.queue_message_to_send(message)
