"""A separate virtualenv with the real third-party ML-Agents client, mlagents-envs 0.28.0, and a launcher that
makes ``unirender-player`` look like a Unity build to it. Used by the tests and ``benchmarks/mlagents.py``.

mlagents-envs 0.28.0 runs on Python 3.11 only with these pins (newer protobuf or numpy break its import or its
first observation), so it can never share unirender's environment. The venv is built once (network to PyPI
needed, about a minute), under ``~/.cache/unirender/mlagents-0.28-venv`` or ``$UNIRENDER_MLAGENTS_ENVS_VENV``,
and rebuilt when the pins change.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

PINS = ["mlagents-envs==0.28.0", "protobuf==3.20.3", "numpy==1.23.5", "grpcio==1.85.3", "pillow==13.0.0",
        "cloudpickle==3.1.3", "PyYAML==6.0.4"]  # fmt: skip
DRIVER = Path(__file__).with_name("mlagents_envs_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "unirender" / "mlagents-0.28-venv"
    return Path(os.environ.get("UNIRENDER_MLAGENTS_ENVS_VENV") or default)


def ensure_venv() -> Path:
    """The venv's python, built if missing or built with other pins. Safe against concurrent builders (a lock);
    a half-built venv is never left under the final name."""
    target = venv_dir()
    python = target / "bin" / "python"
    stamp = target / "unirender-pins.txt"
    wanted = "\n".join(PINS) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / (target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        building = target.parent / (target.name + f".build-{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        try:
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(building)], check=True, capture_output=True, timeout=300)
            subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q", *PINS],
                           check=True, capture_output=True, timeout=900)  # fmt: skip
            (building / "unirender-pins.txt").write_text(wanted)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(building, target)  # only `bin/python -m ...` is used, which works after the move
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return python


def write_player_launcher(directory: Path, name: str = "ReachTarget.x86_64", env: dict | None = None) -> Path:
    """An executable that starts the reference player with this checkout's code, like a Unity build would be
    started (mlagents-envs finds ``<name>.x86_64`` and appends ``--mlagents-port N`` and its other flags)."""
    exports = "".join(f"export {k}='{v}'\n" for k, v in {"PYTHONPATH": str(SRC), **(env or {})}.items())
    path = Path(directory) / name
    path.write_text(f"#!/bin/sh\n{exports}exec '{sys.executable}' -m unirender.player \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
