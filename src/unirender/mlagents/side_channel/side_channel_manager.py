"""``SideChannelManager``: routes records between the channels of one environment and the wire, with the core's
record framing (:func:`~unirender.protocol.mlagents.side_channels.encode_records` / ``decode_records``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from unirender.mlagents.exception import UnityEnvironmentException
from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.protocol.mlagents import side_channels as core
from unirender.protocol.mlagents.errors import SideChannelError

logger = logging.getLogger(__name__)


class SideChannelManager:
    def __init__(self, side_channels: Iterable[SideChannel] | None = None):
        self._side_channels_dict: dict[uuid.UUID, SideChannel] = {}
        for channel in side_channels or ():
            if channel.channel_id in self._side_channels_dict:
                raise UnityEnvironmentException(
                    f"There cannot be two side channels with the same channel id {channel.channel_id}."
                )
            self._side_channels_dict[channel.channel_id] = channel

    def outgoing_records(self) -> list[core.SideChannelMessage]:
        """Every queued message of every channel, in channel order; the queues are emptied."""
        records = []
        for channel_id, channel in self._side_channels_dict.items():
            records += [core.SideChannelMessage(channel_id, bytes(message)) for message in channel.message_queue]
            channel.message_queue = []
        return records

    def deliver(self, records: Iterable[core.SideChannelMessage]) -> None:
        """Hand each record to its channel's ``on_message_received``; records for no channel are logged."""
        for record in records:
            channel = self._side_channels_dict.get(record.channel_id)
            if channel is None:
                logger.warning(f"Unknown side channel data received. Channel type: {record.channel_id}.")
            else:
                channel.on_message_received(IncomingMessage(record.payload))

    def generate_side_channel_messages(self) -> bytearray:
        """The queued messages framed for the wire (mlagents-envs' API)."""
        return bytearray(core.encode_records(self.outgoing_records()))

    def process_side_channel_message(self, data: bytes) -> None:
        """Split framed bytes from the game into records and deliver them (mlagents-envs' API)."""
        try:
            records = core.decode_records(data)
        except SideChannelError as exc:
            raise UnityEnvironmentException(
                "There was a problem reading a message in a SideChannel. Please make sure the version of MLAgents "
                f"in Unity is compatible with the Python version. ({exc})"
            ) from None
        self.deliver(records)
