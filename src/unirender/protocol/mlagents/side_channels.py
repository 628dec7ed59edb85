"""ML-Agents side channels: the framing of ``side_channel`` bytes and the built-in channels' payloads.

Framing: zero or more records ``channel_id[16] || length[int32 LE] || payload``. The id is in .NET
``Guid.ToByteArray`` order, i.e. Python's ``uuid.UUID.bytes_le`` (not RFC 4122 byte order). Payload primitives are
little-endian: int32, float32, bool (1 byte), ASCII string (int32 byte length + bytes), float list (int32
element count + float32s). Readers return the default when a payload is too short, as both ML-Agents sides do.

Unknown channels are kept as :class:`SideChannelMessage` (id + raw payload), never dropped.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unirender.protocol.mlagents.errors import SideChannelError

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")  # uuid5(URL, "com.unity.ml-agents/StatsSideChannel")
TRAINING_ANALYTICS = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")
FLOAT_PROPERTIES = uuid.UUID("60ccf7d0-4f7e-11ea-b238-784f4387d1f7")  # legacy, both directions

_HEADER = struct.Struct("<16si")


@dataclass(frozen=True)
class SideChannelMessage:
    """One record: the channel it is for and its payload, unparsed."""

    channel_id: uuid.UUID
    payload: bytes


def encode_records(messages: Iterable[SideChannelMessage]) -> bytes:
    return b"".join(
        _HEADER.pack(m.channel_id.bytes_le, len(m.payload)) + bytes(m.payload) for m in messages
    )


def decode_records(data: bytes) -> list[SideChannelMessage]:
    """Every record in order. A record cut short raises :class:`SideChannelError` (nothing is guessed)."""
    view = memoryview(data)
    records, offset = [], 0
    while offset < len(view):
        if len(view) - offset < _HEADER.size:
            raise SideChannelError(
                f"side channel data ends inside a record header at byte {offset} of {len(view)}"
            )
        raw_id, length = _HEADER.unpack_from(view, offset)
        offset += _HEADER.size
        if length < 0 or length > len(view) - offset:
            raise SideChannelError(
                f"side channel record for {uuid.UUID(bytes_le=raw_id)} announces {length} bytes, "
                f"{len(view) - offset} left"
            )
        records.append(SideChannelMessage(uuid.UUID(bytes_le=raw_id), bytes(view[offset : offset + length])))
        offset += length
    return records


# -- payload primitives -------------------------------------------------------------------------------------


class PayloadWriter:
    """``OutgoingMessage``: little-endian primitives appended to a buffer."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def int32(self, value: int) -> PayloadWriter:
        self.buffer += struct.pack("<i", int(value))
        return self

    def float32(self, value: float) -> PayloadWriter:
        self.buffer += struct.pack("<f", float(value))
        return self

    def bool(self, value: bool) -> PayloadWriter:
        self.buffer += b"\x01" if value else b"\x00"
        return self

    def string(self, value: str) -> PayloadWriter:
        try:
            encoded = value.encode("ascii")
        except UnicodeEncodeError:
            raise SideChannelError(f"side channel strings are ASCII; got {value!r}") from None
        self.int32(len(encoded))
        self.buffer += encoded
        return self

    def float_list(self, values: Iterable[float]) -> PayloadWriter:
        values = [float(v) for v in values]
        self.int32(len(values))
        self.buffer += struct.pack(f"<{len(values)}f", *values)
        return self

    def bytes(self) -> bytes:
        return bytes(self.buffer)


