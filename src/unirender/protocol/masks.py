"""Instance/class masks and 2D boxes from a segmentation frame and the metadata ``colors`` list (protocol.md 4.2).

Same semantics as AI2-THOR 5.0.0's lazy masks: only names containing ``|`` are instances (``Type|x|y|z``); a
class collects the colors of its instances and of its own entry; ``"background"`` is every color that no
metadata entry names. Each mapping lists only what is visible in the frame, and computes a mask on first access.
Colors are matched on RGB only, so masks work the same for RGBA32 ids (alpha 255), legacy RGB24 ids and frames
rebuilt by :meth:`Event.from_frames`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from unirender.protocol.errors import MetadataError


def color_key(color) -> int:
    """``[r, g, b]`` -> ``r | g << 8 | b << 16``."""
    r, g, b = (int(c) for c in color[:3])
    return r | (g << 8) | (b << 16)


def checked_colors(colors) -> list:
    """``metadata["colors"]`` (None -> ``[]``), each entry ``{"name": str, "color": [r, g, b]}``."""
    if colors is None:
        return []
    if not isinstance(colors, list):
        raise MetadataError(f"metadata colors must be a list, got {type(colors).__name__}")
    for i, entry in enumerate(colors):
        color = entry.get("color") if isinstance(entry, dict) else None
        if (
            not isinstance(entry.get("name") if isinstance(entry, dict) else None, str)
            or not isinstance(color, list | tuple)
            or len(color) < 3
            or not all(isinstance(c, int) and 0 <= c <= 255 for c in color[:3])
        ):
            raise MetadataError(
                f"metadata colors[{i}] must be {{'name': str, 'color': [r, g, b]}}, got {entry!r:.100}"
            )
    return colors


def bounding_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """``(x0, y0, x1, y1)`` of a boolean mask, inclusive, top-down image coordinates; None if empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])


class SegmentationColors:
    """A segmentation frame's per-pixel color keys plus the metadata names for them (shared by the mappings)."""

    def __init__(self, frame: np.ndarray, colors: list | None):
        self.frame = frame
        self.instance_colors: dict[str, int] = {}
        self.class_colors: dict[str, list[int]] = {}
        for entry in colors or ():
            name, key = entry["name"], color_key(entry["color"])
            cls = name
            if "|" in name:
                self.instance_colors[name] = key
                cls = name.split("|")[0]
            self.class_colors.setdefault(cls, []).append(key)
        self._keys: np.ndarray | None = None
        self._present: set[int] | None = None

    @property
    def keys(self) -> np.ndarray:
        """``(H, W)`` uint32 color key per pixel (computed once)."""
        if self._keys is None:
            f = self.frame
            self._keys = (
                f[:, :, 0].astype(np.uint32)
                | (f[:, :, 1].astype(np.uint32) << 8)
                | (f[:, :, 2].astype(np.uint32) << 16)
            )
        return self._keys

    @property
    def present(self) -> set[int]:
        """Color keys that occur in the frame."""
        if self._present is None:
            self._present = {int(k) for k in np.unique(self.keys)}
        return self._present

    def mask_of(self, keys) -> np.ndarray:
        keys = list(keys)
        mask = self.keys == keys[0]
        for key in keys[1:]:
            mask |= self.keys == key
        mask.flags.writeable = False
        return mask


class _LazyMapping(Mapping):
    """Mapping whose keys are the names visible in the frame; values computed and cached on access."""

    def __init__(self, colors: SegmentationColors):
        self._colors = colors
        self._cache: dict = {}
        self._names: list[str] | None = None

    def _visible_names(self) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _compute(self, name: str):  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, name: str):
        if name not in self._cache:
            if name not in self:
                raise KeyError(name)
            self._cache[name] = self._compute(name)
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        return name in self._visible()

    def _visible(self) -> list[str]:
        if self._names is None:
            self._names = self._visible_names()
        return self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._visible())

    def __len__(self) -> int:
        return len(self._visible())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self._visible())!r}>"


class InstanceMasks(_LazyMapping):
    """objectId -> bool ``(H, W)`` mask (read-only), for instances visible in the frame."""

    def _visible_names(self) -> list[str]:
        present = self._colors.present
        return [name for name, key in self._colors.instance_colors.items() if key in present]

    def _compute(self, name: str) -> np.ndarray:
        return self._colors.mask_of([self._colors.instance_colors[name]])


class ClassMasks(_LazyMapping):
    """objectType -> bool ``(H, W)`` mask; ``"background"`` covers colors the metadata does not name."""

    def _background_keys(self) -> set[int]:
        named = {key for keys in self._colors.class_colors.values() for key in keys}
        return self._colors.present - named

    def _visible_names(self) -> list[str]:
        present = self._colors.present
        names = [cls for cls, keys in self._colors.class_colors.items() if present.intersection(keys)]
        if self._background_keys():
            names.append("background")
        return names

    def _compute(self, name: str) -> np.ndarray:
        if name == "background":
            return self._colors.mask_of(sorted(self._background_keys()))
        present = self._colors.present
        return self._colors.mask_of([k for k in self._colors.class_colors[name] if k in present])


class InstanceDetections2D(_LazyMapping):
    """objectId -> ``(x0, y0, x1, y1)`` inclusive box, top-down, for visible instances."""

    def __init__(self, masks: InstanceMasks):
        super().__init__(masks._colors)
        self._masks = masks

    def _visible_names(self) -> list[str]:
        return list(self._masks)

    def _compute(self, name: str) -> tuple[int, int, int, int]:
        return bounding_box(self._masks[name])


class ClassDetections2D(_LazyMapping):
    """objectType -> tuple of ``(x0, y0, x1, y1)`` boxes, one per visible color of that class."""

    def _visible_names(self) -> list[str]:
        present = self._colors.present
        return [cls for cls, keys in self._colors.class_colors.items() if present.intersection(keys)]

    def _compute(self, name: str) -> tuple[tuple[int, int, int, int], ...]:
        present = self._colors.present
        boxes = (
            bounding_box(self._colors.mask_of([k])) for k in self._colors.class_colors[name] if k in present
        )
        return tuple(box for box in boxes if box is not None)


__all__ = [
    "ClassDetections2D",
    "ClassMasks",
    "InstanceDetections2D",
    "InstanceMasks",
    "SegmentationColors",
    "bounding_box",
    "checked_colors",
    "color_key",
]
