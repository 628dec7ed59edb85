"""Decoding ``ObservationProto``: PNG (one or several concatenated, with ``compressed_channel_mapping``) and raw
floats, in HWC or CHW.

Visual observations are kept as pixels (``uint8`` when the decoded channels are taken as they are, ``float32``
0..255 when channels were averaged), in HWC order whatever the wire layout; ``float_value`` gives the ML-Agents
float view (``/255``, in the declared shape) only when someone asks.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from unirender.protocol.mlagents.errors import ObservationError
from unirender.protocol.mlagents.versions import CHW

try:
    import pyspng as _spng
except ImportError:  # an optional speed-up (the mlagents extra installs it)
    _spng = None

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHUNK = struct.Struct(">I4s")
NONE, PNG = 0, 1  # CompressionTypeProto


def split_pngs(data: bytes) -> list[bytes]:
    """Complete PNG files back to back -> each file, by walking the chunk structure to each IEND (a signature-like
    byte run inside compressed pixels cannot split a file)."""
    view = memoryview(data)
    files, start = [], 0
    while start < len(view):
        if bytes(view[start : start + 8]) != PNG_SIGNATURE:
            raise ObservationError(f"compressed observation: no PNG signature at byte {start} of {len(view)}")
        offset = start + 8
        while True:
            if offset + 12 > len(view):
                raise ObservationError("compressed observation: a PNG file ends before its IEND chunk")
            length, kind = _CHUNK.unpack_from(view, offset)
            offset += 12 + length
            if kind == b"IEND":
                break
        if offset > len(view):
            raise ObservationError("compressed observation: a PNG chunk runs past the end of the data")
        files.append(bytes(view[start:offset]))
        start = offset
    return files


def decode_png(data: bytes) -> np.ndarray:
    """One PNG -> uint8 (H, W, C), row 0 = top. libspng (pyspng) when installed: it is the client's largest
    per-step cost and libspng decodes about 3.5x faster than Pillow; Pillow for anything else (16-bit, no wheel)."""
    if _spng is not None:
        try:
            pixels = _spng.load(data)
        except Exception as exc:  # pyspng raises RuntimeError with libspng's message
            raise ObservationError(f"compressed observation: not a decodable PNG ({exc})") from None
        if pixels.dtype == np.uint8:
            return pixels[:, :, None] if pixels.ndim == 2 else pixels
    return decode_png_pillow(data)


def decode_png_pillow(data: bytes) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.mode not in ("RGB", "RGBA", "L"):
                image = image.convert("RGB")
            pixels = np.asarray(image)
    except (OSError, ValueError, SyntaxError) as exc:
        raise ObservationError(f"compressed observation: not a decodable PNG ({exc})") from None
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def hwc_shape(shape, layout: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ObservationError(f"a visual observation has rank 3, got shape {list(shape)}")
    return (shape[1], shape[2], shape[0]) if layout == CHW else (shape[0], shape[1], shape[2])


def decode_png_pixels(data: bytes, shape, mapping, layout: str) -> np.ndarray:
    """PNG bytes of one agent's observation -> (H, W, C) pixels (uint8, or float32 0..255 when averaged)."""
    height, width, channels = hwc_shape(shape, layout)
    images = [decode_png(f) for f in split_pngs(data)]
    if not images:
        raise ObservationError("compressed observation without any PNG data")
    decoded = images[0] if len(images) == 1 else np.concatenate(images, axis=2)
    total = decoded.shape[2]
    if mapping:
        pixels = _apply_mapping(decoded, list(mapping))
    elif channels == 1 and total > 1:  # grayscale ships as RGB: average the first image's channels
        pixels = images[0][:, :, :3].mean(axis=2, dtype=np.float32, keepdims=True)
    else:
        pixels = decoded[:, :, :channels]
    if pixels.shape != (height, width, channels):
        got = pixels.shape if layout != CHW else (pixels.shape[2], pixels.shape[0], pixels.shape[1])
        raise ObservationError(
            f"decompressed observation did not have the expected shape: decompressed had {tuple(got)} but "
            f"expected {list(shape)} ({layout})"
        )
    return pixels


