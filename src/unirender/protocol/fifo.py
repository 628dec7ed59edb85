"""FIFO framing (protocol.md 3.3-3.5): typed, length-prefixed frames ending with END_OF_MESSAGE.

Pure code over bytes. :func:`encode_message` builds one buffer per message (the reader on the Unity side assumes
a frame header arrives in one read, so a message must go out in one ``write``). :class:`FifoDecoder` accepts data
in arbitrary fragments and yields complete messages whose frame bodies are read-only memoryviews: zero-copy into
the caller's ``bytes`` when a whole body arrives in one fragment, otherwise filled once into a buffer sized from
the frame header (never a ``buf = buf + chunk`` rebuild, which made 5.0.0 quadratic on large images).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from unirender.protocol.errors import (
    FrameTooLargeError,
    MetadataError,
    ProtocolError,
    TruncatedFrameError,
    UnknownFieldTypeError,
)
from unirender.protocol.metadata import MSGPACK, RawMetadata, unpack_metadata
from unirender.protocol.pool import BufferPool


class FieldType(IntEnum):
    """Frame type byte (protocol.md 3.3). Names follow AI2-THOR's Python ``FieldType``."""

    METADATA = 0x01
    ACTION = 0x02
    ACTION_RESULT = 0x03
    RGB_IMAGE = 0x04
    DEPTH_IMAGE = 0x05
    NORMALS_IMAGE = 0x06
    FLOWS_IMAGE = 0x07
    CLASSES_IMAGE = 0x08
    IDS_IMAGE = 0x09
    THIRD_PARTY_IMAGE = 0x0A
    METADATA_PATCH = 0x0B
    THIRD_PARTY_DEPTH = 0x0C
    THIRD_PARTY_NORMALS = 0x0D
    THIRD_PARTY_IMAGE_IDS = 0x0E
    THIRD_PARTY_CLASSES = 0x0F
    THIRD_PARTY_FLOW = 0x10
    END_OF_MESSAGE = 0xFF


# Image frames map onto the WSGI form field names (protocol.md 2.4) so both transports build the same Payload.
# THIRD_PARTY_FLOW maps to the name Unity actually sends, ``image_thirdParty_flow`` (5.0.0 looked for
# ``image_thirdParty_flows`` and never decoded it).
FIELD_TYPE_TO_FORM_NAME: dict[FieldType, str] = {
    FieldType.RGB_IMAGE: "image",
    FieldType.DEPTH_IMAGE: "image_depth",
    FieldType.NORMALS_IMAGE: "image_normals",
    FieldType.FLOWS_IMAGE: "image_flow",
    FieldType.CLASSES_IMAGE: "image_classes",
    FieldType.IDS_IMAGE: "image_ids",
    FieldType.THIRD_PARTY_IMAGE: "image-thirdParty-camera",
    FieldType.THIRD_PARTY_DEPTH: "image_thirdParty_depth",
    FieldType.THIRD_PARTY_NORMALS: "image_thirdParty_normals",
    FieldType.THIRD_PARTY_IMAGE_IDS: "image_thirdParty_image_ids",
    FieldType.THIRD_PARTY_CLASSES: "image_thirdParty_classes",
    FieldType.THIRD_PARTY_FLOW: "image_thirdParty_flow",
}
FORM_NAME_TO_FIELD_TYPE: dict[str, FieldType] = {v: k for k, v in FIELD_TYPE_TO_FORM_NAME.items()}

HEADER = struct.Struct("!BI")  # 1-byte field type, 4-byte big-endian unsigned body length
HEADER_SIZE = HEADER.size
END_OF_MESSAGE = HEADER.pack(FieldType.END_OF_MESSAGE, 0)

# Why 256 MiB: the largest legitimate frame is one raw image, 4 B/px; 8192 x 8192 x 4 = 256 MiB, twice Unity's
# largest practical screen (4096 x 4096 = 64 MiB) in each dimension. Big ProcTHOR metadata is tens of MiB. A
# corrupt or desynchronised stream yields random lengths up to 4 GiB; the limit turns that into a clear error
# instead of a multi-GiB allocation followed by a read that never completes.
DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
# Reads outside large bodies go through this buffer: the default pipe capacity on Linux, so one read can take
# everything a writer managed to put in the pipe.
SCRATCH_SIZE = 64 * 1024

# Frame bodies read in place are recycled (unirender.protocol.pool); at most this many are kept.
BODY_POOL_SIZE = 12  # two messages of six modalities (the previous one is still referenced by the last event)

_KNOWN_TYPES = frozenset(int(t) for t in FieldType)
_EMPTY = memoryview(b"")


