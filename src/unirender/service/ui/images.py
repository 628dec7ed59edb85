"""A session's frames as browser images: colour as JPEG, depth through the turbo colour map, ids as PNG.

Which views an event has and their pixels are the family's business (``ui.families``). Segmentation goes out as
PNG (lossless: JPEG would smear the colour of each object's edges); everything else as JPEG, ~5x smaller than PNG
for rendered scenes.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from unirender.jobs.contact_sheet import visualize

JPEG_QUALITY = 85  # rendered scenes: no visible artefacts at 300x300, ~25 KB a frame
LOSSLESS = ("instance_segmentation", "semantic_segmentation")

def encode_image(view: str, array: np.ndarray, *, lossless: bool = False) -> tuple[str, bytes]:
    """``(mime type, bytes)`` of one frame as a person should see it (``lossless``: always PNG)."""
    rgb, _caption = visualize(view, array)
    image = Image.fromarray(np.ascontiguousarray(rgb))
    out = io.BytesIO()
    if lossless or any(word in view for word in LOSSLESS):
        image.save(out, format="PNG", compress_level=1)
        return "image/png", out.getvalue()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return "image/jpeg", out.getvalue()
