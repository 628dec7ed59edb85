"""Raw player image buffers -> numpy arrays (protocol.md 4). Pure functions, no state.

Every buffer arrives bottom row first (Unity's texture origin); every function here returns rows top-down by
flipping axis 0 with a negative stride. Unless a docstring says "copy", the result is a **read-only view** into
the received bytes (no pixel is copied; ``np.ascontiguousarray`` gives a writable copy, which e.g.
``torch.from_numpy`` needs because it rejects negative strides).
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from unirender.protocol.errors import ImageSizeError, MetadataError

# Bytes per pixel a player may send for each modality: RGB24 (Linux64/OSX, legacy) or RGBA32 (CloudRendering,
# ids/classes/normals/flow on current builds); depth is float32 (4) or the legacy 24-bit fixed point (3).
ALLOWED_BYTES_PER_PIXEL = (3, 4)


class DepthFormat(Enum):
    """Unit of depth values. Compare by member (AI2-THOR's enum had odd tuple values)."""

    Meters = "Meters"
    Normalized = "Normalized"
    Millimeters = "Millimeters"


def parse_depth_format(value: object) -> DepthFormat:
    """A :class:`DepthFormat` from a member, its name, or any enum with that name (e.g. ai2thor's)."""
    if isinstance(value, DepthFormat):
        return value
    name = getattr(value, "name", value)
    try:
        return DepthFormat[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown depth format {value!r}; expected one of {[f.name for f in DepthFormat]}"
        ) from None


def depth_scale(source: DepthFormat, target: DepthFormat, near: float, far: float) -> float:
    """Factor turning depth in ``source`` units into ``target`` units (via the camera's far - near range)."""
    span = far - near
    units = {DepthFormat.Normalized: 1.0, DepthFormat.Meters: span, DepthFormat.Millimeters: span * 1000.0}
    return units[target] / units[source]


def bytes_per_pixel(buf, width: int, height: int, field: str) -> int:
    """3 or 4, from the buffer length; :class:`ImageSizeError` naming ``field`` for anything else."""
    size = memoryview(buf).nbytes
    pixels = width * height
    if pixels > 0 and size % pixels == 0 and size // pixels in ALLOWED_BYTES_PER_PIXEL:
        return size // pixels
    expected = [pixels * bpp for bpp in ALLOWED_BYTES_PER_PIXEL]
    raise ImageSizeError(
        f"image field {field!r}: buffer has {size} bytes, expected {' or '.join(map(str, expected))} "
        f"for {width}x{height} at 3 or 4 bytes per pixel",
        field=field,
        expected=expected,
        got=size,
    )


def image_view(buf, width: int, height: int, field: str) -> np.ndarray:
    """``(H, W, C)`` uint8, top-down, C = 3 or 4 as sent. Read-only view."""
    channels = bytes_per_pixel(buf, width, height, field)
    array = np.frombuffer(buf, dtype=np.uint8).reshape(height, width, channels)[::-1]
    array.flags.writeable = False
    return array


def decode_color(buf, width: int, height: int, field: str = "image") -> np.ndarray:
    """RGB ``(H, W, 3)`` uint8 from RGB24 or RGBA32 (alpha dropped). Read-only view."""
    return image_view(buf, width, height, field)[:, :, :3]


def decode_depth(
    buf,
    width: int,
    height: int,
    *,
    source: DepthFormat,
    target: DepthFormat,
    near: float,
    far: float,
    field: str = "image_depth",
) -> np.ndarray:
    """Depth ``(H, W)`` float32 in ``target`` units.

    4 B/px is little-endian float32 in ``source`` units (``metadata["depthFormat"]``): a read-only view when no
    conversion is needed, else a converted copy. 3 B/px is the legacy fixed point ``(r + g/256 + b/65536) / 256``
    of normalized depth: always a computed copy.
    """
    if bytes_per_pixel(buf, width, height, field) == 4:
        depth = np.frombuffer(buf, dtype="<f4").reshape(height, width)[::-1]
        scale = depth_scale(source, target, near, far)
        if scale == 1.0:
            depth.flags.writeable = False
            return depth
        return (depth * np.float32(scale)).astype(np.float32, copy=False)
    rgb = image_view(buf, width, height, field).astype(np.float32)
    normalized = rgb[:, :, 0] + rgb[:, :, 1] / np.float32(256) + rgb[:, :, 2] / np.float32(65536)
    scale = depth_scale(source, target, near, far) / 256.0
    return (normalized * np.float32(scale)).astype(np.float32, copy=False)


def screen_size(metadata: dict) -> tuple[int, int]:
    """``(width, height)`` from an agent's metadata; :class:`MetadataError` if missing or not positive ints."""
    width, height = metadata.get("screenWidth"), metadata.get("screenHeight")
    if not (isinstance(width, int) and isinstance(height, int)) or width <= 0 or height <= 0:
        raise MetadataError(
            f"agent metadata needs positive integer screenWidth/screenHeight to decode images, "
            f"got {width!r}x{height!r}"
        )
    return width, height


def source_depth_format(metadata: dict) -> DepthFormat:
    """The unit the player sent depth in; absent ``depthFormat`` means Normalized (older builds, protocol.md 9.3)."""
    value = metadata.get("depthFormat") or "Normalized"
    try:
        return parse_depth_format(value)
    except ValueError as exc:
        raise MetadataError(f"metadata depthFormat: {exc}") from None


__all__ = [
    "DepthFormat",
    "bytes_per_pixel",
    "decode_color",
    "decode_depth",
    "depth_scale",
    "image_view",
    "parse_depth_format",
    "screen_size",
    "source_depth_format",
]
