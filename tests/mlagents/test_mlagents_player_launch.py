"""The reference player's ML-Agents launch: what it reads from argv/environment, and bad launches fail fast."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from unirender.player.launch import LaunchError
from unirender.player.mlagents.launch import is_mlagents_launch, parse_mlagents_launch

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_mlagents_envs_argv_is_understood():
    argv = ["-nographics", "-batchmode", "--mlagents-port", "5008", "-logFile", "LOGS/Player-3.log",
            "-screen-fullscreen", "0"]  # fmt: skip (mlagents-envs' exact order, worker 3)
    assert is_mlagents_launch(argv)
    config = parse_mlagents_launch(argv, {})
    assert (config.port, config.log_file, config.backend) == (5008, "LOGS/Player-3.log", None)
    # no package forced: the player follows the trainer's generation (client.py)
    assert (config.width, config.height, config.agents, config.package_version) == (84, 84, 2, None)
    forced = parse_mlagents_launch(["--mlagents-port", "1"], {"UNIRENDER_MLAGENTS_PACKAGE_VERSION": "2.2.1-exp.1"})
    assert forced.package_version == "2.2.1-exp.1"
    config = parse_mlagents_launch(["--mlagents-port", "1", "-screen-width", "64", "-force-device-index", "0"],
                                   {"UNIRENDER_PLAYER_BACKEND": "vulkan", "UNIRENDER_MLAGENTS_AGENTS": "3"})  # fmt: skip
    assert (config.backend, config.width, config.device_index, config.agents) == ("vulkan", 64, 0, 3)


@pytest.mark.parametrize("argv,env,message", [
    (["--mlagents-port", "x"], {}, "needs an integer"),
    (["--mlagents-port", "70000"], {}, "1..65535"),
    (["--mlagents-port"], {}, "needs a value"),
    (["--mlagents-port", "5005"], {"UNIRENDER_MLAGENTS_CAMERA_COMPRESSION": "jpeg"}, "png or none"),
    (["--mlagents-port", "5005"], {"UNIRENDER_PLAYER_BACKEND": "metal"}, "UNIRENDER_PLAYER_BACKEND"),
])  # fmt: skip
def test_bad_launches_are_clear_errors(argv, env, message):
    with pytest.raises(LaunchError, match=message):
        parse_mlagents_launch(argv, env)


def test_player_process_exits_2_on_a_bad_port_and_1_without_a_trainer():
    run = [sys.executable, "-m", "unirender.player"]
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    bad = subprocess.run([*run, "--mlagents-port", "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "needs an integer" in bad.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: a connection is refused at once
        alone = subprocess.run([*run, "--mlagents-port", str(port)], env=env, capture_output=True, text=True,
                               timeout=60)  # fmt: skip
    assert alone.returncode == 1 and "couldn't connect to trainer" in alone.stderr
