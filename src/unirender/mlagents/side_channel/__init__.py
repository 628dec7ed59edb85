"""mlagents-envs' side channels (``mlagents_envs.side_channel``), same classes and methods, over the protocol
core's record framing and payload codecs (:mod:`unirender.protocol.mlagents.side_channels`).

Pass instances to ``UnityEnvironment(side_channels=[...])``; what they queue rides along the next ``reset()`` or
``step()``, and records from the game reach their channel's ``on_message_received`` after it.
"""

from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.outgoing_message import OutgoingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel

__all__ = ["IncomingMessage", "OutgoingMessage", "SideChannel"]
