"""Texture images for the optional per-instance texture (shared by all back-ends)."""

from __future__ import annotations

import numpy as np
from PIL import Image


def load_texture_rgba(path: str) -> np.ndarray:
    """RGBA8 pixels (H, W, 4), rows bottom-up so that uv (0, 0) samples the image's bottom-left (Unity)."""
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGBA"), dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load texture {path!r}: {exc}") from exc
    return np.ascontiguousarray(pixels[::-1])
