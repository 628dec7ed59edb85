"""The real third-party clients: mlagents-envs 0.28.0's and 1.1.0's own UnityEnvironment (each in its own venv,
with the pins it needs) launch ``unirender-player`` as if it were a Unity build and play it over their gRPC
server. The player forces no package: it must be the game each client's generation expects (0.28: a 2.x game
writing HWC; 1.1: a 4.x game writing CHW), read from the client's handshake.

The same clients also play the stand-in game of their package lines (``fixtures/mlagents_game.py``), and every
observation they decode (grayscale, stacked and grid cameras with channel mappings, buffer, goal and stacked
vectors) must equal what ``MLAgentsController`` decodes from the same game: the official decoder checks both the
stand-in's wire format and ours."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mlagents_envs_stand_in_driver import actions
from mlagents_envs_venv import DRIVER, VENVS, client_python, write_player_launcher

from fixtures import mlagents_game as game
from unirender.mlagents import MLAgentsController

STAND_IN_DRIVER = Path(__file__).with_name("mlagents_envs_stand_in_driver.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_driver(version: str, tmp_path, player_env: dict) -> subprocess.CompletedProcess:
    python = client_python(version)
    build = write_player_launcher(tmp_path, env=player_env)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), str(DRIVER), str(build.with_suffix("")), str(free_port()), "20"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip


@pytest.mark.timeout(900)  # the first run builds the venv (pip, about a minute; more on a slow network)
@pytest.mark.parametrize("version", list(VENVS))
def test_mlagents_envs_drives_the_reference_player(version, tmp_path):
    done = run_driver(version, tmp_path, {"UNIRENDER_MLAGENTS_MAX_STEP": "8"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["envs_version"] == VENVS[version].label.split()[-1]
    assert out["behavior"] == "ReachTarget?team=0"
    # the engine channel's 64x48 reached the player before its first observation, in the client's layout
    camera = [48, 64, 3] if VENVS[version].layout == "HWC" else [3, 48, 64]
    assert out["observation_shapes"] == [camera, [8]]
    assert out["dimension_properties"] == [[2, 2, 1] if VENVS[version].layout == "HWC" else [1, 2, 2], [1]]
    assert out["observation_names"] == ["CameraSensor", "VectorSensor_size8"]
    assert out["continuous_size"] == 2 and out["discrete_branches"] == [3]
    assert out["first_mask_shape"] == [[2, 3]]
    assert 0.05 < out["first_pixels"] < 0.95  # a rendered picture, divided by 255 by mlagents-envs
    assert out["frames_change"], "the camera images of step 1 and step 20 are the same: nothing is rendered"
    assert out["both"], "max_step=8 within 20 steps: an agent in terminal and decision steps of one step"
    assert out["stats"]["Environment/Episode Length"] >= 2
    assert out["last_obs_shapes"] == [[2, *camera], [2, 8]]
    assert out["after_reset_step_fraction"] == [0.0, 0.0] and out["after_reset_terminal"] == 0
    assert out["ok"]


@pytest.mark.timeout(900)
def test_a_forced_2x_package_fails_mlagents_envs_1_1_as_a_real_2x_game_does(tmp_path):
    """UNIRENDER_MLAGENTS_PACKAGE_VERSION still forces the generation: a 2.x game and mlagents-envs 1.1 fail on
    the first image exactly as users report it (HWC shape, CHW decoding)."""
    done = run_driver("1.1", tmp_path, {"UNIRENDER_MLAGENTS_PACKAGE_VERSION": "2.2.1-exp.1"})
    assert done.returncode != 0
    assert "decompressed had (3, 48, 64) but expected [48, 64, 3]" in done.stderr


def unirender_observations(port: int, line: str, steps: int, log_path) -> dict:
    """What MLAgentsController decodes from the stand-in, keyed as the stand-in driver keys the client's arrays."""
    process = game.start(port, line, log_path)
    arrays = {}
    try:
        with MLAgentsController(None, port=port, num_areas=2, seed=11, time_scale=5.0, timeout=15, start_timeout=60,
                                environment_parameters={"reward_scale": 2.0}) as c:  # fmt: skip
            event = c.reset()
            for k in range(steps + 1):
                if k:
                    sent = {}
                    for name in event.behavior_names:
                        continuous, discrete = actions(k, name, len(event.steps(name)[0]))
                        sent[name] = {"continuous": continuous, "discrete": discrete}
                    event = c.step(sent)
                for name in event.behavior_names:
                    decision, terminal = event.steps(name)
                    for kind, steps_ in (("decision", decision), ("terminal", terminal)):
                        arrays[f"{k}/{name}/{kind}/agent_id"] = steps_.agent_id
                        arrays[f"{k}/{name}/{kind}/reward"] = steps_.reward
                        for i in range(len(steps_.obs)):
                            arrays[f"{k}/{name}/{kind}/obs{i}"] = steps_.obs[i]
                    for b, mask in enumerate(decision.action_mask or []):
                        arrays[f"{k}/{name}/decision/mask{b}"] = mask
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    return arrays


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version,line", [("0.28", "2.x"), ("1.1", "3.x"), ("1.1", "4.x")])
def test_mlagents_envs_and_unirender_decode_the_stand_in_game_alike(version, line, tmp_path):
    python = client_python(version)
    build = game.write_build(tmp_path, line)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = tmp_path / "theirs.npz"
    done = subprocess.run([str(python), str(STAND_IN_DRIVER), build[: -len(".x86_64")], str(free_port()), "6",
                           str(out)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    specs = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(specs) == [game.COLLECTOR, game.SCOUT]
    collector = {name: (shape, dims, kind) for shape, dims, kind, name in specs[game.COLLECTOR]}
    h, w = game.CAMERA_H, game.CAMERA_W
    assert collector["StackingSensor_size4_CameraGray"][:2] == (
        ([h, w, 4], [2, 2, 1]) if line == "2.x" else ([4, h, w], [1, 2, 2]))  # fmt: skip
    assert collector["GoalSensor"][2] == 1 and collector["BufferSensor"][1] == [4, 1]
    with np.load(out) as theirs_file:
        theirs = dict(theirs_file)
    ours = unirender_observations(free_port(), line, 6, tmp_path / "stand-in.log")
    assert sorted(ours) == sorted(theirs)
    assert any(k.startswith("6/Scout") and k.endswith("terminal/agent_id") and len(v) for k, v in theirs.items())
    for key in sorted(theirs):
        assert ours[key].shape == theirs[key].shape, key
        np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=1e-6, err_msg=key)
