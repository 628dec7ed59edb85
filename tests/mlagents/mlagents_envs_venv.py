"""Separate virtualenvs with the real third-party ML-Agents client, mlagents-envs 0.28.0 (Release 19) and 1.1.0
(Release 22, the current one), and a launcher that makes ``unirender-player`` look like a Unity build to them.
Used by the tests and ``benchmarks/mlagents.py``.

Neither runs on Python 3.11 with what pip resolves today, so neither can share unirender's environment:

- 0.28.0 needs protobuf 3.20.x and numpy < 1.24 (newer ones break its import or its first observation);
- 1.1.0 declares Python <= 3.10.12 and grpcio <= 1.48.2 (no wheel for 3.11), so it is installed without its
  metadata's requirements (``--no-deps --ignore-requires-python``) next to a working set: the same protobuf, numpy
  and grpcio as 0.28.0. Its ``UnityEnvironment`` imports only grpc, protobuf, numpy and Pillow; the gym and
  PettingZoo wrappers its metadata also pulls in are not installed (nothing here uses them).

Each venv is built once (network to PyPI needed, about a minute), under ``~/.cache/unirender/mlagents-<v>-venv``
(``$UNIRENDER_MLAGENTS_ENVS_VENV`` for 0.28, ``$UNIRENDER_MLAGENTS_ENVS_1_1_VENV`` for 1.1), and rebuilt when its
pins change. Every version is pinned, for both, so a cached venv is what a fresh build would give.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DRIVER = Path(__file__).with_name("mlagents_envs_driver.py")
SRC = Path(__file__).resolve().parents[2] / "src"
_COMMON = ["protobuf==3.20.3", "numpy==1.23.5", "grpcio==1.85.3", "pillow==13.0.0", "cloudpickle==3.1.3",
           "PyYAML==6.0.4"]  # fmt: skip


@dataclass(frozen=True)
class ClientVenv:
    version: str  # "0.28" | "1.1"
    pins: tuple[str, ...]
    no_deps: bool  # install exactly the pins, without pip resolving the package's declared requirements
    env_var: str
    layout: str  # the camera layout this client decodes

    @property
    def label(self) -> str:
        return f"mlagents-envs {self.pins[0].split('==')[1]}"


VENVS = {
    "0.28": ClientVenv("0.28", ("mlagents-envs==0.28.0", *_COMMON), False, "UNIRENDER_MLAGENTS_ENVS_VENV", "HWC"),
    # --no-deps: every package it needs is listed (grpcio's one dependency, typing_extensions, too)
    "1.1": ClientVenv("1.1", ("mlagents-envs==1.1.0", *_COMMON, "filelock==4.3.2", "typing_extensions==4.16.0"),
                      True, "UNIRENDER_MLAGENTS_ENVS_1_1_VENV", "CHW"),  # fmt: skip
}


def venv_dir(version: str = "0.28") -> Path:
    spec = VENVS[version]
    default = Path.home() / ".cache" / "unirender" / f"mlagents-{version}-venv"
    return Path(os.environ.get(spec.env_var) or default)


def ensure_venv(version: str = "0.28") -> Path:
    """The venv's python, built if missing or built with other pins. Safe against concurrent builders (a lock);
    a half-built venv is never left under the final name. A failed build raises ``CalledProcessError`` (pip's
    output in ``stderr``) or ``TimeoutExpired``."""
    spec = VENVS[version]
    target = venv_dir(version)
    python = target / "bin" / "python"
    stamp = target / "unirender-pins.txt"
    flags = ["--no-deps", "--ignore-requires-python"] if spec.no_deps else []
    wanted = "\n".join([*flags, *spec.pins]) + "\n"
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
            subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q", *flags, *spec.pins],
                           check=True, capture_output=True, timeout=900)  # fmt: skip
            (building / "unirender-pins.txt").write_text(wanted)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(building, target)  # only `bin/python -m ...` is used, which works after the move
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return python


def client_python(version: str) -> Path:
    """For the tests: the client's venv python; a venv that cannot be built fails the test (never skipped)."""
    import pytest

    try:
        return ensure_venv(version)
    except subprocess.CalledProcessError as exc:  # e.g. no network to PyPI: say so instead of a vague failure
        output = (exc.stderr or b"").decode(errors="replace")[-2000:]
        pytest.fail(f"could not build the {VENVS[version].label} venv ({' '.join(map(str, exc.cmd[:4]))} ...): "
                    f"{output}")  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"building the {VENVS[version].label} venv took longer than {exc.timeout} s")


def write_player_launcher(directory: Path, name: str = "ReachTarget.x86_64", env: dict | None = None) -> Path:
    """An executable that starts the reference player with this checkout's code, like a Unity build would be
    started (mlagents-envs finds ``<name>.x86_64`` and appends ``--mlagents-port N`` and its other flags)."""
    exports = "".join(f"export {k}='{v}'\n" for k, v in {"PYTHONPATH": str(SRC), **(env or {})}.items())
    path = Path(directory) / name
    path.write_text(f"#!/bin/sh\n{exports}exec '{sys.executable}' -m unirender.player \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
