"""The one value both transports hand to the controller: metadata plus raw image buffers."""

from __future__ import annotations

from unirender.protocol.metadata import MetadataDocument, as_document


class Payload:
    """One message from the player, transport-independent.

    ``document`` is the top-level ``MultiAgentMetadata`` (``agents``, ``activeAgentId``, ``sequenceId``,
    ``thirdPartyCameras``) as a :class:`~unirender.protocol.metadata.MetadataDocument`: usually the bytes as
    received, decoded only when ``metadata`` is read. ``files`` maps WSGI form field names (``image``,
    ``image_depth``, ``image-thirdParty-camera``, ...; protocol.md 2.4) to buffers in agent / camera order; the buffers
    are zero-copy memoryviews into the received bytes. ``patched`` is True when this payload came from a
    METADATA_PATCH merged into the previous full message (its images are the previous ones, protocol.md 3.6).
    """

    __slots__ = ("document", "files", "patched")

    def __init__(
        self,
        metadata: dict | MetadataDocument,
        files: dict[str, list[memoryview]] | None = None,
        patched: bool = False,
    ):
        self.document = as_document(metadata)
        self.files = files if files is not None else {}
        self.patched = patched

    @property
    def metadata(self) -> dict:
        """The decoded top-level dict (decodes the document on first access)."""
        return self.document.decode()

    def __repr__(self) -> str:
        return f"Payload({self.document!r}, files={sorted(self.files)}, patched={self.patched})"
