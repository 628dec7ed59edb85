"""Headless platform resolution: probe X11/GLX, Vulkan and EGL, choose a platform, start Xvfb if needed.

Entry point: ``resolve(PlatformRequest(...), platform="auto") -> Resolution``. See docs/platforms.md.
"""

from unirender.errors import PlatformError
from unirender.platforms.classes import (
    EGL,
    PLATFORMS,
    Assessment,
    CloudRendering,
    Linux64,
    LinuxHeadlessSimulation,
    OSXIntel64,
    Platform,
    WebGL,
    platform_by_name,
)
from unirender.platforms.devices import Device
from unirender.platforms.probes import refresh as refresh_probes
from unirender.platforms.request import PlatformRequest, parse_x_display
from unirender.platforms.resolve import Candidate, GpuDeviceError, Resolution, resolve
from unirender.platforms.xvfb import VirtualDisplay, acquire_virtual_display, start_xvfb

__all__ = [
    "EGL",
    "PLATFORMS",
    "Assessment",
    "Candidate",
    "CloudRendering",
    "Device",
    "GpuDeviceError",
    "Linux64",
    "LinuxHeadlessSimulation",
    "OSXIntel64",
    "Platform",
    "PlatformError",
    "PlatformRequest",
    "Resolution",
    "VirtualDisplay",
    "WebGL",
    "acquire_virtual_display",
    "parse_x_display",
    "platform_by_name",
    "refresh_probes",
    "resolve",
    "start_xvfb",
]
