"""The platform classes (protocol.md 7.1): what each needs, how to check it, how to launch on it.

Each class turns a ``PlatformRequest`` into an ``Assessment`` (usable or not, with every reason, the devices
seen, the chosen device, and the launch environment and arguments). ``validate``/``launch_env`` are the
AI2-THOR-shaped views of that one assessment.
"""

from __future__ import annotations

import logging
import os
import plistlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from unirender.errors import PlatformError
from unirender.platforms import chromium, gpus, probes
from unirender.platforms.devices import Device
from unirender.platforms.request import PlatformRequest, parse_x_display
from unirender.platforms.x11 import X11_SOCKET_DIR, find_screen
from unirender.platforms.xvfb import started_here

log = logging.getLogger(__name__)

# Debian/Ubuntu package names per need (the exact names the error messages print).
PACKAGES = {
    "vulkan": ["libvulkan1", "mesa-vulkan-drivers"],
    "xvfb": ["xvfb", "libgl1", "libglx-mesa0", "libgl1-mesa-dri"],
    "egl": ["libegl1", "libegl-mesa0", "libgl1", "libgl1-mesa-dri"],
}


def apt_line(packages: list[str]) -> str:
    return "sudo apt-get install -y " + " ".join(packages)


@dataclass
class Assessment:
    """One platform's verdict for one request."""

    platform: Platform
    usable: bool
    reasons: list[str] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    device: Device | None = None
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    applicable: bool = True
    notes: list[str] = field(default_factory=list)
    # With a gpu_device: the values this platform would take (from the devices it found), and whether the
    # platform was refused only because gpu_device is not one of them (resolve() then says so: GpuDeviceError).
    gpu_indices: list[int] | None = None
    gpu_mismatch: bool = False


def gpu_mismatch(platform: Platform, request: PlatformRequest, valid: list[int], found: str,
                 devices: list[Device]) -> Assessment:
    """The verdict for a gpu_device that is none of ``valid``: unusable, with the valid values in the reason."""
    listed = ", ".join(str(i) for i in valid) if valid else "none"
    reason = f"gpu_device={request.gpu_device!r}: {platform.name} found {found} (valid gpu_device: {listed})"
    return Assessment(platform, usable=False, reasons=[reason], devices=devices, gpu_indices=list(valid),
                      gpu_mismatch=True)


