"""What an ML-Agents player reads from its launch: ``--mlagents-port N`` (the only flag the ML-Agents runtime
reads), Unity's own ``-logFile``, ``-screen-width/-height``, ``-nographics``, ``-force-device-index``, and the
reference game's knobs from the environment (a Unity build would have them baked in)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from unirender.player.launch import BACKENDS, LaunchError

PORT_FLAG = "--mlagents-port"
# The com.unity.ml-agents version announced when UNIRENDER_MLAGENTS_PACKAGE_VERSION forces none: a current game
# (4.x, Unity 6: CHW camera images). The player then writes the layout the connecting trainer's generation decodes
# (client.py); HWC_PACKAGE_VERSION is the 2.x game it then stands in for.
DEFAULT_PACKAGE_VERSION = "4.0.0"
HWC_PACKAGE_VERSION = "2.2.1-exp.1"  # com.unity.ml-agents of Release 19
_VALUE_FLAGS = {PORT_FLAG, "-logFile", "-logfile", "-screen-width", "-screen-height", "-screen-quality",
                "-screen-fullscreen", "-force-device-index"}  # fmt: skip


@dataclass
class MLAgentsLaunch:
    port: int
    log_file: str | None
    width: int
    height: int
    backend: str | None  # None: -nographics (cameras deliver black images, as in Unity)
    device_index: int | None
    package_version: str | None  # forced (3.x and later CHW, earlier HWC), or None: follow the trainer
    agents: int
    max_step: int
    compression: str = "png"  # the camera sensor's compression: "png" or "none" (raw floats, like Unity's)


def is_mlagents_launch(argv: list[str]) -> bool:
    return PORT_FLAG in argv


def _int(name: str, text: str, minimum: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise LaunchError(f"{name} needs an integer, got {text!r}") from None
    if value < minimum:
        raise LaunchError(f"{name} must be >= {minimum}, got {value}")
    return value


def parse_mlagents_launch(argv: list[str], env: dict[str, str] | None = None) -> MLAgentsLaunch:
    env = dict(os.environ if env is None else env)
    flags, switches, i = {}, set(), 0
    while i < len(argv):
        if argv[i] in _VALUE_FLAGS:
            if i + 1 >= len(argv):
                raise LaunchError(f"{argv[i]} needs a value")
            flags[argv[i].lower() if argv[i].lower() == "-logfile" else argv[i]] = argv[i + 1]
            i += 2
        else:
            switches.add(argv[i])
            i += 1
    port = _int(PORT_FLAG, flags[PORT_FLAG])
    if port > 65535:
        raise LaunchError(f"{PORT_FLAG} must be 1..65535, got {port}")
    backend = env.get("UNIRENDER_PLAYER_BACKEND", "egl").strip().lower() or "egl"
    if backend not in BACKENDS:
        raise LaunchError(f"UNIRENDER_PLAYER_BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return MLAgentsLaunch(
        port=port,
        log_file=flags.get("-logfile"),
        width=_int("-screen-width", flags.get("-screen-width", "84")),
        height=_int("-screen-height", flags.get("-screen-height", "84")),
        backend=None if "-nographics" in switches else backend,
        device_index=_int("-force-device-index", flags["-force-device-index"], 0)
        if "-force-device-index" in flags else None,
        package_version=env.get("UNIRENDER_MLAGENTS_PACKAGE_VERSION", "").strip() or None,
        agents=_int("UNIRENDER_MLAGENTS_AGENTS", env.get("UNIRENDER_MLAGENTS_AGENTS", "2")),
        max_step=_int("UNIRENDER_MLAGENTS_MAX_STEP", env.get("UNIRENDER_MLAGENTS_MAX_STEP", "500")),
        compression=_compression(env.get("UNIRENDER_MLAGENTS_CAMERA_COMPRESSION", "png")),
    )


def _compression(text: str) -> str:
    value = text.strip().lower()
    if value not in ("png", "none"):
        raise LaunchError(f"UNIRENDER_MLAGENTS_CAMERA_COMPRESSION must be png or none, got {text!r}")
    return value
