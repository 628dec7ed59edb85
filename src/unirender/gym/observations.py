"""Observation spaces from a declared set of modalities, and the event -> observation conversion that matches them.

One place decides what an env observes: :func:`observation_layout` turns the declaration (one modality name -> a
plain ``Box``; a list -> a ``Dict``) and the session's first event into an :class:`ObservationLayout`, whose
``space`` is exact (dtype, shape, finite bounds) and whose ``observe(event)`` returns arrays inside it. Any env
in this package (``UnityEnv``, and others that observe the same modalities) builds its spaces here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from unirender.protocol.event import MODALITY_ATTRIBUTE
from unirender.protocol.images import DepthFormat, depth_scale

# How depth is handed to the learner: metres as float32, millimetres as uint16 (65.535 m at most), or the
# [0, max_depth] range spread over uint8 0..255, which Stable-Baselines3 treats as an image (a CNN, /255).
DEPTH_DTYPES = ("float32", "uint16", "uint8")
_UINT16_MAX_METRES = np.iinfo(np.uint16).max / 1000.0


def modality_list(observations: str | Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """``(modalities, single)``: a name alone means a plain Box observation (``single``), a list a Dict."""
    single = isinstance(observations, str)
    modalities = (observations,) if single else tuple(observations)
    unknown = [m for m in modalities if m not in MODALITY_ATTRIBUTE]
    if unknown or not modalities:
        raise ValueError(f"unknown modalities {unknown}; choose from {list(MODALITY_ATTRIBUTE)}")
    if len(set(modalities)) != len(modalities):
        raise ValueError(f"modalities listed twice: {list(modalities)}")
    return modalities, single


@dataclass(frozen=True)
class _Modality:
    """How one modality's frame becomes its part of the observation."""

    name: str
    box: spaces.Box
    depth_to_metres: float = 1.0  # depth only: factor from the event's depth units to metres
    max_depth: float = 0.0  # depth only, metres

    def observe(self, event: Any) -> np.ndarray:
        frame = getattr(event, MODALITY_ATTRIBUTE[self.name], None)
        if frame is None:
            raise ValueError(f"the player sent no {self.name!r} frame in this event")
        array = np.asarray(frame)
        if self.name == "depth":
            return self._depth(array)
        if array.shape != self.box.shape:
            raise ValueError(
                f"{self.name} frame has shape {array.shape}, the observation space {self.box.shape}"
            )
        # A copy the learner owns: event frames are read-only, bottom-up-flipped views (negative strides),
        # which torch.as_tensor refuses and a replay buffer must not alias.
        return np.array(array, dtype=self.box.dtype, order="C")

    def _depth(self, depth: np.ndarray) -> np.ndarray:
        if depth.shape != self.box.shape[:2]:
            raise ValueError(f"depth frame has shape {depth.shape}, the observation space {self.box.shape}")
        metres = depth * np.float32(self.depth_to_metres) if self.depth_to_metres != 1.0 else depth
        # Clipped: a player may report beyond its far plane, and NaN (no hit) becomes the far bound.
        metres = np.nan_to_num(np.clip(metres, 0.0, self.max_depth), nan=self.max_depth)
        dtype = self.box.dtype
        if dtype == np.float32:
            out = metres.astype(np.float32, copy=False)
        elif dtype == np.uint16:
            out = np.rint(metres * 1000.0).astype(np.uint16)
        else:
            out = np.rint(metres * (255.0 / self.max_depth)).astype(np.uint8)
        return np.ascontiguousarray(out[:, :, None])  # the float32 path may still be a view of the frame


@dataclass(frozen=True)
class ObservationLayout:
    """The observation space of an env and the conversion of events into it."""

    space: spaces.Box | spaces.Dict
    parts: tuple[_Modality, ...]
    single: bool

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.parts)

    def observe(self, event: Any) -> np.ndarray | dict[str, np.ndarray]:
        if self.single:
            return self.parts[0].observe(event)
        return {part.name: part.observe(event) for part in self.parts}


def observation_layout(
    observations: str | Sequence[str],
    event: Any,
    *,
    depth_dtype: str = "float32",
    max_depth: float | None = None,
) -> ObservationLayout:
    """The layout for ``observations``, with shapes read from ``event`` (the session's first: what the player
    really sends). Depth is ``(H, W, 1)`` metres bounded by ``max_depth`` (default: the camera's far clipping
    plane), as ``depth_dtype`` (see :data:`DEPTH_DTYPES`); the other modalities are uint8 ``(H, W, C)`` as sent."""
    modalities, single = modality_list(observations)
    if depth_dtype not in DEPTH_DTYPES:
        raise ValueError(f"depth_dtype must be one of {DEPTH_DTYPES}, not {depth_dtype!r}")
    if max_depth is not None and not (0 < max_depth < np.inf):
        raise ValueError(f"max_depth must be a positive number of metres, not {max_depth!r}")
    if event is None:
        raise RuntimeError("the session has no first event to read the observation layout from")
    parts = []
    for modality in modalities:
        frame = getattr(event, MODALITY_ATTRIBUTE[modality], None)
        if frame is None:
            from unirender.spec.models import MODALITY_INITIALIZE_FLAG

            raise ValueError(
                f"the player sent no {modality!r} frame although {MODALITY_INITIALIZE_FLAG[modality] or 'it'} "
                "was requested; this executable may not support that modality"
            )
        shape = np.asarray(frame).shape
        if modality == "depth":
            parts.append(_depth_part(shape, event, depth_dtype, max_depth))
        else:
            parts.append(_Modality(modality, spaces.Box(0, 255, shape, np.uint8)))
    space = parts[0].box if single else spaces.Dict({part.name: part.box for part in parts})
    return ObservationLayout(space, tuple(parts), single)


def _depth_part(shape: tuple, event: Any, depth_dtype: str, max_depth: float | None) -> _Modality:
    near, far = float(event.camera_near_plane), float(event.camera_far_plane)
    to_metres = depth_scale(event.depth_format, DepthFormat.Meters, near, far)
    bound = float(max_depth if max_depth is not None else far)
    if depth_dtype == "float32":
        box = spaces.Box(np.float32(0.0), np.float32(bound), (*shape, 1), np.float32)
    elif depth_dtype == "uint16":
        if bound > _UINT16_MAX_METRES:
            raise ValueError(
                f"uint16 millimetre depth reaches {_UINT16_MAX_METRES} m; the bound is {bound} m: give max_depth"
            )
        box = spaces.Box(0, round(bound * 1000.0), (*shape, 1), np.uint16)
    else:
        box = spaces.Box(0, 255, (*shape, 1), np.uint8)
    return _Modality("depth", box, depth_to_metres=to_metres, max_depth=bound)
