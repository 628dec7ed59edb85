"""Images for OpenEnv clients: base64 PNG or JPEG (what a vision-language agent reads) or raw arrays (what an RL
trainer reads: no codec on either side)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping

import numpy as np
from PIL import Image

from unirender.openenv.models import EncodedArray

# JPEG quality: Pillow's default (75) blurs the edges an agent steers by; 90 keeps them at about a third of PNG's
# bytes for rendered scenes.
JPEG_QUALITY = 90


def _as_image(array: np.ndarray) -> Image.Image:
    """A PIL image of a frame: uint8 RGB/RGBA/grey as is; float depth (metres) as 16-bit millimetres."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype != np.uint8:
        if array.ndim != 2:
            raise ValueError(f"cannot encode a {array.dtype} image of shape {array.shape} as PNG or JPEG")
        millimetres = np.clip(np.nan_to_num(array.astype(np.float64) * 1000.0), 0, 65535).astype(np.uint16)
        return Image.fromarray(millimetres)
    return Image.fromarray(np.ascontiguousarray(array))


def encode_image(array: np.ndarray, image_format: str) -> str:
    """One frame as base64 PNG or JPEG. Depth (float metres) is a 16-bit PNG of millimetres; JPEG has no
    16-bit form, so depth asked for as JPEG is refused."""
    image = _as_image(np.asarray(array))
    buffer = io.BytesIO()
    if image_format == "png":
        image.save(buffer, format="PNG", compress_level=1)  # fast: the socket, not the codec, is the cost
    elif image_format == "jpeg":
        if image.mode not in ("RGB", "L"):
            raise ValueError(f"a {image.mode} image has no JPEG form: ask for image_format='png' or 'array'")
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    else:
        raise ValueError(f"image_format {image_format!r} is not an encoded format")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def encode_array(array: np.ndarray) -> EncodedArray:
    array = np.ascontiguousarray(array)
    return EncodedArray(
        dtype=array.dtype.str, shape=list(array.shape), data=base64.b64encode(array.tobytes()).decode("ascii")
    )


def decode_array(encoded: EncodedArray | Mapping) -> np.ndarray:
    """The client's side of :func:`encode_array` (a model or its JSON dict)."""
    if not isinstance(encoded, EncodedArray):
        encoded = EncodedArray(**encoded)
    return np.frombuffer(base64.b64decode(encoded.data), dtype=np.dtype(encoded.dtype)).reshape(encoded.shape)


def image_fields(images: Mapping[str, np.ndarray], image_format: str) -> dict:
    """The observation's image fields for ``images`` (name -> frame, in declared order)."""
    names = list(images)
    if image_format == "array":
        return {"visual_observation_names": names, "arrays": {n: encode_array(a) for n, a in images.items()}}
    return {
        "visual_observation_names": names,
        "visual_observations": [encode_image(a, image_format) for a in images.values()],
    }
