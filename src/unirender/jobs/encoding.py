"""Arrays to file bytes and back, losslessly (except the opt-in 16-bit PNG depth).

Rule: 8-bit images (grey, RGB, RGBA) and 16-bit grey become PNG; everything else (float depth, normals,
flow, ids) becomes ``.npy``. Encoding is deterministic, so a redone frame has the same bytes.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
from PIL import Image

# Extensions used in file and member names; ``.u16.png`` marks depth scaled into 16-bit integers.
PNG, NPY, DEPTH16 = "png", "npy", "u16.png"

# 16-bit PNG depth: value * scale, rounded and clipped to 0..65535 (metres -> millimetres, ...).
DEPTH16_SCALE = {"Meters": 1000.0, "Millimeters": 1.0, "Normalized": 65535.0}


def png_encodable(array: np.ndarray) -> bool:
    if array.dtype == np.uint8:
        return array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4))
    return array.dtype == np.uint16 and array.ndim == 2


def encode_png(array: np.ndarray, compress_level: int = 1) -> bytes:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    array = np.ascontiguousarray(array)
    if array.dtype == np.uint16:
        image = Image.frombuffer("I;16", (array.shape[1], array.shape[0]), array.astype("<u2").tobytes())
    else:
        image = Image.fromarray(array)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


def decode_png(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        if image.mode in ("I;16", "I;16B", "I;16L", "I"):
            return (
                np.asarray(image, dtype=np.uint16)
                if image.mode != "I"
                else np.asarray(image).astype(np.uint16)
            )
        return np.asarray(image)


def encode_npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()


def decode_npy(data: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def is_depth_key(key: str) -> bool:
    return "depth" in key


def encode_array(
    key: str,
    array: np.ndarray,
    *,
    prefer_png: bool,
    depth16_scale: float | None = None,
    png_compress_level: int = 1,
) -> tuple[str, bytes]:
    """``(extension, bytes)`` for one array. ``depth16_scale`` switches float depth to 16-bit PNG."""
    if depth16_scale is not None and is_depth_key(key) and array.dtype.kind == "f":
        scaled = np.clip(np.rint(np.asarray(array, dtype=np.float64) * depth16_scale), 0, 65535)
        return DEPTH16, encode_png(scaled.astype(np.uint16), png_compress_level)
    if prefer_png and png_encodable(array):
        return PNG, encode_png(array, png_compress_level)
    return NPY, encode_npy(array)


def decode_array(name: str, data: bytes, *, depth16_scale: float | None = None) -> np.ndarray:
    """Inverse of :func:`encode_array`, chosen by the file or member name's extension."""
    if name.endswith("." + DEPTH16):
        if not depth16_scale:
            raise ValueError(f"{name}: 16-bit depth without a scale in the manifest")
        return (decode_png(data).astype(np.float32) / np.float32(depth16_scale)).astype(np.float32)
    if name.endswith("." + PNG):
        return decode_png(data)
    if name.endswith("." + NPY):
        return decode_npy(data)
    raise ValueError(f"{name}: unknown frame file type")


def _json_default(value: Any):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    raise TypeError(f"cannot store {type(value).__name__} in JSON metadata")


def dumps_json(value: Any) -> str:
    """Compact, key-order-preserving JSON; numpy scalars become numbers."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