class Platform:
    """Base class; subclasses set ``name`` and implement ``assess``."""

    name: ClassVar[str] = ""
    # UNIRENDER_PLAYER_BACKEND of the reference player on this platform (None: no builtin player here).
    player_backend: ClassVar[str | None] = None
    systems: ClassVar[tuple[str, ...]] = ("Linux",)
    packages: ClassVar[list[str]] = []
    # A build for this platform ignores -screen-width/-height/-quality (it starts at its own size): the
    # Controller then fixes size and quality by actions after the first event (protocol.md 6.4, 9.14).
    ignores_screen_flags: ClassVar[bool] = False

    def assess(self, request: PlatformRequest) -> Assessment:
        raise NotImplementedError

    def validate(self, request: PlatformRequest) -> list[str]:
        """protocol.md 7.1: the list of errors; empty means usable."""
        a = self.assess(request)
        return [] if a.usable else (a.reasons or [f"{self.name} is not usable"])

    def dependency_instructions(self, request: PlatformRequest) -> str:
        return apt_line(self.packages) if self.packages else ""

    def launch_env(self, request: PlatformRequest) -> dict[str, str]:
        a = self.assess(request)
        if not a.usable:
            raise PlatformError(f"{self.name} is not usable: " + "; ".join(a.reasons))
        return dict(a.env)

    def executable_path(self, base_dir: str | os.PathLike, name: str) -> Path:
        """protocol.md 6.1: ``<base_dir>/<name>`` for Linux builds."""
        return Path(base_dir) / name

    def _not_applicable(self, request: PlatformRequest, why: str | None = None) -> Assessment:
        why = why or f"{self.name} runs only on {'/'.join(self.systems)} (this is {request.system})"
        return Assessment(self, usable=False, reasons=[why], applicable=False)

    def __repr__(self) -> str:
        return f"<platform {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Platform) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Linux64(Platform):
    """X11 + OpenGL (GLX) player: needs a local X screen with GLX, depth 24, at least the requested size."""

    name = "Linux64"
    player_backend = "glx"
    packages = PACKAGES["xvfb"]

    def assess(self, request: PlatformRequest) -> Assessment:
        if request.system not in self.systems:
            return self._not_applicable(request)
        if request.headless:
            # Unity's -batchmode -nographics renders nothing, so it needs no display (protocol.md 6.2).
            return Assessment(self, usable=True, notes=["headless: no X display needed"])
        if request.gpu_device is not None:
            return self._assess_gpu(request)
        reasons: list[str] = []
        preferred = request.x_display  # checked alone when given
        env_display = os.environ.get("DISPLAY")
        if preferred is None and env_display:  # the caller's $DISPLAY first, then a scan
            try:
                parse_x_display(env_display)
                preferred = env_display
            except ValueError:
                reasons.append(f"$DISPLAY={env_display!r} is not a local display; scanning instead")
        search = find_screen(request.width, request.height, preferred) if preferred is not None else None
        if search is not None and not search.chosen:
            reasons.extend(search.reasons)
        if request.x_display is None and not (search and search.chosen):
            search = find_screen(request.width, request.height)
            reasons.extend(r for r in search.reasons if r not in reasons)
        devices = [_screen_device(s.display, s.width, s.height) for p in search.displays for s in p.screens]
        if not search.chosen:
            return Assessment(self, usable=False, reasons=reasons, devices=devices)
        display = search.chosen.display
        device = next((d for d in devices if d.index == display), None)
        _add_glx_renderer(device, search.chosen.display)
        return Assessment(
            self, usable=True, devices=devices, device=device, env={"DISPLAY": display}, notes=reasons
        )

    def _assess_gpu(self, request: PlatformRequest) -> Assessment:
        """gpu_device N on Linux64: the N-th X screen whose GLX renders on a GPU (``unirender xorg-config`` makes
        GPU i screen ``:d.i``), among every screen found (``x_display``'s only, when given). Whether an X
        server happens to run decides nothing else: Xvfb and other software screens are never a GPU."""
        from unirender.platforms.x11 import list_display_numbers, probe_display

        if request.x_display is not None:
            numbers = [parse_x_display(request.x_display)[0]]
        else:
            numbers = list_display_numbers()
        screens = [s for n in numbers for s in probe_display(n, request.width, request.height).screens]
        devices = [_screen_device(s.display, s.width, s.height) for s in screens]
        hardware = []
        for screen, device in zip(screens, devices, strict=True):
            if screen.glx:
                _add_glx_renderer(device, screen.display)
                if device.kind == "gpu" and not device.software:
                    hardware.append((screen, device))
        valid = list(range(len(hardware)))
        if not isinstance(request.gpu_device, int) or request.gpu_device not in valid:
            return gpu_mismatch(self, request, valid, f"{len(hardware)} X screen(s) rendering on a GPU", devices)
        screen, device = hardware[request.gpu_device]
        if not screen.valid:
            return Assessment(self, usable=False, reasons=list(screen.errors), devices=devices, gpu_indices=valid)
        return Assessment(self, usable=True, devices=devices, device=device, env={"DISPLAY": screen.display},
                          gpu_indices=valid)

    def dependency_instructions(self, request: PlatformRequest) -> str:
        return (
            f"Linux64 needs an X server with GLX, depth 24, screen >= {request.width}x{request.height}; "
            f"for a virtual one (software GL): {apt_line(self.packages)}; "
            "for NVIDIA GPUs: a real Xorg (`unirender xorg-config`)"
        )


def _screen_device(display: str, width: int, height: int) -> Device:
    return Device(
        api="glx",
        index=display,
        name=f"X screen {display} ({width}x{height})",
        kind="unknown",
        software=False,
    )


def _add_glx_renderer(device: Device | None, display: str) -> None:
    """Fill in GL_RENDERER so that an X server rendering on llvmpipe (any Xvfb) is reported as software."""
    if device is None:
        return
    number, _ = parse_x_display(display)
    if started_here(number) is not None:  # our own Xvfb: GLX is Mesa llvmpipe, no need to ask
        device.name = f"Mesa llvmpipe on Xvfb {display}"
        device.kind, device.software = "cpu", True
        return
    try:
        stat = os.stat(f"{X11_SOCKET_DIR}/X{number}")
        identity = (stat.st_ino, stat.st_mtime_ns)
    except OSError:
        identity = ()
    info = probes.glx(display, identity)
    if info.get("renderer"):
        device.name = f"{info['renderer']} on {display}"
        device.vendor = info.get("vendor") or ""
        device.driver = info.get("version") or ""
        device.software = bool(info.get("software"))
        device.kind = "cpu" if device.software else "gpu"
    else:
        device.extra["glx_error"] = info.get("error")