def _apply_mapping(decoded: np.ndarray, mapping: list[int]) -> np.ndarray:
    total = decoded.shape[2]
    if len(mapping) != total:
        raise ObservationError(
            f"compressed_channel_mapping has {len(mapping)} entries for {total} decoded channels"
        )
    targets = sorted({m for m in mapping if m >= 0})
    if not targets or targets != list(range(targets[-1] + 1)) or targets[-1] >= total:
        raise ObservationError(f"compressed_channel_mapping {mapping} must cover 0..N-1 with N <= {total}")
    sources = [[k for k, m in enumerate(mapping) if m == t] for t in targets]
    if all(len(s) == 1 for s in sources):
        return decoded[:, :, [s[0] for s in sources]]
    out = np.empty(decoded.shape[:2] + (len(targets),), np.float32)
    for t, s in enumerate(sources):  # channels mapped to the same destination are averaged
        out[:, :, t] = decoded[:, :, s].mean(axis=2, dtype=np.float32)
    return out


def packed_floats_message(values: np.ndarray) -> bytes:
    """The bytes of a ``FloatData`` message holding ``values``: field 1, packed little-endian float32. Building
    these bytes directly is a copy; appending millions of Python floats to the repeated field is not."""
    data = np.ascontiguousarray(values, dtype="<f4").tobytes()
    return (b"\x0a" + _varint(len(data)) + data) if data else b""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _unpack_floats(float_data) -> np.ndarray:
    """``FloatData`` -> float32 array via its serialized bytes (a copy, not one Python float per value)."""
    raw = float_data.SerializeToString()
    if not raw:
        return np.zeros(0, np.float32)
    if raw[0] != 0x0A:  # not the packed form we expect: take the slow, general path
        return np.asarray(float_data.data, dtype=np.float32)
    length, shift, offset = 0, 0, 1
    while True:
        byte = raw[offset]
        length |= (byte & 0x7F) << shift
        offset += 1
        shift += 7
        if not byte & 0x80:
            break
    if offset + length != len(raw):  # several packed runs (legal, but not what protobuf writes): general path
        return np.asarray(float_data.data, dtype=np.float32)
    return np.frombuffer(raw, "<f4", length // 4, offset).astype(np.float32, copy=False)


def float_values(obs, layout: str | None = None) -> np.ndarray:
    """``FloatData`` -> float32 array in the declared shape."""
    shape = tuple(obs.shape)
    values = _unpack_floats(obs.float_data)
    if values.size != int(np.prod(shape)):
        raise ObservationError(f"observation {obs.name!r}: {values.size} floats for shape {list(shape)}")
    return values.reshape(shape)


def pixels_of(obs, layout: str) -> np.ndarray:
    """A rank-3 observation as (H, W, C) pixels, from PNG or from floats (0..1 scaled back to 0..255)."""
    if obs.compression_type == PNG:
        return decode_png_pixels(obs.compressed_data, obs.shape, obs.compressed_channel_mapping, layout)
    values = float_values(obs)
    hwc = values.transpose(1, 2, 0) if layout == CHW else values
    return hwc * np.float32(255.0)


def to_frame(pixels: np.ndarray) -> np.ndarray:
    """Pixels -> exact uint8 (PNG bytes are returned as decoded; floats are rounded, not truncated)."""
    if pixels.dtype == np.uint8:
        return pixels
    return np.rint(np.clip(pixels, 0.0, 255.0)).astype(np.uint8)


def pixels_to_values(pixels: np.ndarray, layout: str) -> np.ndarray:
    """(n, H, W, C) pixels -> ML-Agents' float view: /255, in the declared layout."""
    values = pixels.astype(np.float32) / np.float32(255.0)
    return values.transpose(0, 3, 1, 2) if layout == CHW else values
