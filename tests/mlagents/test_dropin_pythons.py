"""The core and the ML-Agents extra on every Python version ``pyproject.toml`` declares (its classifiers): each
interpreter the machine has imports them and plays one episode of the reference ML-Agents game through the
drop-in ``UnityEnvironment``. A declared version this machine lacks is reported as a skip that names it.

The running interpreter uses its own environment; any other gets a virtualenv with the core, ``mlagents`` and
``player`` requirements (the ranges read from pyproject.toml), built once under
``~/.cache/unirender/py<version>-venv`` (or ``$UNIRENDER_PYTHONS_VENV_ROOT``; network to the package index needed
the first time, about a minute each) and rebuilt when those requirements change. The checkout's ``src`` is put on
``PYTHONPATH``, so the code under test is this checkout's.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLASSIFIER = "Programming Language :: Python :: "
DECLARED = [c[len(CLASSIFIER):] for c in PYPROJECT["project"]["classifiers"]
            if c.startswith(CLASSIFIER) and c[len(CLASSIFIER):].count(".") == 1]  # fmt: skip
EXTRAS = ("mlagents", "player")

EPISODE = r"""
import json, sys
import numpy as np
import unirender, unirender.protocol, unirender.controller  # the core
from unirender.mlagents import ActionTuple, UnityEnvironment  # the ML-Agents extra, as a user imports it
from unirender.mlagents.side_channel.engine_configuration_channel import EngineConfigurationChannel

engine = EngineConfigurationChannel()
engine.set_configuration_parameters(time_scale=100.0)
env = UnityEnvironment(file_name="builtin", side_channels=[engine], timeout_wait=60)
try:
    env.reset()
    name = list(env.behavior_specs)[0]
    spec = env.behavior_specs[name]
    steps, ended = 0, False
    while not ended and steps < 50:
        decision, _ = env.get_steps(name)
        env.set_actions(name, spec.action_spec.random_action(len(decision)))
        env.step()
        steps += 1
        decision, terminal = env.get_steps(name)
        ended = len(terminal) > 0
    camera = decision.obs[0]
    print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "steps": steps, "ended": ended,
                      "camera": list(camera.shape), "lit": float(camera.max())}))
finally:
    env.close()
"""


def requirements() -> list[str]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    return list(PYPROJECT["project"]["dependencies"]) + [r for extra in EXTRAS for r in extras[extra]]


def find_interpreter(version: str) -> str | None:
    """An executable that really is Python ``version`` (pyenv's shims may name one they cannot run)."""
    if "{}.{}".format(*sys.version_info[:2]) == version:
        return sys.executable
    home = Path.home()
    candidates = sorted(glob.glob(str(home / ".pyenv" / "versions" / f"{version}.*" / "bin" / f"python{version}")),
                        reverse=True)  # fmt: skip
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}", shutil.which(f"python{version}")]
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


def ensure_venv(base_python: str, version: str) -> str:
    """A venv of ``version`` with the requirements; built once, rebuilt when they change. Safe against
    concurrent builders (a lock); a half-built venv never has the final name."""
    root = Path(os.environ.get("UNIRENDER_PYTHONS_VENV_ROOT") or Path.home() / ".cache" / "unirender")
    target = root / f"py{version}-venv"
    python, stamp = target / "bin" / "python", target / "unirender-requirements.txt"
    wanted = "\n".join(requirements()) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"py{version}-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return str(python)
        building = root / f"py{version}-venv.build-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        try:
            subprocess.run([base_python, "-m", "venv", str(building)], check=True, capture_output=True, timeout=300)
            done = subprocess.run([str(building / "bin" / "python"), "-m", "pip", "install", "-q", *requirements()],
                                  capture_output=True, text=True, timeout=1200)  # fmt: skip
            assert done.returncode == 0, f"installing the requirements for Python {version} failed:\n{done.stderr[-3000:]}"
            stamp_path = building / "unirender-requirements.txt"
            stamp_path.write_text(wanted)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(building, target)  # only `bin/python -m ...` is used, which works after the move
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return str(python)


def test_the_declared_versions_are_the_tested_ones():
    assert DECLARED == ["3.11", "3.12", "3.13"]
    assert PYPROJECT["project"]["requires-python"] == f">={DECLARED[0]}"
    assert "pettingzoo" in PYPROJECT["project"]["optional-dependencies"]["all"][0]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a first run builds the venv
@pytest.mark.parametrize("version", DECLARED)
def test_one_episode_on_every_declared_python(version, tmp_path):
    interpreter = find_interpreter(version)
    if interpreter is None:
        pytest.skip(f"Python {version} is declared in pyproject.toml but not installed on this machine")
    python = interpreter if interpreter == sys.executable else ensure_venv(interpreter, version)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "UNIRENDER_MLAGENTS_MAX_STEP": "5",
           "UNIRENDER_LOG_DIR": str(tmp_path), "PYTHONNOUSERSITE": "1"}  # fmt: skip
    done = subprocess.run([python, "-c", EPISODE], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, f"Python {version}:\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["python"] == version
    assert result["ended"] and result["steps"] == 5  # interrupted at max_step
    assert len(result["camera"]) == 4 and result["camera"][0] == 2 and result["lit"] > 0.0