class PayloadReader:
    """``IncomingMessage``: reads past the end return the given default (ML-Agents' behaviour on both sides)."""

    def __init__(self, payload: bytes) -> None:
        self.payload = bytes(payload)
        self.offset = 0

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.payload):
            self.offset = len(self.payload)
            return None
        (value,) = struct.unpack_from(fmt, self.payload, self.offset)
        self.offset += size
        return value

    def int32(self, default: int = 0) -> int:
        value = self._take("<i")
        return default if value is None else value

    def float32(self, default: float = 0.0) -> float:
        value = self._take("<f")
        return default if value is None else value

    def bool(self, default: bool = False) -> bool:
        value = self._take("<?")
        return default if value is None else value

    def string(self, default: str = "") -> str:
        if self.offset + 4 > len(self.payload):
            return default
        length = self.int32()
        raw = self.payload[self.offset : self.offset + length]
        if length < 0 or len(raw) < length:
            self.offset = len(self.payload)
            return default
        self.offset += length
        return raw.decode("ascii", "replace")

    def float_list(self, default: list[float] | None = None) -> list[float]:
        if self.offset + 4 > len(self.payload):
            return list(default or [])
        count = self.int32()
        if count < 0 or self.offset + 4 * count > len(self.payload):
            self.offset = len(self.payload)
            return list(default or [])
        values = list(struct.unpack_from(f"<{count}f", self.payload, self.offset))
        self.offset += 4 * count
        return values

    def remaining(self) -> bytes:
        return self.payload[self.offset :]


# -- engine configuration (Python -> Unity) -----------------------------------------------------------------


class EngineSetting(enum.IntEnum):
    SCREEN_RESOLUTION = 0
    QUALITY_LEVEL = 1
    TIME_SCALE = 2
    TARGET_FRAME_RATE = 3
    CAPTURE_FRAME_RATE = 4


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings to send; ``None`` = leave Unity's value alone. Width and height go together."""

    width: int | None = None
    height: int | None = None
    quality_level: int | None = None
    time_scale: float | None = None
    target_frame_rate: int | None = None
    capture_frame_rate: int | None = None

    def messages(self) -> list[SideChannelMessage]:
        """One record per setting, each starting with its int32 tag (the 1.x layout; 0.x used one record)."""
        if (self.width is None) != (self.height is None):
            raise ValueError("the engine's screen resolution needs both width and height")
        out = []

        def add(tag: EngineSetting, write) -> None:
            out.append(SideChannelMessage(ENGINE_CONFIGURATION, write(PayloadWriter().int32(tag)).bytes()))

        if self.width is not None:
            add(EngineSetting.SCREEN_RESOLUTION, lambda w: w.int32(self.width).int32(self.height))
        if self.quality_level is not None:
            add(EngineSetting.QUALITY_LEVEL, lambda w: w.int32(self.quality_level))
        if self.time_scale is not None:
            add(EngineSetting.TIME_SCALE, lambda w: w.float32(self.time_scale))
        if self.target_frame_rate is not None:
            add(EngineSetting.TARGET_FRAME_RATE, lambda w: w.int32(self.target_frame_rate))
        if self.capture_frame_rate is not None:
            add(EngineSetting.CAPTURE_FRAME_RATE, lambda w: w.int32(self.capture_frame_rate))
        return out


def parse_engine_setting(payload: bytes) -> tuple[EngineSetting | int, tuple]:
    """Unity's side: ``(setting, values)``; an unknown tag comes back as a plain int with no values."""
    reader = PayloadReader(payload)
    tag = reader.int32(-1)
    if tag == EngineSetting.SCREEN_RESOLUTION:
        return EngineSetting.SCREEN_RESOLUTION, (reader.int32(), reader.int32())
    if tag == EngineSetting.TIME_SCALE:
        return EngineSetting.TIME_SCALE, (reader.float32(),)
    if tag in (EngineSetting.QUALITY_LEVEL, EngineSetting.TARGET_FRAME_RATE, EngineSetting.CAPTURE_FRAME_RATE):
        return EngineSetting(tag), (reader.int32(),)
    return tag, ()


# -- environment parameters (Python -> Unity) ---------------------------------------------------------------


class ParameterType(enum.IntEnum):
    FLOAT = 0
    SAMPLER = 1


class SamplerType(enum.IntEnum):
    UNIFORM = 0
    GAUSSIAN = 1
    MULTIRANGEUNIFORM = 2


