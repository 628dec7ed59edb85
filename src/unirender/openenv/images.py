"""Images for OpenEnv clients: base64 PNG or JPEG (what a vision-language agent reads) or raw arrays (what an RL
trainer reads: no codec on either side)."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Mapping

import numpy as np
from PIL import Image

from unirender.jobs.encoding import DEPTH16_SCALE
from unirender.openenv.models import EncodedArray
from unirender.protocol.images import parse_depth_format

try:
    import pyspng as _spng  # decode_image's fast path (the openenv extra installs it)
except ImportError:
    _spng = None

try:
    # SIMD base64 (the openenv extra installs it). OpenEnv's messages are JSON text, so every image crosses as
    # base64 and is encoded on the server and decoded on the client each step; at 300x300 raw arrays the
    # standard library spent 0.45 ms encoding (its bytes, then a str copy) and 0.95 ms decoding (an ASCII copy,
    # then a scalar decoder), pybase64 0.01 and 0.02 ms (benchmarks/README.md, "OpenEnv").
    import pybase64

    def b64encode(data) -> str:
        """``data`` (any C-contiguous buffer) as a base64 str."""
        return pybase64.b64encode_as_string(data)

    def b64decode(text: str | bytes) -> bytes:
        """Strict: a character outside the alphabet is an error (``binascii.Error``), as with the fallback."""
        return pybase64.b64decode(text, validate=True)

except ImportError:
    # a client that installed openenv-core and unirender without the extra: the same text, decoded more slowly

    def b64encode(data) -> str:
        return base64.b64encode(data).decode("ascii")

    def b64decode(text: str | bytes) -> bytes:
        return base64.b64decode(text, validate=True)


# JPEG quality: Pillow's default (75) blurs the edges an agent steers by; 90 keeps them at about a third of PNG's
# bytes for rendered scenes.
JPEG_QUALITY = 90


# PNG colour types by channel count (PNG spec 11.2.2: greyscale, RGB, RGBA)
_PNG_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}
METRES_TO_PNG16 = DEPTH16_SCALE["Meters"]


def png16_depth_scale(depth_format: object = "Meters") -> float:
    """What float depth in ``depth_format`` (the player's, as a spec's ``render.depth_format`` sets it) is
    multiplied by for a 16-bit PNG: the datasets' ``png16`` scales (millimetres for metres and millimetres)."""
    return DEPTH16_SCALE[parse_depth_format(depth_format).name]


def _png_pixels(array: np.ndarray, depth_scale: float = METRES_TO_PNG16) -> np.ndarray:
    """The pixels a PNG holds, (H, W, C) uint8 or uint16: uint8 RGB/RGBA/grey as is; float depth times
    ``depth_scale`` as 16 bits (metres -> millimetres by default; :data:`DEPTH16_SCALE` for the others)."""
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in _PNG_COLOUR_TYPES:
        raise ValueError(f"cannot encode an image of shape {array.shape} as PNG or JPEG")
    if array.dtype == np.uint8:
        return array
    if array.shape[2] != 1:
        raise ValueError(f"cannot encode a {array.dtype} image of shape {array.shape} as PNG or JPEG")
    return np.clip(np.nan_to_num(array.astype(np.float64) * depth_scale), 0, 65535).astype(np.uint16)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(array: np.ndarray, depth_scale: float = METRES_TO_PNG16) -> bytes:
    """A PNG of a frame: rows unfiltered (filter type 0), deflated at level 1. Measured on the reference
    player's 300x300 scenes (benchmarks/openenv.py): 1.9-2.5 ms and 19.9 KB, where Pillow's encoder at
    compress_level=1 (its adaptive row filters) took 6.6-11.8 ms for 24.7 KB on the same loaded machine: a
    rendered frame's flat regions deflate well as they are, and the per-row filter search was most of the time."""
    pixels = _png_pixels(array, depth_scale)
    height, width, channels = pixels.shape
    rows = np.empty((height, 1 + width * channels * pixels.itemsize), np.uint8)
    rows[:, 0] = 0  # filter type None
    rows[:, 1:] = pixels.astype(pixels.dtype.newbyteorder(">"), copy=False).reshape(height, -1).view(np.uint8)
    header = struct.pack(">IIBBBBB", width, height, 8 * pixels.itemsize, _PNG_COLOUR_TYPES[channels], 0, 0, 0)
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        _png_chunk(b"IHDR", header),
        _png_chunk(b"IDAT", zlib.compress(rows, 1)),
        _png_chunk(b"IEND", b""),
    ))  # fmt: skip


def encode_image(array: np.ndarray, image_format: str, depth_scale: float = METRES_TO_PNG16) -> str:
    """One frame as base64 PNG or JPEG. Depth (float) is a 16-bit PNG of the depth times ``depth_scale``
    (metres -> millimetres by default); JPEG has no 16-bit form, so depth asked for as JPEG is refused."""
    if image_format == "png":
        return b64encode(encode_png(array, depth_scale))
    if image_format != "jpeg":
        raise ValueError(f"image_format {image_format!r} is not an encoded format")
    pixels = _png_pixels(array)
    if pixels.dtype != np.uint8 or pixels.shape[2] == 4:
        mode = "RGBA" if pixels.shape[2] == 4 else "I;16"
        raise ValueError(f"a {mode} image has no JPEG form: ask for image_format='png' or 'array'")
    image = Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return b64encode(buffer.getbuffer())


def decode_image(text: str) -> np.ndarray:
    """The client's side of :func:`encode_image`: a base64 PNG or JPEG as the array ``np.asarray(PIL.Image.open(
    ...))`` gives: (H, W, 3) RGB, (H, W, 4) RGBA, (H, W) grey, or (H, W) uint16 depth in millimetres. An 8-bit PNG
    is decoded by libspng (pyspng, which the openenv extra installs): Pillow took 1.4 ms for a 300x300 frame,
    libspng 0.17 (benchmarks/README.md, "OpenEnv"). Anything else, or without pyspng, by Pillow."""
    data = b64decode(text)
    if _spng is not None and data[:8] == b"\x89PNG\r\n\x1a\n":
        try:
            pixels = _spng.load(data)
        except RuntimeError:  # libspng's refusal: Pillow then says what is wrong, in its own words
            pixels = None
        if pixels is not None and pixels.dtype == np.uint8:
            return pixels
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def encode_array(array: np.ndarray) -> EncodedArray:
    array = np.ascontiguousarray(array)
    return EncodedArray(dtype=array.dtype.str, shape=list(array.shape), data=b64encode(array))


def decode_array(encoded: EncodedArray | Mapping) -> np.ndarray:
    """The client's side of :func:`encode_array` (a model or its JSON dict)."""
    if not isinstance(encoded, EncodedArray):
        encoded = EncodedArray(**encoded)
    return np.frombuffer(b64decode(encoded.data), dtype=np.dtype(encoded.dtype)).reshape(encoded.shape)


def image_fields(
    images: Mapping[str, np.ndarray], image_format: str, depth_scale: float = METRES_TO_PNG16
) -> dict:
    """The observation's image fields for ``images`` (name -> frame, in declared order); ``depth_scale`` takes
    float depth to a 16-bit PNG's values (:func:`png16_depth_scale`)."""
    names = list(images)
    if image_format == "array":
        return {"visual_observation_names": names, "arrays": {n: encode_array(a) for n, a in images.items()}}
    return {
        "visual_observation_names": names,
        "visual_observations": [encode_image(a, image_format, depth_scale) for a in images.values()],
    }
