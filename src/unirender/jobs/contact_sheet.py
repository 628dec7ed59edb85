"""A labelled grid of one frame in every modality, for a person to judge a dataset at a glance.

Colour images are shown as they are; depth and other scalar fields through a turbo colour map (near = blue,
far = red, labelled with the value range and a colour bar); flow as a colour wheel (hue = direction, saturation =
magnitude, white = no motion; an all-zero flow, e.g. a static camera's, says so on the tile); float normals mapped
from [-1, 1]; 32-bit ids through a hash to colours. A title row says which frame the sheet shows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
from PIL import Image, ImageDraw, ImageFont

LABEL_HEIGHT = 22
PAD = 6
COLOUR_BAR = (80, 10)  # width, height: fits beside a caption like "depth  0.52 to 4.1" in a 256-pixel tile
NO_MOTION = "no motion"


def turbo(x: np.ndarray) -> np.ndarray:
    """Polynomial approximation of Google's Turbo colour map; ``x`` in [0, 1] -> uint8 RGB."""
    x = np.clip(x, 0.0, 1.0)[..., None]
    coeffs = np.array(
        [
            [0.13572138, 0.09140261, 0.10667330],
            [4.61539260, 2.19418839, 12.64194608],
            [-42.66032258, 4.84296658, -60.58204836],
            [132.13108234, -14.18503333, 110.36276771],
            [-152.94239396, 4.27729857, -89.90310912],
            [59.28637943, 2.82956604, 27.34824973],
        ]
    )
    rgb = np.zeros(x.shape[:-1] + (3,))
    for c in coeffs[::-1]:  # Horner
        rgb = rgb * x + c
    return (np.clip(rgb, 0, 1) * 255).astype(np.uint8)


def scalar_to_rgb(
    values: np.ndarray, value_range: tuple[float, float] | None = None
) -> tuple[np.ndarray, str]:
    """Turbo over the frame's own range of valid (finite, positive) values, or over ``value_range`` (a video's
    fixed scale)."""
    values = np.asarray(values, dtype=np.float64)
    valid = np.isfinite(values) & (values > 0)
    if not valid.any():
        return np.zeros(values.shape + (3,), np.uint8), "empty"
    lo, hi = value_range if value_range is not None else (float(values[valid].min()), float(values[valid].max()))
    rgb = turbo((values - lo) / (hi - lo if hi > lo else 1.0))
    rgb[~valid] = 0
    return rgb, f"{lo:.3g} to {hi:.3g}"


def flow_to_rgb(flow: np.ndarray) -> tuple[np.ndarray, str]:
    """Motion in pixels ``(H, W, 2)``; or the player's 8-bit colour encoding (Unity's optical-flow shader,
    decoded with the reference player's own decoder first)."""
    flow = np.asarray(flow)
    if flow.dtype == np.uint8 and flow.ndim == 3 and flow.shape[2] >= 3:
        from unirender.player.encode import decode_flow

        flow = decode_flow(flow)
    if flow.dtype.kind != "f" or flow.ndim != 3 or flow.shape[2] < 2:
        return as_rgb(flow), ""
    flow = flow.astype(np.float64)
    fx, fy = flow[..., 0], flow[..., 1]
    magnitude = np.hypot(fx, fy)
    top = float(magnitude.max()) if magnitude.size else 0.0
    hue = (np.arctan2(-fy, -fx) / np.pi + 1.0) / 2.0  # [0, 1]
    sat = magnitude / top if top > 0 else np.zeros_like(magnitude)
    # HSV -> RGB with value = 1.
    h6 = hue * 6.0
    i = np.floor(h6).astype(int) % 6
    f = h6 - np.floor(h6)
    p, q, t = 1 - sat, 1 - sat * f, 1 - sat * (1 - f)
    ones = np.ones_like(sat)
    r = np.choose(i, [ones, q, p, p, t, ones])
    g = np.choose(i, [t, ones, ones, q, p, p])
    b = np.choose(i, [p, p, t, ones, ones, q])
    rgb = (np.stack([r, g, b], axis=-1) * 255).astype(np.uint8)
    return rgb, f"max {top:.3g} px" if top > 0 else NO_MOTION


