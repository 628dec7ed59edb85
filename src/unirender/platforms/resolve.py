"""Choosing a platform: ordered candidates, each with its verdict and reasons, and one clear error.

Policy for ``platform="auto"`` on Linux: CloudRendering when a Vulkan device exists, else Linux64 on a valid
X screen, else (if allowed) Linux64 on a virtual display unirender starts; an explicit ``x_display`` means Linux64
on that display only. The builtin reference player
tries EGL first (no X, fast start). macOS: OSXIntel64. Explicit platforms are honoured or fail with their
own reasons. Candidates after the chosen one are not probed (listed as "not evaluated").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from unirender.errors import PlatformError, SpecError
from unirender.platforms.classes import (
    EGL,
    PACKAGES,
    PLATFORMS,
    Assessment,
    CloudRendering,
    Linux64,
    OSXIntel64,
    Platform,
    apt_line,
    platform_by_name,
)
from unirender.platforms.devices import Device
from unirender.platforms.request import PlatformRequest, parse_x_display
from unirender.platforms.x11 import find_screen
from unirender.platforms.xvfb import VirtualDisplay, acquire_virtual_display, lease_shared, xvfb_path

log = logging.getLogger(__name__)

VIRTUAL = "virtual display"


@dataclass
class Candidate:
    """One line of the decision: a platform (``via`` "virtual display" for Linux64 on Xvfb) and its verdict."""

    platform: Platform
    status: str  # "usable" | "unusable" | "not applicable" | "not evaluated"
    reasons: list[str] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    instructions: str = ""
    via: str | None = None
    notes: list[str] = field(default_factory=list)
    gpu_indices: list[int] | None = None  # see Assessment.gpu_indices
    gpu_mismatch: bool = False

    @property
    def label(self) -> str:
        return f"{self.platform.name} ({self.via})" if self.via else self.platform.name

    def to_dict(self) -> dict:
        return {
            "platform": self.platform.name,
            "via": self.via,
            "label": self.label,
            "status": self.status,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "devices": [d.to_dict() for d in self.devices],
            "instructions": self.instructions,
        }


@dataclass
class Resolution:
    """The chosen platform and how to launch on it. Call ``release()`` when the player is gone."""

    request: PlatformRequest
    platform: Platform
    env: dict[str, str]
    args: list[str]
    device: Device | None
    candidates: list[Candidate]
    virtual_display: VirtualDisplay | None = None
    _released: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.platform.name

    @property
    def backend(self) -> str | None:
        """``UNIRENDER_PLAYER_BACKEND`` for the reference player: "egl" | "glx" | "vulkan"."""
        return self.platform.player_backend

    @property
    def software(self) -> bool | None:
        return None if self.device is None else self.device.software

    def release(self) -> None:
        """Give back the shared virtual display, if any (idempotent)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        if self.virtual_display is not None:
            self.virtual_display.release()

    def explain(self) -> str:
        lines = [f"platform {self.label()} chosen for {self.request.width}x{self.request.height}"]
        if self.device is not None:
            lines[0] += f" on {self.device.summary}"
        for c in self.candidates:
            lines.append(f"  {c.label}: {c.status}" + (f" ({'; '.join(c.reasons)})" if c.reasons else ""))
        return "\n".join(lines)

    def label(self) -> str:
        return (
            f"{self.name} ({VIRTUAL} {self.virtual_display.display})" if self.virtual_display else self.name
        )

    def to_dict(self) -> dict:
        return {
            "platform": self.name,
            "backend": self.backend,
            "env": dict(self.env),
            "args": list(self.args),
            "device": self.device.to_dict() if self.device else None,
            "software": self.software,
            "virtual_display": self.virtual_display.display if self.virtual_display else None,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    def __enter__(self) -> Resolution:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def auto_order(request: PlatformRequest) -> list[Platform]:
    if request.system == "Darwin":
        return [OSXIntel64()]
    if request.system != "Linux":
        return []
    if request.x_display is not None:
        # Asking for an X display asks for Linux64 on it (what AI2-THOR's x_display means); it is checked alone,
        # never silently traded for CloudRendering, EGL or a virtual display.
        return [Linux64()]
    order: list[Platform] = [CloudRendering(), Linux64()]
    return [EGL(), *order] if request.builtin else order


def _as_platforms(platform: str | Platform | type[Platform] | Sequence) -> tuple[list[Platform], bool]:
    """(candidates, explicit)."""
    if isinstance(platform, str):
        if platform.strip().lower() == "auto":
            return [], False
        return [platform_by_name(platform)], True
    if isinstance(platform, type) and issubclass(platform, Platform):
        return [platform()], True
    if isinstance(platform, type) and platform.__name__ in PLATFORMS:  # e.g. ai2thor.platform.CloudRendering
        return [platform_by_name(platform.__name__)], True
    if isinstance(platform, Platform):
        return [platform], True
    if isinstance(platform, Sequence):
        out = []
        for item in platform:
            out.extend(_as_platforms(item)[0])
        if not out:
            raise PlatformError("an empty list of platforms allows nothing")
        return out, True
    raise PlatformError(f"platform must be 'auto', a platform name or class, got {platform!r}")


def _candidate(a: Assessment, request: PlatformRequest) -> Candidate:
    status = "usable" if a.usable else ("unusable" if a.applicable else "not applicable")
    instructions = "" if a.usable or not a.applicable else a.platform.dependency_instructions(request)
    return Candidate(a.platform, status, list(a.reasons), list(a.devices), instructions, notes=list(a.notes),
                     gpu_indices=a.gpu_indices, gpu_mismatch=a.gpu_mismatch)


class GpuDeviceError(PlatformError, SpecError):
    """``gpu_device`` is none of the GPUs any candidate platform found: the request's mistake (a 422 from the
    service), the same answer whatever else this host has (an X server, a virtual display). ``valid``: the
    values that would have been taken, by platform."""

    def __init__(self, message: str, valid: dict[str, list[int]] | None = None):  # one argument: picklable
        self.valid = valid or {}
        PlatformError.__init__(self, message)
        self.errors = [("environment.gpu_device", message.split("\n", 1)[0])]


def _gpu_device_error(request: PlatformRequest, candidates: list[Candidate], explicit: bool) -> GpuDeviceError | None:
    """The error for a gpu_device no candidate has, or None when some platform failed for another reason while
    it has that GPU (that is the platform's problem: a PlatformError says so)."""
    if request.gpu_device is None or not any(c.gpu_mismatch for c in candidates):
        return None
    if any(c.gpu_indices is not None and not c.gpu_mismatch for c in candidates):
        return None
    valid = {c.label: list(c.gpu_indices or []) for c in candidates if c.gpu_mismatch}
    everywhere = sorted({i for v in valid.values() for i in v})
    listed = ", ".join(str(i) for i in everywhere) if everywhere else "none (no GPU was found)"
    first = f"gpu_device={request.gpu_device!r} is not a GPU of this host; valid gpu_device values: {listed}"
    return GpuDeviceError(f"{first}\n{_failure_message(request, candidates, explicit)}", valid)


def resolve(
    request: PlatformRequest | None = None, platform: str | Platform | type[Platform] | Sequence = "auto"
) -> Resolution:
    """Choose a platform for ``request`` (see module doc); raises ``PlatformError`` listing every reason."""
    request = request or PlatformRequest()
    chosen_list, explicit = _as_platforms(platform)
    order = chosen_list if explicit else auto_order(request)
    candidates: list[Candidate] = []
    resolution: Resolution | None = None
    for index, plat in enumerate(order):
        assessment = plat.assess(request)
        candidates.append(_candidate(assessment, request))
        log.info(
            "platform %s: %s%s",
            plat.name,
            candidates[-1].status,
            f" ({'; '.join(assessment.reasons)})" if assessment.reasons else "",
        )
        if assessment.usable:
            resolution = Resolution(
                request, plat, dict(assessment.env), list(assessment.args), assessment.device, candidates
            )
            if "DISPLAY" in resolution.env:  # one of our own shared Xvfbs, found by the scan: hold it too
                resolution.virtual_display = lease_shared(parse_x_display(resolution.env["DISPLAY"])[0])
        elif isinstance(plat, Linux64) and assessment.applicable and _virtual_allowed(request):
            resolution = _try_virtual_display(plat, request, candidates)
        if resolution is not None:
            candidates.extend(Candidate(p, "not evaluated") for p in order[index + 1 :])
            log.info("resolved %s", resolution.explain().replace("\n", " |"))
            return resolution
    gpu_error = _gpu_device_error(request, candidates, explicit)
    if gpu_error is not None:
        raise gpu_error
    raise PlatformError(_failure_message(request, candidates, explicit))


def _virtual_allowed(request: PlatformRequest) -> bool:
    # An explicitly requested x_display is the user's choice: do not silently replace it.
    return request.allow_virtual_display and request.x_display is None and request.system == "Linux"


def _try_virtual_display(
    plat: Linux64, request: PlatformRequest, candidates: list[Candidate]
) -> Resolution | None:
    candidate = Candidate(plat, "unusable", via=VIRTUAL)
    candidates.append(candidate)
    if request.gpu_device is not None:  # Xvfb renders in software: that would be a silent CPU fall-back
        candidate.reasons.append(
            f"gpu_device={request.gpu_device!r} asks for a GPU, and a virtual display (Xvfb) renders in software"
        )
        candidate.instructions = (
            "for Linux64 on a GPU run a real Xorg (`unirender xorg-config`) and pass x_display"
        )
        candidate.gpu_indices, candidate.gpu_mismatch = [], True
        return None
    if not xvfb_path():
        candidate.reasons.append("Xvfb is not installed")
        candidate.instructions = apt_line(PACKAGES["xvfb"])
        log.info("platform Linux64 (virtual display): unusable (no Xvfb)")
        return None
    try:
        display = acquire_virtual_display(request.width, request.height)
    except PlatformError as exc:
        candidate.reasons.append(f"starting Xvfb failed: {exc}")
        return None
    search = find_screen(request.width, request.height, f"{display.display}.0")
    if not search.chosen:  # cannot happen with our own Xvfb flags, but never hand out a bad display
        display.release()
        candidate.reasons.extend(search.reasons)
        return None
    device = Device(
        api="glx",
        index=search.chosen.display,
        name=f"Mesa llvmpipe on Xvfb {search.chosen.display} ({display.width}x{display.height})",
        kind="cpu",
        software=True,  # Xvfb renders GLX with Mesa's software rasteriser, always
    )
    candidate.status = "usable"
    candidate.devices = [device]
    env = {"DISPLAY": search.chosen.display}
    return Resolution(request, plat, env, [], device, candidates, virtual_display=display)


def _failure_message(request: PlatformRequest, candidates: list[Candidate], explicit: bool) -> str:
    what = "the requested platform" if explicit else "any platform"
    lines = [
        f"No usable platform: {what} failed for a {request.width}x{request.height} "
        f"{'builtin reference player' if request.builtin else 'player'} on {request.system}."
    ]
    if not candidates:
        lines.append(f"  (no platform exists for {request.system!r}: use Linux or macOS)")
    packages: list[str] = []
    for c in candidates:
        lines.append(f"  - {c.label}: {c.status}")
        lines.extend(f"      {reason}" for reason in c.reasons)
        if c.instructions:
            lines.append(f"      fix: {c.instructions}")
        if c.status == "unusable":
            key = (
                "xvfb"
                if c.platform.name == "Linux64"
                else c.platform.name.lower().replace("cloudrendering", "vulkan")
            )
            packages.extend(p for p in PACKAGES.get(key, []) if p not in packages)
    if (
        request.system == "Linux"
        and not explicit
        and "xvfb" not in packages
        and request.allow_virtual_display
    ):
        packages.extend(p for p in PACKAGES["xvfb"] if p not in packages)
    if packages:
        lines.append(f"Install the missing packages (Debian/Ubuntu): {apt_line(packages)}")
    lines.append("Run `unirender doctor` for a full report.")
    return "\n".join(lines)
