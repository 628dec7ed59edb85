"""The reference player renders the way the build it stands in for would: Vulkan when launched as a
CloudRendering or LinuxHeadlessSimulation build, GLX on the given DISPLAY as a Linux64 build, EGL otherwise;
``UNIRENDER_PLAYER_BACKEND`` overrides. Checked on the parser and end to end, launched by the Controller as a
Unity build (so the Controller does not name the back-end)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unirender import Controller
from unirender.player.launch import LaunchError, launch_backend

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize(("executable", "flags", "env", "backend"), [
    ("/b/thor-CloudRendering-abc/thor-CloudRendering-abc", {}, {"DISPLAY": ":0"}, "vulkan"),
    ("/b/thor-LinuxHeadlessSimulation-abc/thor-LinuxHeadlessSimulation-abc", {}, {}, "vulkan"),
    ("/b/thor-CloudRendering-abc/player", {}, {}, "vulkan"),  # the folder names the flavour too
    ("/b/thor-Linux64-abc/thor-Linux64-abc", {}, {"DISPLAY": ":1.0"}, "glx"),
    ("/usr/bin/unirender-player", {"-force-device-index": "0"}, {}, "vulkan"),
    ("/usr/bin/unirender-player", {}, {"DISPLAY": ":1.0"}, "glx"),
    ("/usr/bin/unirender-player", {}, {}, "egl"),
    ("", {}, {"DISPLAY": " "}, "egl"),
    ("/b/thor-CloudRendering-abc/thor-CloudRendering-abc", {}, {"UNIRENDER_PLAYER_BACKEND": "EGL"}, "egl"),
    ("/b/thor-Linux64-abc/thor-Linux64-abc", {}, {"UNIRENDER_PLAYER_BACKEND": "vulkan"}, "vulkan"),
])  # fmt: skip
def test_backend_follows_the_launch(executable, flags, env, backend):
    assert launch_backend(executable, flags, env)[0] == backend


def test_a_linux64_launch_without_display_is_a_clear_error():
    with pytest.raises(LaunchError, match="DISPLAY is not set"):
        launch_backend("/b/thor-Linux64-abc/thor-Linux64-abc", {}, {})


def _install_as_build(directory: Path, name: str) -> str:
    """The reference player installed the way a Unity build is laid out: ``<name>/<name>``."""
    folder = directory / name
    folder.mkdir()
    exe = folder / name
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(SRC)!r})\n"
                   "from unirender.player.main import main\nsys.exit(main())\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.parametrize(("build", "platform", "backend"), [
    ("thor-CloudRendering-test", "CloudRendering", "vulkan"),
    ("thor-LinuxHeadlessSimulation-test", "LinuxHeadlessSimulation", "vulkan"),
    ("thor-Linux64-test", "Linux64", "glx"),
    ("my-player", "CloudRendering", "egl"),  # no flavour in the name, no DISPLAY: EGL
])  # fmt: skip
def test_launched_as_a_unity_build(build, platform, backend, tmp_path, monkeypatch):
    monkeypatch.delenv("UNIRENDER_PLAYER_BACKEND", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    exe = _install_as_build(tmp_path, build)
    with Controller(exe, platform=platform, width=48, height=32, log_dir=tmp_path,
                    server_start_timeout=60, server_timeout=60) as c:
        event = c.step("RotateRight")
        assert event.frame.shape == (32, 48, 3) and event.frame.std() > 0
        log = Path(c.log_path).read_text()
    assert f"back-end {backend}:" in log and f"backend={backend}" in log, log[-2000:]