@dataclass(frozen=True)
class Sampler:
    """A sampler Unity draws from on every read: uniform (min, max), gaussian (mean, stddev) or
    multi-range uniform (intervals [(min0, max0), ...])."""

    kind: SamplerType
    seed: int
    values: tuple = ()

    @classmethod
    def uniform(cls, min_value: float, max_value: float, seed: int = 0) -> Sampler:
        return cls(SamplerType.UNIFORM, seed, (float(min_value), float(max_value)))

    @classmethod
    def gaussian(cls, mean: float, stddev: float, seed: int = 0) -> Sampler:
        return cls(SamplerType.GAUSSIAN, seed, (float(mean), float(stddev)))

    @classmethod
    def multirange_uniform(cls, intervals, seed: int = 0) -> Sampler:
        return cls(SamplerType.MULTIRANGEUNIFORM, seed, tuple((float(a), float(b)) for a, b in intervals))


def environment_parameter_message(key: str, value: float | Sampler) -> SideChannelMessage:
    writer = PayloadWriter().string(key)
    if isinstance(value, Sampler):
        writer.int32(ParameterType.SAMPLER).int32(value.seed).int32(value.kind)
        if value.kind == SamplerType.MULTIRANGEUNIFORM:
            writer.float_list([x for interval in value.values for x in interval])
        else:
            writer.float32(value.values[0]).float32(value.values[1])
    elif isinstance(value, int | float) and not isinstance(value, bool):
        writer.int32(ParameterType.FLOAT).float32(value)
    else:
        raise TypeError(f"environment parameter {key!r} must be a number or a Sampler, got {value!r}")
    return SideChannelMessage(ENVIRONMENT_PARAMETERS, writer.bytes())


def environment_parameter_messages(parameters: Mapping[str, float | Sampler]) -> list[SideChannelMessage]:
    return [environment_parameter_message(key, value) for key, value in parameters.items()]


def parse_environment_parameter(payload: bytes) -> tuple[str, float | Sampler | None]:
    """Unity's side: ``(key, value)``; a float, a :class:`Sampler`, or None for an unknown type."""
    reader = PayloadReader(payload)
    key = reader.string()
    kind = reader.int32(-1)
    if kind == ParameterType.FLOAT:
        return key, reader.float32()
    if kind == ParameterType.SAMPLER:
        seed, sampler = reader.int32(), reader.int32(-1)
        if sampler == SamplerType.MULTIRANGEUNIFORM:
            flat = reader.float_list()
            return key, Sampler(SamplerType.MULTIRANGEUNIFORM, seed, tuple(zip(flat[::2], flat[1::2], strict=False)))
        if sampler in (SamplerType.UNIFORM, SamplerType.GAUSSIAN):
            return key, Sampler(SamplerType(sampler), seed, (reader.float32(), reader.float32()))
    return key, None


# -- stats (Unity -> Python) --------------------------------------------------------------------------------


class StatsAggregation(enum.IntEnum):
    AVERAGE = 0
    MOST_RECENT = 1
    SUM = 2
    HISTOGRAM = 3


def stats_message(key: str, value: float, aggregation: StatsAggregation = StatsAggregation.AVERAGE):
    payload = PayloadWriter().string(key).float32(value).int32(aggregation).bytes()
    return SideChannelMessage(STATS, payload)


def parse_stats(payload: bytes) -> tuple[str, float, StatsAggregation | int]:
    reader = PayloadReader(payload)
    key, value, aggregation = reader.string(), reader.float32(), reader.int32()
    try:
        aggregation = StatsAggregation(aggregation)
    except ValueError:
        pass
    return key, value, aggregation


def raw_bytes_message(channel_id: uuid.UUID | str, data: bytes) -> SideChannelMessage:
    """A user channel (ML-Agents' ``RawBytesChannel``): the payload is exactly ``data``."""
    return SideChannelMessage(uuid.UUID(str(channel_id)), bytes(data))

