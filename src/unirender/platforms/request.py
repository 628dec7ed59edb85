"""What the caller wants a platform for: one immutable request, validated on construction."""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlatformRequest:
    """The inputs of platform validation (protocol.md 7.1), plus ``builtin`` for the reference player.

    ``x_display``: ``":1"``, ``":1.0"``, ``"1"`` or ``"1.0"``; None scans ``/tmp/.X11-unix``.
    ``gpu_device``: a CUDA ordinal (an index into ``CUDA_VISIBLE_DEVICES`` when that is set) or a CUDA UUID
    (``"GPU-..."``); None lets the driver choose and never requires ``nvidia-smi``.
    """

    system: str = field(default_factory=_platform.system)
    width: int = 300
    height: int = 300
    x_display: str | None = None
    headless: bool = False
    gpu_device: int | str | None = None
    allow_virtual_display: bool = True
    builtin: bool = False

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"PlatformRequest.{name} must be a positive int, got {value!r}")
        if self.x_display is not None:
            parse_x_display(self.x_display)  # raises ValueError with the accepted forms
        if isinstance(self.gpu_device, bool) or not (
            self.gpu_device is None
            or (isinstance(self.gpu_device, int) and self.gpu_device >= 0)
            or (isinstance(self.gpu_device, str) and self.gpu_device.strip())
        ):
            raise ValueError(
                f"gpu_device must be a non-negative int, a CUDA UUID or None, got {self.gpu_device!r}"
            )

    @classmethod
    def of(cls, player: Any, *, headless: bool, builtin: bool) -> PlatformRequest:
        """The request for a player's settings: ``width``, ``height``, ``x_display`` and ``gpu_device`` read from
        ``player`` (a controller of any family, or a spec's environment); the one place that builds a request."""
        return cls(width=player.width, height=player.height, x_display=player.x_display, headless=headless,
                   gpu_device=player.gpu_device, builtin=builtin)  # fmt: skip


def parse_x_display(text: str) -> tuple[int, int | None]:
    """``":1"`` -> (1, None), ``":1.2"`` / ``"1.2"`` -> (1, 2). Only local displays are supported."""
    raw = str(text).strip()
    body = raw[1:] if raw.startswith(":") else raw
    number, _, screen = body.partition(".")
    if not number.isdigit() or (screen and not screen.isdigit()) or (body.endswith(".") and not screen):
        raise ValueError(
            f"invalid X display {text!r}: expected ':N', ':N.S', 'N' or 'N.S' (local displays only)"
        )
    return int(number), (int(screen) if screen else None)
