"""``SideChannel``: the base class of every channel (built-in or a user's own)."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod

from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage


class SideChannel(ABC):
    """A channel identified by ``channel_id`` (a UUID the game's C# side uses too). Subclasses implement
    :meth:`on_message_received` and queue messages with :meth:`queue_message_to_send`."""

    def __init__(self, channel_id: uuid.UUID):
        self._channel_id: uuid.UUID = channel_id
        self.message_queue: list[bytearray] = []

    def queue_message_to_send(self, msg: OutgoingMessage) -> None:
        """Queue a message, sent with the environment's next ``reset()`` or ``step()``."""
        self.message_queue.append(msg.buffer)

    @abstractmethod
    def on_message_received(self, msg: IncomingMessage) -> None:
        """Called once per message the game sent on this channel (possibly several per step)."""

    @property
    def channel_id(self) -> uuid.UUID:
        return self._channel_id
