"""The real third-party client: mlagents-envs 0.28.0's own UnityEnvironment (in its own venv, with the pins it
needs) launches ``unirender-player`` as if it were a Unity build and plays it over its gRPC server."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from mlagents_envs_venv import DRIVER, ensure_venv, write_player_launcher


@pytest.fixture(scope="module")
def mlagents_python():
    try:
        return ensure_venv()
    except subprocess.CalledProcessError as exc:  # no network to PyPI: say so instead of a vague failure
        pytest.fail(f"could not build the mlagents-envs 0.28.0 venv: {exc.stderr.decode(errors='replace')[-2000:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(900)  # the first run builds the venv (pip, about a minute; more on a slow network)
def test_mlagents_envs_0_28_drives_the_reference_player(mlagents_python, tmp_path):
    build = write_player_launcher(tmp_path, env={"UNIRENDER_MLAGENTS_MAX_STEP": "8"})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(mlagents_python), str(DRIVER), str(build.with_suffix("")), str(free_port()), "20"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["behavior"] == "ReachTarget?team=0"
    # the engine channel's 64x48 reached the player before its first observation: HWC, as 0.28.0 expects
    assert out["observation_shapes"] == [[48, 64, 3], [8]]
    assert out["observation_names"] == ["CameraSensor", "VectorSensor_size8"]
    assert out["continuous_size"] == 2 and out["discrete_branches"] == [3]
    assert out["first_mask_shape"] == [[2, 3]]
    assert 0.05 < out["first_pixels"] < 0.95  # a rendered picture, divided by 255 by mlagents-envs
    assert out["both"], "max_step=8 within 20 steps: an agent in terminal and decision steps of one step"
    assert out["stats"]["Environment/Episode Length"] >= 2
    assert out["last_obs_shapes"] == [[2, 48, 64, 3], [2, 8]]
    assert out["after_reset_step_fraction"] == [0.0, 0.0] and out["after_reset_terminal"] == 0
    assert out["ok"]