def ids_to_rgb(ids: np.ndarray) -> np.ndarray:
    h = (ids.astype(np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFF)
    rgb = np.stack([(h >> np.uint64(s)) & np.uint64(0xFF) for s in (16, 8, 0)], axis=-1).astype(np.uint8)
    rgb[ids == 0] = 0
    return rgb


def as_rgb(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.dtype == np.uint8:
        if array.ndim == 2:
            return np.repeat(array[:, :, None], 3, axis=2)
        if array.shape[2] >= 3:
            return np.ascontiguousarray(array[:, :, :3])
        return np.concatenate([array, np.zeros(array.shape[:2] + (3 - array.shape[2],), np.uint8)], axis=2)
    if array.dtype.kind in "ui" and array.ndim == 2:
        return ids_to_rgb(array)
    if array.dtype.kind == "f" and array.ndim == 3 and array.shape[2] >= 3:
        return ((np.clip(array[:, :, :3], -1, 1) * 0.5 + 0.5) * 255).astype(np.uint8)  # normals
    if array.ndim == 2:
        return scalar_to_rgb(array)[0]
    return np.zeros(array.shape[:2] + (3,), np.uint8)


def visualize(
    label: str, array: np.ndarray, value_range: tuple[float, float] | None = None
) -> tuple[np.ndarray, str]:
    """``(RGB image, caption)`` for one named frame; ``value_range`` fixes depth's scale (else the frame's)."""
    lowered = label.lower()
    if "flow" in lowered:
        return flow_to_rgb(array)
    if "depth" in lowered and np.asarray(array).dtype.kind == "f":
        return scalar_to_rgb(array, value_range)
    return as_rgb(array), ""


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def contact_sheet(
    frames: Iterable[tuple[str, np.ndarray]],
    *,
    tile: int = 256,
    columns: int = 4,
    title: str | None = None,
    value_range: tuple[float, float] | None = None,
) -> Image.Image:
    """A grid of ``tile``-wide panels, each captioned with its label (and value range where useful); ``title``
    (e.g. which frame of which episode) gets a row of its own above the grid; ``value_range``: depth's scale
    (default: each panel's own)."""
    panels = []
    for label, array in frames:
        rgb, caption = visualize(label, array, value_range)
        image = Image.fromarray(rgb)
        scale = tile / max(image.width, image.height)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        panels.append((label, caption, image.resize(size, Image.NEAREST)))
    if not panels:
        raise ValueError("contact sheet: no frames")
    columns = min(columns, len(panels))
    rows = (len(panels) + columns - 1) // columns
    cell_w, cell_h = tile + PAD, tile + LABEL_HEIGHT + PAD
    top = LABEL_HEIGHT if title else 0
    sheet = Image.new("RGB", (columns * cell_w + PAD, top + rows * cell_h + PAD), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    font = _font(14)
    if title:
        draw.text((PAD + 2, PAD + 3), title, fill=(255, 255, 255), font=font)
    for n, (label, caption, image) in enumerate(panels):
        x = PAD + (n % columns) * cell_w
        y = top + PAD + (n // columns) * cell_h
        text = f"{label}  {caption}".strip()
        draw.text((x + 2, y + 3), text, fill=(235, 235, 235), font=font)
        sheet.paste(image, (x, y + LABEL_HEIGHT))
        if "depth" in label.lower() and " to " in caption:  # near (low) on the left, as in the caption
            bar_x = max(x + 2 + int(draw.textlength(text, font=font)) + 8, x + tile - COLOUR_BAR[0])
            if x + tile - bar_x >= 16:
                _colour_bar(sheet, bar_x, y + 6, x + tile - bar_x)
        if caption == NO_MOTION:
            _centred_text(draw, (x, y + LABEL_HEIGHT, image.width, image.height), "no motion: flow is zero", font)
    return sheet


def _colour_bar(sheet: Image.Image, x: int, y: int, width: int) -> None:
    bar = turbo(np.linspace(0.0, 1.0, max(width, 1)))[None, :, :].repeat(COLOUR_BAR[1], axis=0)
    sheet.paste(Image.fromarray(bar), (x, y))


def _centred_text(draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], text: str, font) -> None:
    x, y, w, h = box
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    draw.text((x + (w - (right - left)) // 2, y + (h - (bottom - top)) // 2), text, fill=(90, 90, 90), font=font)


def write_contact_sheet(path: str | os.PathLike, frames: Iterable[tuple[str, np.ndarray]], **kwargs) -> None:
    """:func:`contact_sheet` written atomically as PNG (``kwargs``: ``tile``, ``columns``, ``title``)."""
    from unirender.jobs.atomic import atomic_file

    sheet = contact_sheet(frames, **kwargs)
    with atomic_file(path) as f:
        sheet.save(f, format="PNG")
