"""Renderer arrays -> wire bytes (protocol.md 4.1), plus the decoder for the optical-flow colour encoding.

Every buffer keeps the renderer's row order, which is already the wire's (row 0 = bottom of the image).

Optical flow is encoded like Unity's ImageSynthesis ``Hidden/OpticalFlow`` shader: with the screen-space
motion ``m`` in UV units (pixels / (width, height), x right, y up),
``hue = atan2(-m.y, -m.x) / 2pi + 0.5``, ``value = |m| * sensitivity``, ``rgb = saturate(Hue(hue)) * value``
(fully saturated HSV), written to RGBA32 with A = 255. ``sensitivity`` is ImageSynthesis's default of 1, so a
motion of a whole screen width saturates and the 8-bit value resolves about width/255 pixels.
:func:`decode_flow` inverts it.
"""

from __future__ import annotations

import numpy as np

FLOW_SENSITIVITY = 1.0
_ALPHA = np.uint32(255 << 24)


def color_lut(colors: list[tuple[int, int, int]]) -> np.ndarray:
    """uint32 lookup table: index = renderer instance id, value = RGBA bytes (A=255) as a little-endian uint32.
    Index 0 (background) is black."""
    lut = np.zeros(len(colors) + 1, dtype=np.uint32)
    lut[0] = _ALPHA
    for i, (r, g, b) in enumerate(colors, start=1):
        lut[i] = np.uint32(r | (g << 8) | (b << 16)) | _ALPHA
    return lut


def encode_rgb(rgb: np.ndarray) -> bytes:
    """RGB24 (H,W,3) or RGBA32 (H,W,4) uint8, tightly packed."""
    return rgb.tobytes()


def encode_depth(depth: np.ndarray) -> bytes:
    """Planar view depth in metres as little-endian float32 (depthFormat "Meters")."""
    return depth.astype("<f4", copy=False).tobytes()


def encode_ids(instance: np.ndarray, lut: np.ndarray) -> bytes:
    """Instance (or, with a class table, semantic) segmentation: RGBA32 colours, A=255."""
    ids = np.minimum(instance, len(lut) - 1) if instance.size and instance.max() >= len(lut) else instance
    return lut[ids].astype("<u4", copy=False).tobytes()


def encode_normals(normals: np.ndarray) -> bytes:
    """World-space unit normals as RGBA32: ``(n * 0.5 + 0.5) * 255`` rounded, A=255."""
    h, w = normals.shape[:2]
    out = np.empty((h, w, 4), dtype=np.uint8)
    scaled = np.multiply(normals, np.float32(127.5), dtype=np.float32)
    scaled += np.float32(128.0)  # + 127.5 + 0.5: the cast truncates, i.e. rounds to nearest
    np.clip(scaled, 0.0, 255.0, out=scaled)
    out[..., :3] = scaled
    out[..., 3] = 255
    return out.tobytes()


def encode_flow(flow_px: np.ndarray, sensitivity: float = FLOW_SENSITIVITY) -> bytes:
    """Screen-space motion in pixels (H,W,2; x right, y up) -> Unity's HSV optical-flow RGBA32."""
    h, w = flow_px.shape[:2]
    out = np.zeros((h, w, 4), dtype=np.uint8)
    out[..., 3] = 255
    mx = np.multiply(flow_px[..., 0], np.float32(1.0 / w), dtype=np.float32)
    my = np.multiply(flow_px[..., 1], np.float32(1.0 / h), dtype=np.float32)
    scale = np.hypot(mx, my)  # value = |m| * sensitivity, then * 255 for 8-bit output
    if not scale.any():
        return out.tobytes()  # nothing moved (the common case in a static scene)
    scale *= np.float32(sensitivity * 255.0)
    h6 = np.arctan2(-my, -mx)  # hue * 6 = (angle / 2pi + 0.5) * 6
    h6 *= np.float32(3.0 / np.pi)
    h6 += np.float32(3.0)
    tmp = np.empty_like(h6)
    # Unity's Hue(): R = |6H-3|-1, G = 2-|6H-2|, B = 2-|6H-4|, each saturated; then * value, saturated again
    for channel, (centre, negate, offset) in enumerate(
        ((3.0, False, -1.0), (2.0, True, 2.0), (4.0, True, 2.0))
    ):
        np.subtract(h6, np.float32(centre), out=tmp)
        np.abs(tmp, out=tmp)
        if negate:
            np.negative(tmp, out=tmp)
        tmp += np.float32(offset)
        np.clip(tmp, 0.0, 1.0, out=tmp)
        tmp *= scale
        np.clip(tmp, 0.0, 255.0, out=tmp)
        np.rint(tmp, out=tmp)
        out[..., channel] = tmp
    return out.tobytes()


def decode_flow(rgba: np.ndarray, sensitivity: float = FLOW_SENSITIVITY) -> np.ndarray:
    """Invert :func:`encode_flow`: (H,W,3|4) uint8 -> float32 (H,W,2) motion in pixels, x right, y up.

    Works on either row order (it is per pixel). Resolution is limited by the 8-bit value channel
    (about width/255 pixels at sensitivity 1); motions above 1/sensitivity screen widths saturate.
    """
    rgb = np.asarray(rgba)[..., :3].astype(np.float64) / 255.0
    h, w = rgb.shape[:2]
    value = rgb.max(axis=-1)
    safe = np.where(value > 0, value, 1.0)
    r, g, b = (rgb[..., i] / safe for i in range(3))
    cmin = np.minimum(np.minimum(r, g), b)
    delta = np.where(1.0 - cmin > 0, 1.0 - cmin, 1.0)
    hue = (
        np.select(
            [r >= 1.0 - 1e-9, g >= 1.0 - 1e-9],
            [((g - b) / delta) % 6.0, (b - r) / delta + 2.0],
            (r - g) / delta + 4.0,
        )
        / 6.0
    )
    angle = (hue - 0.5) * 2 * np.pi
    magnitude = value / sensitivity
    flow = np.empty((h, w, 2), dtype=np.float32)
    flow[..., 0] = -magnitude * np.cos(angle) * w
    flow[..., 1] = -magnitude * np.sin(angle) * h
    flow[value == 0] = 0.0
    return flow
