"""Driver probes run in a subprocess, cached per process (keyed by the environment that steers drivers).

Why a subprocess: loading a broken Vulkan ICD or EGL vendor library can crash the loading process, and a
probe must never take unirender down with it. Why a cache: probes cost 0.1-2 s; ``refresh()`` clears it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading

from unirender._process import ManagedProcess, tail_file

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 30.0  # lavapipe's first instance on a loaded 2-core machine can take seconds
# Variables that change what the loaders find; part of the cache key so a changed environment re-probes.
DRIVER_ENV_VARS = (
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
    "VK_ADD_DRIVER_FILES",
    "VK_LOADER_DRIVERS_SELECT",
    "VK_LOADER_DRIVERS_DISABLE",
    "__EGL_VENDOR_LIBRARY_FILENAMES",
    "__EGL_VENDOR_LIBRARY_DIRS",
    "EGL_PLATFORM",
    "LIBGL_ALWAYS_SOFTWARE",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
)

_cache: dict[tuple, dict] = {}
_lock = threading.Lock()


def _env_key() -> tuple:
    return tuple(os.environ.get(k) for k in DRIVER_ENV_VARS)


def refresh() -> None:
    """Forget every cached probe result (e.g. after installing a driver)."""
    with _lock:
        _cache.clear()


def run_probes(names: list[str], timeout: float = PROBE_TIMEOUT) -> dict[str, dict]:
    """Run probes in one worker process; a crash or timeout becomes an ``error`` entry per probe."""
    with tempfile.TemporaryDirectory(prefix="unirender-probe-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        log_path = os.path.join(tmp, "worker.log")
        argv = [sys.executable, "-m", "unirender.platforms._probe_worker", out_path, *names]
        proc = ManagedProcess(argv, log_path=log_path, name="platform-probe")
        try:
            rc = proc.wait(timeout)
        finally:
            proc.terminate(grace=1.0)
        if rc is None:
            why = f"probe process timed out after {timeout:g} s"
        elif os.path.exists(out_path):
            with open(out_path) as f:
                return json.load(f)
        else:
            why = f"probe process {proc.describe()}; log: {tail_file(log_path, 5)!r}"
        log.warning("driver probe %s failed: %s", names, why)
        return {name: {"devices": [], "error": why} for name in names}


def _cached(name: str, extra_key: tuple = ()) -> dict:
    key = (name, _env_key(), *extra_key)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    result = run_probes([name])[name]
    with _lock:
        _cache[key] = result
    return result


def vulkan() -> dict:
    """``{"loader", "devices": [Device dict], "error"}`` of the Vulkan loader, cached."""
    return _cached("vulkan")


def egl() -> dict:
    """``{"library", "devices": [Device dict], "error"}`` of EGL device enumeration, cached."""
    return _cached("egl")


def glx(display: str, socket_identity: tuple = ()) -> dict:
    """GL_RENDERER of an X screen; ``socket_identity`` (e.g. the socket inode) tells restarted servers apart."""
    return _cached(f"glx={display}", socket_identity)
