"""The player's launch contract, identical to a Unity build's (protocol.md 6.2, 6.3): command-line flags and the
``AI2THOR_*`` environment, plus ``UNIRENDER_PLAYER_BACKEND`` (egl | glx | vulkan) chosen by the Controller.

Started by anything else (AI2-THOR's own Controller, a script), the player renders the way the build it stands in
for would (:func:`launch_backend`): Vulkan when launched as a CloudRendering or LinuxHeadlessSimulation build,
GLX on the given ``DISPLAY`` when launched as a Linux64 build, EGL when neither applies.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from unirender.player.actions import QUALITY_NAMES
from unirender.player.session import CLOUD_RENDERING_DEFAULT_SIZE, DEFAULT_SIZE

log = logging.getLogger("unirender.player")

BACKENDS = ("egl", "glx", "vulkan")
# Build flavours by the name in their folder and executable (thor-<Platform>-<commit>, docs/platforms.md).
VULKAN_BUILDS = ("CloudRendering", "LinuxHeadlessSimulation")
GLX_BUILDS = ("Linux64",)
_VALUE_FLAGS = {"-screen-width", "-screen-height", "-screen-quality", "-screen-fullscreen", "-force-device-index",
                "-logFile", "-logfile"}  # fmt: skip
_SWITCHES = {"-batchmode", "-nographics"}


class LaunchError(ValueError):
    """Bad command line or environment: the player prints it and exits with status 2."""


@dataclass
class LaunchConfig:
    backend: str | None  # None: -nographics, nothing is ever rendered
    width: int
    height: int
    quality: str
    fullscreen: bool
    device_index: int | None
    server_type: str  # "FIFO" | "WSGI"
    host: str
    port: int
    server_pipe: str | None
    client_pipe: str | None
    token: str
    screenshots: bool  # AI2THOR_SERVER_SIDE_SCREENSHOT: False = metadata only
    scene: str | None = None


def _int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"{flag} needs an integer, got {text!r}") from None


def _parse_bool(name: str, text: str) -> bool:
    # C#'s bool.Parse: "True"/"False" in any case, surrounding spaces allowed
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise LaunchError(f"{name} must be True or False, got {text!r}")
    return lowered == "true"


def launch_backend(executable: str, flags: dict[str, str], env: dict[str, str]) -> tuple[str, str]:
    """``(backend, why)`` for a launch: ``UNIRENDER_PLAYER_BACKEND`` when set; else the build flavour named by the
    executable or its folder; else ``-force-device-index`` (only CloudRendering launches pass it) means Vulkan and
    a ``DISPLAY`` (every Linux64 launch sets it) means GLX on it; else EGL."""
    explicit = env.get("UNIRENDER_PLAYER_BACKEND", "").strip().lower()
    if explicit:
        if explicit not in BACKENDS:
            raise LaunchError(f"UNIRENDER_PLAYER_BACKEND must be one of {', '.join(BACKENDS)}, got {explicit!r}")
        return explicit, "UNIRENDER_PLAYER_BACKEND"
    path = os.path.abspath(executable) if executable else ""
    names = f"{os.path.basename(path)} {os.path.basename(os.path.dirname(path))}"
    display = env.get("DISPLAY", "").strip()
    for flavour in VULKAN_BUILDS:
        if flavour in names:
            return "vulkan", f"launched as a {flavour} build ({path})"
    for flavour in GLX_BUILDS:
        if flavour in names:
            if not display:
                raise LaunchError(f"launched as a {flavour} build ({path}) but DISPLAY is not set: a Linux64 "
                                  "build renders through GLX on an X screen")
            return "glx", f"launched as a {flavour} build on DISPLAY={display}"
    if "-force-device-index" in flags:
        return "vulkan", "-force-device-index given (a CloudRendering launch)"
    if display:
        return "glx", f"DISPLAY={display} given (a Linux64 launch)"
    return "egl", "no DISPLAY and no Vulkan build flavour: EGL (no X needed)"


def parse_launch(argv: list[str], env: dict[str, str], executable: str = "") -> LaunchConfig:
    """``executable``: how the player was invoked (``sys.argv[0]``), which names the build flavour it stands in
    for when it is installed as a build (``thor-CloudRendering-<commit>/thor-CloudRendering-<commit>``)."""
    flags: dict[str, str] = {}
    switches: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _VALUE_FLAGS:
            if i + 1 >= len(argv):
                raise LaunchError(f"{arg} needs a value")
            flags[arg] = argv[i + 1]
            i += 2
            continue
        if arg in _SWITCHES:
            switches.add(arg)
        else:
            log.warning("ignoring unknown argument %r (a Unity player ignores it too)", arg)
        i += 1

    backend, why = launch_backend(executable, flags, env)
    log.info("back-end %s: %s", backend, why)
    width, height = DEFAULT_SIZE
    quality_index = len(QUALITY_NAMES) - 1  # "Ultra", Unity's default
    if "-screen-width" in flags:
        width = _int("-screen-width", flags["-screen-width"])
    if "-screen-height" in flags:
        height = _int("-screen-height", flags["-screen-height"])
    if "-screen-quality" in flags:
        quality_index = _int("-screen-quality", flags["-screen-quality"])
        if not 1 <= quality_index <= len(QUALITY_NAMES):
            raise LaunchError(f"-screen-quality must be 1..{len(QUALITY_NAMES)}, got {quality_index}")
    if width < 1 or height < 1:
        raise LaunchError(f"screen size must be positive, got {width}x{height}")
    quality = QUALITY_NAMES[quality_index - 1]
    if backend == "vulkan":  # like CloudRendering: screen flags are ignored (protocol.md 9.14)
        width, height = CLOUD_RENDERING_DEFAULT_SIZE
        quality = "Ultra"
    device_index = None
    if "-force-device-index" in flags:
        device_index = _int("-force-device-index", flags["-force-device-index"])
    nographics = "-nographics" in switches

    server_type = env.get("AI2THOR_SERVER_TYPE", "WSGI").strip().upper() or "WSGI"
    if server_type not in ("FIFO", "WSGI"):
        raise LaunchError(f"AI2THOR_SERVER_TYPE must be FIFO or WSGI, got {server_type!r}")
    server_pipe = env.get("AI2THOR_FIFO_SERVER_PIPE_PATH")
    client_pipe = env.get("AI2THOR_FIFO_CLIENT_PIPE_PATH")
    if server_type == "FIFO" and not (server_pipe and client_pipe):
        raise LaunchError(
            "AI2THOR_SERVER_TYPE=FIFO needs AI2THOR_FIFO_SERVER_PIPE_PATH and AI2THOR_FIFO_CLIENT_PIPE_PATH"
        )
    port_text = env.get("AI2THOR_PORT", "8200")
    port = _int("AI2THOR_PORT", port_text)
    if not 0 < port < 65536:
        raise LaunchError(f"AI2THOR_PORT must be 1..65535, got {port}")
    screenshots = _parse_bool(
        "AI2THOR_SERVER_SIDE_SCREENSHOT", env.get("AI2THOR_SERVER_SIDE_SCREENSHOT", "True")
    )
    return LaunchConfig(
        backend=None if nographics else backend,
        width=width,
        height=height,
        quality=quality,
        fullscreen=flags.get("-screen-fullscreen", "0").strip() == "1",
        device_index=device_index,
        server_type=server_type,
        host=env.get("AI2THOR_HOST", "127.0.0.1"),
        port=port,
        server_pipe=server_pipe,
        client_pipe=client_pipe,
        token=env.get("AI2THOR_CLIENT_TOKEN", ""),
        screenshots=screenshots,
        scene=env.get("UNIRENDER_PLAYER_SCENE") or None,
    )