def encode_frame(field_type: FieldType | int, body: bytes | bytearray | memoryview) -> bytes:
    """One frame: header + body, as one ``bytes``."""
    body = memoryview(body).cast("B")
    return HEADER.pack(int(field_type), body.nbytes) + body.tobytes()


def encode_message(frames) -> bytes:
    """One message as ONE buffer: every ``(field_type, body)`` frame, then END_OF_MESSAGE."""
    parts: list = []
    for field_type, body in frames:
        parts.append(HEADER.pack(int(field_type), memoryview(body).nbytes))
        parts.append(body)
    parts.append(END_OF_MESSAGE)
    return b"".join(parts)


@dataclass
class FifoMessage:
    """A complete message: its frames in arrival order, END_OF_MESSAGE excluded. Bodies are read-only views."""

    frames: list[tuple[FieldType, memoryview]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(body.nbytes for _, body in self.frames)


class FifoDecoder:
    """Incremental frame decoder: ``feed(data)`` any fragments, get back the messages they complete.

    Call :meth:`end_of_stream` when the pipe reports EOF: it raises :class:`TruncatedFrameError` if a frame or
    message was cut off, so a dying writer is an error rather than a silent stall. After any
    :class:`ProtocolError` the stream is out of step: drop the decoder (and the connection).
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self.max_frame_size = max_frame_size
        self._scratch_view = memoryview(bytearray(SCRATCH_SIZE))
        self._reading_body = False  # the last get_buffers() handed out the body under construction
        self._header = bytearray()
        self._body: memoryview | None = None  # body being filled, sized from its header
        self._body_type: FieldType | None = None
        self._filled = 0
        self._frames: list[tuple[FieldType, memoryview]] = []
        self._pool = BufferPool(BODY_POOL_SIZE)  # bodies handed out, reused once nobody holds them

    @property
    def in_message(self) -> bool:
        """True while a message has started but its END_OF_MESSAGE has not arrived."""
        return bool(self._frames or self._header or self._body is not None)

    def get_buffers(self) -> list[memoryview]:
        """Where the caller should read next (``os.readv(fd, decoder.get_buffers())``), then call
        :meth:`buffers_updated` with the byte count. Inside a large frame body the first buffer is the body's own
        unfilled tail, so image bytes go from the kernel straight into their final buffer (no intermediate copy),
        and a scratch buffer follows it so that one read also takes the next frame's header and the start of its
        body (one ``readv`` per frame, not two); otherwise it is just the scratch buffer. (The pattern of
        asyncio's ``BufferedProtocol``, with a vector.)
        """
        if self._body is not None and len(self._body) - self._filled >= SCRATCH_SIZE // 2:
            self._reading_body = True
            return [self._body[self._filled :], self._scratch_view]
        self._reading_body = False
        return [self._scratch_view]

    def buffers_updated(self, nbytes: int) -> list[FifoMessage]:
        """``nbytes`` were written into the last :meth:`get_buffers`, in order; returns the messages they complete."""
        if not self._reading_body:
            return self._feed(self._scratch_view[:nbytes], zero_copy=False)
        self._reading_body = False
        room = len(self._body) - self._filled
        if nbytes < room:
            self._filled += nbytes
            return []
        self._frames.append((self._body_type, self._body.toreadonly()))
        self._body = None
        rest = nbytes - room
        return self._feed(self._scratch_view[:rest], zero_copy=False) if rest else []

    def feed(self, data: bytes | bytearray | memoryview) -> list[FifoMessage]:
        """Decode ``data`` (any fragment of the stream); returns the messages it completes."""
        # Views into ``data`` are kept only when it is immutable bytes; anything else may be reused by the caller.
        return self._feed(data, zero_copy=isinstance(data, bytes))

    def _feed(self, data, zero_copy: bool) -> list[FifoMessage]:
        view = memoryview(data).cast("B") if not isinstance(data, memoryview) or data.format != "B" else data
        messages: list[FifoMessage] = []
        pos, end = 0, len(view)
        while pos < end:
            if self._body is not None:
                take = min(end - pos, len(self._body) - self._filled)
                self._body[self._filled : self._filled + take] = view[pos : pos + take]
                self._filled += take
                pos += take
                if self._filled == len(self._body):
                    self._frames.append((self._body_type, self._body.toreadonly()))
                    self._body = None
                continue
            need = HEADER_SIZE - len(self._header)
            if need == HEADER_SIZE and end - pos >= HEADER_SIZE:
                code, length = HEADER.unpack_from(view, pos)
                pos += HEADER_SIZE
            else:
                take = min(need, end - pos)
                self._header += view[pos : pos + take]
                pos += take
                if len(self._header) < HEADER_SIZE:
                    continue
                code, length = HEADER.unpack(self._header)
                self._header.clear()
            field_type = self._check_header(code, length)
            if field_type is FieldType.END_OF_MESSAGE:
                messages.append(FifoMessage(self._frames))
                self._frames = []
            elif length == 0:
                self._frames.append((field_type, _EMPTY))
            elif zero_copy and end - pos >= length:
                self._frames.append((field_type, view[pos : pos + length].toreadonly()))
                pos += length
            else:
                self._body = self._new_body(length)
                self._body_type = field_type
                self._filled = 0
        return messages

    def _new_body(self, length: int) -> memoryview:
        """A writable buffer of ``length`` bytes: a pooled one nothing references any more, else a new one."""
        return memoryview(self._pool.take(length))

    def end_of_stream(self) -> None:
        """The writer closed its end. Raises :class:`TruncatedFrameError` if that cut a message short."""
        if self._body is not None:
            raise TruncatedFrameError(
                f"FIFO stream ended inside a {self._body_type.name} frame body: "
                f"got {self._filled} of {len(self._body)} bytes"
            )
        if self._header:
            raise TruncatedFrameError(
                f"FIFO stream ended inside a frame header: got {len(self._header)} of {HEADER_SIZE} bytes"
            )
        if self._frames:
            raise TruncatedFrameError(
                f"FIFO stream ended after {len(self._frames)} frame(s) without END_OF_MESSAGE"
            )

    def _check_header(self, code: int, length: int) -> FieldType:
        if code not in _KNOWN_TYPES:
            raise UnknownFieldTypeError(
                f"unknown FIFO field type 0x{code:02x} (frame length {length}); protocol.md 3.3 defines 0x01-0x10 and 0xff",
                field_type=code,
            )
        field_type = FieldType(code)
        if field_type is FieldType.END_OF_MESSAGE and length != 0:
            raise ProtocolError(f"END_OF_MESSAGE frame must have an empty body, header says {length} bytes")
        if length > self.max_frame_size:
            raise FrameTooLargeError(
                f"{field_type.name} frame of {length} bytes exceeds the limit of {self.max_frame_size} bytes",
                size=length,
                limit=self.max_frame_size,
            )
        return field_type


def split_player_message(msg: FifoMessage) -> tuple[RawMetadata | dict, dict[str, list[memoryview]], bool]:
    """A player's (Unity -> Python) message -> ``(metadata, files, is_patch)`` (protocol.md 3.4, 3.6), metadata undecoded.

    The metadata frame must come first. For a full message ``metadata`` is a
    :class:`~unirender.protocol.metadata.RawMetadata` over the frame's bytes (decoded when read); a patch is
    decoded at once (six small fields) and ``files`` is then empty (images are reused). Image frames are
    collected per form field name in arrival order (agent / camera index).
    """
    if not msg.frames:
        raise MetadataError("FIFO message from the player has no frames (expected METADATA first)")
    first_type, first_body = msg.frames[0]
    if first_type not in (FieldType.METADATA, FieldType.METADATA_PATCH):
        raise MetadataError(f"FIFO message from the player must start with METADATA, got {first_type.name}")
    is_patch = first_type is FieldType.METADATA_PATCH
    metadata = unpack_metadata(first_body, first_type.name) if is_patch else RawMetadata(first_body, MSGPACK)
    files: dict[str, list[memoryview]] = {}
    for field_type, body in msg.frames[1:]:
        name = FIELD_TYPE_TO_FORM_NAME.get(field_type)
        if name is None:
            if field_type in (FieldType.METADATA, FieldType.METADATA_PATCH):
                raise MetadataError(
                    f"FIFO message from the player has a second metadata frame ({field_type.name})"
                )
            raise UnknownFieldTypeError(
                f"field type {field_type.name} is not valid in a message from the player",
                field_type=int(field_type),
            )
        files.setdefault(name, []).append(body)
    return metadata, files, is_patch


def decode_player_message(msg: FifoMessage) -> tuple[dict, dict[str, list[memoryview]], bool]:
    """:func:`split_player_message` with the metadata decoded (``dict``), for callers that want it at once."""
    metadata, files, is_patch = split_player_message(msg)
    return (metadata if is_patch else metadata.decode()), files, is_patch


__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "END_OF_MESSAGE",
    "FIELD_TYPE_TO_FORM_NAME",
    "FORM_NAME_TO_FIELD_TYPE",
    "FieldType",
    "FifoDecoder",
    "FifoMessage",
    "decode_player_message",
    "encode_frame",
    "encode_message",
    "split_player_message",
    "unpack_metadata",
]
