"""Headless Chromium as a platform for Unity WebGL builds: where it is, the flags it always gets, and how it
renders (SwiftShader on the CPU, or the GPU through ANGLE).

The flags keep a closed machine quiet: without them Chromium phones home (component updates, safe browsing,
sync, QUIC probes) and retries forever. ``--no-sandbox`` only as root (the sandbox refuses to start as root).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PACKAGES = ["chromium"]  # Debian's package (its headless mode needs no X server)
ENV_VAR = "UNIRENDER_CHROMIUM"  # an explicit browser binary

QUIET_FLAGS = (
    "--headless=new",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions",
    "--metrics-recording-only",
    "--mute-audio",
    "--disable-dev-shm-usage",  # containers give /dev/shm 64 MiB; a Unity tab needs more
    # A hidden or occluded page must not be throttled: unirender decides when frames run.
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)
SWIFTSHADER_FLAGS = ("--use-angle=swiftshader", "--enable-unsafe-swiftshader")
GPU_FLAGS = ("--use-angle=vulkan", "--enable-features=Vulkan", "--ignore-gpu-blocklist")


def find_chromium() -> str | None:
    """The browser binary: ``$UNIRENDER_CHROMIUM``, else the first of CANDIDATES on PATH."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Renderer:
    """How the browser rasterises WebGL: ``swiftshader`` (CPU, always there) or ``gpu`` (ANGLE on Vulkan)."""

    name: str
    flags: tuple[str, ...]
    software: bool


SWIFTSHADER = Renderer("swiftshader", SWIFTSHADER_FLAGS, software=True)
GPU = Renderer("gpu", GPU_FLAGS, software=False)


def browser_flags(renderer: Renderer, user_data_dir: str, width: int, height: int) -> list[str]:
    """Every flag but the binary and the URL."""
    # The window is larger than the canvas: headless windows keep ~150 px of (invisible) browser frame, and a
    # viewport squeezed to nothing never produces a compositor frame (screenshots then wait forever). The page's
    # viewport is set to the canvas size over DevTools.
    flags = [*QUIET_FLAGS, *renderer.flags, f"--user-data-dir={user_data_dir}", f"--window-size={max(width, 800)},{height + 400}"]
    if os.geteuid() == 0:
        flags.append("--no-sandbox")
    return flags


# A page that writes WebGL2's unmasked renderer string into its DOM (read back with --dump-dom: no DevTools).
_PROBE_PAGE = (
    "data:text/html,<body><script>"
    "const gl=document.createElement('canvas').getContext('webgl2');"
    "const i=gl&&gl.getExtension('WEBGL_debug_renderer_info');"
    "document.body.textContent='UNIRENDER:'+(gl?(i?gl.getParameter(i.UNMASKED_RENDERER_WEBGL):gl.getParameter(gl.RENDERER)):'no webgl2');"
    "</script></body>"
)
PROBE_TIMEOUT = 60.0


def probe_renderer(binary: str, renderer: Renderer, timeout: float = PROBE_TIMEOUT) -> tuple[str | None, str]:
    """``(WebGL2 renderer string or None, error)``: one headless Chromium run on a data: page, its profile
    removed afterwards. "no webgl2" means the browser runs but cannot render."""
    import tempfile

    from unirender._process import ManagedProcess

    with tempfile.TemporaryDirectory(prefix="unirender-chromium-probe-") as profile:
        out = os.path.join(profile, "dump.txt")
        argv = [binary, *browser_flags(renderer, profile, 64, 64), "--dump-dom", _PROBE_PAGE]
        process = ManagedProcess(argv, log_path=out, new_session=True, name="chromium-probe")
        try:
            if process.wait(timeout) is None:
                return None, f"Chromium did not render a test page within {timeout:g} s"
        finally:
            try:
                os.killpg(process.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            process.terminate(0)
        with open(out, errors="replace") as f:
            text = f.read()
        for line in text.splitlines():
            if "UNIRENDER:" in line:
                found = line.split("UNIRENDER:", 1)[1].split("<", 1)[0].strip()
                return (None, "Chromium runs but has no WebGL2") if found == "no webgl2" else (found, "")
        return None, f"Chromium {process.describe()} without rendering the test page: {text[-500:]}"