class CloudRendering(Platform):
    """Unity's Vulkan offscreen target: needs the Vulkan loader and at least one physical device."""

    name = "CloudRendering"
    player_backend = "vulkan"
    packages = PACKAGES["vulkan"]
    ignores_screen_flags = True

    def assess(self, request: PlatformRequest) -> Assessment:
        if request.system not in self.systems:
            return self._not_applicable(request)
        probe = probes.vulkan()
        devices = [Device.from_dict(d) for d in probe.get("devices", [])]
        if not probe.get("loader"):
            return Assessment(
                self, usable=False, reasons=["Vulkan API driver missing: libvulkan.so.1 not found"]
            )
        if not devices:
            return Assessment(self, usable=False, reasons=[probe.get("error") or "no Vulkan device"])
        a = Assessment(self, usable=True, devices=devices)
        wanted = request.gpu_device
        cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        implicit = wanted is None and bool(
            cuda_visible and cuda_visible.strip() and cuda_visible.strip() != "-1"
        )
        if wanted is not None or implicit:
            target = wanted if wanted is not None else 0
            by_uuid = isinstance(target, str) and not target.strip().isdigit()
            smi = None if by_uuid else gpus.nvidia_gpu_uuids()  # None when nvidia-smi is absent: fine
            index, why = gpus.map_gpu_device(target, probe["devices"], cuda_visible, smi)
            if wanted is not None:
                a.gpu_indices = _mappable_ordinals(probe["devices"], cuda_visible, smi)
            if index is not None:
                a.args = ["-force-device-index", str(index)]
                a.device = devices[index]
            elif wanted is not None:  # explicitly asked for: failing is better than a silent CPU fall-back
                mismatch = gpu_mismatch(self, request, a.gpu_indices, f"{len(a.gpu_indices)} usable GPU(s)", devices)
                mismatch.reasons[0] += f"; {why or 'cannot map gpu_device'}"
                return mismatch
            else:
                a.notes.append(f"CUDA_VISIBLE_DEVICES not mapped to a Vulkan device: {why}")
        if a.device is None:
            a.device = preferred_device(devices)
        return a

    def dependency_instructions(self, request: PlatformRequest) -> str:
        return (
            f"{self.name} requires the Vulkan loader and a Vulkan driver: {apt_line(self.packages)} "
            "(mesa-vulkan-drivers is the software lavapipe; GPUs need their vendor's Vulkan driver, e.g. the "
            "NVIDIA driver with NVIDIA_DRIVER_CAPABILITIES=graphics in containers)."
        )


class LinuxHeadlessSimulation(CloudRendering):
    """Unity 2022+'s name for the same target (``CloudRendering`` is deprecated there): a Linux player rendering
    through Vulkan with no window. Assessed, launched and talked to exactly like CloudRendering; only the name
    (and so the build folder, ``thor-LinuxHeadlessSimulation-<commit>``) differs."""

    name = "LinuxHeadlessSimulation"


def _mappable_ordinals(vulkan_devices: list[dict], cuda_visible: str | None, smi: list[str] | None) -> list[int]:
    """The CUDA ordinals that map to a Vulkan device here (what ``gpu_device`` may be on CloudRendering)."""
    hardware = [d for d in vulkan_devices if not d.get("software")]
    visible = [v for v in (cuda_visible or "").split(",") if v.strip()]
    count = max(len(hardware), len(visible), len(smi or []))
    return [i for i in range(count) if gpus.map_gpu_device(i, vulkan_devices, cuda_visible, smi)[0] is not None]


KIND_PREFERENCE = {"discrete": 0, "gpu": 0, "integrated": 1, "virtual": 2, "other": 3, "unknown": 4, "cpu": 5}


def preferred_device(devices: list[Device]) -> Device | None:
    """What a driver picks without instructions: hardware first (discrete, integrated, ...), then software."""
    if not devices:
        return None
    return min(devices, key=lambda d: (d.software, KIND_PREFERENCE.get(d.kind, 9), str(d.index)))


