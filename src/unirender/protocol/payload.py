"""The one value both transports hand to the controller: metadata plus raw image buffers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Payload:
    """One message from the player, transport-independent.

    ``metadata`` is the top-level ``MultiAgentMetadata`` dict (``agents``, ``activeAgentId``, ``sequenceId``,
    ``thirdPartyCameras``). ``files`` maps WSGI form field names (``image``, ``image_depth``,
    ``image-thirdParty-camera``, ...; spec 2.4) to buffers in agent / camera order; the buffers are zero-copy
    memoryviews into the received bytes. ``patched`` is True when this payload came from a METADATA_PATCH merged into
    the previous full message (its images are the previous ones, spec 3.6).
    """

    metadata: dict
    files: dict[str, list[memoryview]] = field(default_factory=dict)
    patched: bool = False
