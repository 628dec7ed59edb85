"""What users of mlagents-envs rely on around the game's process: ports per ``worker_id`` (many environments on one
machine at once), a game that never answers (``timeout_wait``), a game that dies, a build found by name."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from unirender.mlagents import (
    UnityEnvironment,
    UnityEnvironmentException,
    UnityTimeOutException,
    UnityWorkerInUseException,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def start_at_once(count: int, **kwargs) -> list:
    """``count`` environments created from as many threads at the same moment; every one or an error."""
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def start(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = UnityEnvironment(file_name="builtin", worker_id=i, no_graphics=True, timeout_wait=60,
                                          **kwargs)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported by the test
            results[i] = exc

    threads = [threading.Thread(target=start, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def close_all(envs) -> None:
    for env in envs:
        if isinstance(env, UnityEnvironment) and env._loaded:
            env.close()


def free_block(size: int) -> int:
    """A base port with ``size`` free ports after it (checked, then released)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + size < 65535 and all(_free(base + i) for i in range(size)):
            return base
    raise RuntimeError("no block of free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def step_all(envs) -> None:
    for env in envs:
        env.reset()
        name = list(env.behavior_specs)[0]
        env.set_actions(name, env.behavior_specs[name].action_spec.random_action(len(env.get_steps(name)[0])))
        env.step()
        assert len(env.get_steps(name)[0]) == 2


def test_four_environments_started_at_once_never_clash(monkeypatch):
    """base_port=None: unirender picks each game's port free (mlagents-envs' 5005 + worker_id collides with
    anything else on the machine: ml-agents #5674, #5653, #5900)."""
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", "50")
    envs = start_at_once(4)
    try:
        assert all(isinstance(env, UnityEnvironment) for env in envs), envs
        assert len({env.port for env in envs}) == 4
        step_all(envs)
    finally:
        close_all(envs)


def test_base_port_plus_worker_id_as_mlagents_envs(monkeypatch):
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", "50")
    base = free_block(4)
    envs = start_at_once(4, base_port=base)
    try:
        assert all(isinstance(env, UnityEnvironment) for env in envs), envs
        assert [env.port for env in envs] == [base, base + 1, base + 2, base + 3]
        step_all(envs)
        with pytest.raises(UnityWorkerInUseException, match="worker number 2 is still in use"):
            UnityEnvironment(file_name="builtin", worker_id=2, base_port=base, no_graphics=True)
    finally:
        close_all(envs)
    env = UnityEnvironment(file_name="builtin", worker_id=2, base_port=base, no_graphics=True)  # free again
    env.close()


def fake_build(directory: Path, name: str, body: str) -> Path:
    """A stand-in "Unity build" (a shell script) that misbehaves in a given way."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_timeout_wait_says_what_the_log_says(tmp_path):
    fake_build(tmp_path, "Silent.x86_64", "echo 'Mono path[0] = ...'\necho 'shader compilation stuck'\nsleep 60\n")
    started = time.monotonic()
    with pytest.raises(UnityTimeOutException) as caught:
        UnityEnvironment(file_name=str(tmp_path / "Silent"), timeout_wait=2)  # found without its extension
    assert time.monotonic() - started < 15
    text = str(caught.value)
    assert text.startswith("The Unity environment took too long to respond.")
    assert "shader compilation stuck" in text and "player log:" in text
    assert isinstance(caught.value, TimeoutError)


def test_a_game_that_exits_at_launch(tmp_path):
    fake_build(tmp_path, "Broken.x86_64", "echo 'Fatal: no license' >&2\nexit 3\n")
    with pytest.raises(UnityEnvironmentException) as caught:
        UnityEnvironment(file_name=str(tmp_path / "Broken.x86_64"), timeout_wait=30)
    text = str(caught.value)
    assert text.startswith("Environment shut down with return code 3.")
    assert "Fatal: no license" in text


def test_a_game_killed_mid_episode_is_reported_at_once_and_not_restarted(monkeypatch):
    """mlagents-envs 1.1's UnityEnvironment does not restart a dead game (mlagents-learn's env manager does):
    the next step raises; here within a second instead of at the next poll of timeout_wait / 10."""
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", "50")
    env = UnityEnvironment(file_name="builtin", no_graphics=True, timeout_wait=60)
    try:
        env.reset()
        os.kill(env.controller.process.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(UnityEnvironmentException, match=r"return code -9 \(SIGKILL\)") as caught:
            env.step()
        assert time.monotonic() - started < 5
        assert "player log:" in str(caught.value)
        with pytest.raises(UnityEnvironmentException):
            env.step()  # gone for good, as with mlagents-envs
    finally:
        env.close()


def test_a_build_given_by_path_is_launched_like_unity(tmp_path, monkeypatch):
    """A Unity-style build name (the reference player behind a launcher script) with mlagents-envs' arguments:
    additional_args reach the game, log_folder holds its log."""
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", "50")
    fake_build(tmp_path, "Reach.x86_64",
               f"export PYTHONPATH='{SRC}'\necho \"args: $*\"\nexec '{sys.executable}' -m unirender.player \"$@\"\n")  # fmt: skip
    logs = tmp_path / "logs"
    env = UnityEnvironment(file_name=str(tmp_path / "Reach"), seed=5, no_graphics=True,
                           additional_args=["-custom-flag", "on"], log_folder=str(logs))  # fmt: skip
    try:
        env.reset()
        assert len(env.get_steps("ReachTarget?team=0")[0]) == 2
        assert Path(env.log_path).parent == logs
        assert "-nographics" in Path(env.log_path).read_text() and "-custom-flag on" in Path(env.log_path).read_text()
    finally:
        env.close()


def test_a_build_that_is_not_executable(tmp_path):
    (tmp_path / "Game.x86_64").write_text("#!/bin/sh\n")
    with pytest.raises(UnityEnvironmentException, match='make sure permissions are set correctly. For example "chmod'):
        UnityEnvironment(file_name=str(tmp_path / "Game"))