class EGL(Platform):
    """Headless OpenGL through an EGL device (no X): only the builtin reference player can use it."""

    name = "EGL"
    player_backend = "egl"
    packages = PACKAGES["egl"]

    def assess(self, request: PlatformRequest) -> Assessment:
        if request.system not in self.systems:
            return self._not_applicable(request)
        if not request.builtin:
            return self._not_applicable(
                request,
                "EGL is a back-end of the builtin reference player only (Unity builds use Linux64 or CloudRendering)",
            )
        probe = probes.egl()
        devices = [Device.from_dict(d) for d in probe.get("devices", [])]
        usable = [d for d in devices if d.extra.get("usable") and not d.extra.get("gl_error")]
        if not usable:
            reasons = [probe.get("error") or "no EGL device can create an OpenGL context"]
            reasons += [
                f"EGL device {d.index}: {d.extra['gl_error']}" for d in devices if d.extra.get("gl_error")
            ]
            return Assessment(self, usable=False, reasons=reasons, devices=devices)
        if request.gpu_device is not None:
            hardware = [d for d in usable if not d.software]
            if not isinstance(request.gpu_device, int) or request.gpu_device >= len(hardware):
                return gpu_mismatch(self, request, list(range(len(hardware))),
                                    f"{len(hardware)} hardware EGL device(s)", devices)
            device = hardware[request.gpu_device]
        else:
            device = preferred_device(usable)
        # glcontext's EGL back-end reads the device index from this variable (docs/platforms.md, "GPUs").
        return Assessment(
            self,
            usable=True,
            devices=devices,
            device=device,
            env={"GLCONTEXT_DEVICE_INDEX": str(device.index)},
        )

    def dependency_instructions(self, request: PlatformRequest) -> str:
        return f"EGL (builtin player) requires libEGL and a GL driver: {apt_line(self.packages)}"


class OSXIntel64(Platform):
    """A macOS ``.app`` bundle (Intel; runs under Rosetta on Apple Silicon)."""

    name = "OSXIntel64"
    systems = ("Darwin",)

    def assess(self, request: PlatformRequest) -> Assessment:
        if request.system not in self.systems:
            return self._not_applicable(request)
        return Assessment(self, usable=True)

    def executable_path(self, base_dir: str | os.PathLike, name: str) -> Path:
        """``<base_dir>/<name>.app/Contents/MacOS/<CFBundleExecutable from Info.plist>`` (protocol.md 6.1)."""
        contents = Path(base_dir) / f"{name}.app" / "Contents"
        plist_path = contents / "Info.plist"
        try:
            with open(plist_path, "rb") as f:
                info = plistlib.load(f)
        except (OSError, plistlib.InvalidFileException, ValueError) as exc:
            raise PlatformError(f"cannot read {plist_path}: {exc}") from exc
        executable = info.get("CFBundleExecutable")
        if not isinstance(executable, str) or not executable or "/" in executable:
            raise PlatformError(f"{plist_path} has no valid CFBundleExecutable (got {executable!r})")
        return contents / "MacOS" / executable


class WebGL(Platform):
    """A Unity WebGL build (a folder with ``Build/<name>.loader.js``), run in headless Chromium: no X server,
    no Vulkan driver and no GPU needed (SwiftShader renders WebGL2 on the CPU), or the GPU through ANGLE on
    Vulkan when a ``gpu_device`` is asked for (docs/webgl.md)."""

    name = "WebGL"
    systems = ("Linux",)
    packages = list(chromium.PACKAGES)

    def assess(self, request: PlatformRequest) -> Assessment:
        if request.system not in self.systems:
            return self._not_applicable(request)
        binary = chromium.find_chromium()
        if binary is None:
            return Assessment(self, usable=False, reasons=[
                f"no Chromium found (looked for ${chromium.ENV_VAR}, then {', '.join(chromium.CANDIDATES)} on "
                f"PATH); install it: {apt_line(self.packages)}"
            ])
        renderer = chromium.GPU if request.gpu_device is not None else chromium.SWIFTSHADER
        device = Device(
            api="webgl", index=str(request.gpu_device) if request.gpu_device is not None else "swiftshader",
            name="ANGLE on Vulkan (GPU)" if not renderer.software else "SwiftShader (ANGLE, Vulkan on the CPU)",
            kind="cpu" if renderer.software else "unknown", software=renderer.software, driver="chromium",
        )
        return Assessment(self, usable=True, devices=[device], device=device, args=list(renderer.flags),
                          env={chromium.ENV_VAR: binary}, notes=[f"browser: {binary}"])

    def dependency_instructions(self, request: PlatformRequest) -> str:
        return f"WebGL builds run in headless Chromium: {apt_line(self.packages)}"

    def executable_path(self, base_dir: str | os.PathLike, name: str) -> Path:
        raise PlatformError(
            "WebGL builds have no executable; pass the build folder (the one holding Build/) to the webgl family"
        )


PLATFORMS: dict[str, type[Platform]] = {
    cls.name: cls for cls in (Linux64, CloudRendering, LinuxHeadlessSimulation, OSXIntel64, WebGL, EGL)
}


def platform_by_name(name: str) -> Platform:
    for known, cls in PLATFORMS.items():
        if known.lower() == str(name).strip().lower():
            return cls()
    raise PlatformError(f"unknown platform {name!r}; known: {', '.join(PLATFORMS)} (or 'auto')")
