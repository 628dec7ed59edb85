"""``unirender doctor`` and ``unirender xorg-config``: once through the real ``unirender`` command, the rest
through the same argparse registration in-process (a CLI start-up costs seconds on a loaded machine)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

from unirender.platforms import cli


def _run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="unirender")
    cli.register(parser.add_subparsers())
    try:
        parsed = parser.parse_args(list(args))
        rc = parsed.func(parsed)
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _unirender(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "unirender.cli", *args],
        capture_output=True, text=True, timeout=100, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="module")
def doctor_json():
    proc = _unirender("doctor", "--json", "--width", "640", "--height", "480")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _row(report: dict, platform: str, via: str | None = None) -> dict:
    return next(r for r in report["platforms"] if r["platform"] == platform and r["via"] == via)


def test_doctor_json_reports_every_platform(doctor_json):
    cloud = _row(doctor_json, "CloudRendering")
    assert cloud["status"] == "usable" and cloud["device"]["software"] is True
    assert "llvmpipe" in cloud["device"]["name"]
    virtual = _row(doctor_json, "Linux64", "virtual display")
    assert virtual["status"] == "usable" and virtual["device"]["software"] is True
    assert "llvmpipe" in virtual["device"]["name"]  # a GLX context was really created on the Xvfb
    assert _row(doctor_json, "EGL")["status"] == "usable"
    osx = _row(doctor_json, "OSXIntel64")
    assert osx["status"] == "not applicable" and "only on Darwin" in osx["reasons"][0]
    webgl = _row(doctor_json, "WebGL")  # headless Chromium really rendered a WebGL2 test page
    assert webgl["status"] == "usable" and "SwiftShader" in webgl["device"]["name"], webgl
    assert webgl["device"]["software"] is True
    assert doctor_json["auto"] == {"unity": "CloudRendering", "builtin": "EGL"}
    assert doctor_json["vulkan"]["devices"][0]["kind"] == "cpu"
    assert doctor_json["egl"]["devices"][0]["vendor"] == "Mesa Project"
    assert doctor_json["request"] == {"width": 640, "height": 480, "x_display": None, "system": "Linux"}


def test_doctor_table(empty_icd, capsys, monkeypatch):
    """At 80 columns: everything fits, and each fix command stands whole on a line of its own (copy-paste)."""
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = _run_in_process(capsys, "doctor", "--no-start")
    assert rc == 0, err  # EGL and the virtual display still work
    assert "CloudRendering" in out and "vkCreateInstance failed" in out
    lines = out.splitlines()
    command = "sudo apt-get install -y libvulkan1 mesa-vulkan-drivers"
    assert f"    {command}" in lines
    assert all(len(line.rstrip()) <= 80 for line in lines if line.strip() != command), out
    assert "SOFTWARE (CPU)" in out and "not applicable" in out
    assert "builtin player -> EGL" in out
    mlagents = " ".join(out[out.index("ML-Agents builds:"):].split())
    # "yes" when some X server with GLX already runs here (a developer's desktop), else the Xvfb fallback
    assert re.search(r"camera sensors need an X display \(here: (yes|none running; Xvfb can provide one)\)",
                     mlagents), mlagents
    assert "or Vulkan (here: no) for a LinuxHeadlessSimulation build" in mlagents  # the drivers are hidden


def test_doctor_says_what_an_mlagents_build_needs(doctor_json):
    text = doctor_json["mlagents"]
    assert text.startswith("ML-Agents builds: camera sensors need an X display")
    assert "Vulkan (here: yes)" in text and "-nographics" in text
    assert _row(doctor_json, "LinuxHeadlessSimulation")["status"] == "usable"
    assert doctor_json["builtin_player"] == {"installed": True, "missing": []}


@pytest.mark.parametrize(("text", "commands"), [
    ("needs X: sudo apt-get install -y xvfb xauth (software GL)", ["sudo apt-get install -y xvfb xauth"]),
    ("a real Xorg (`unirender xorg-config`); sudo apt-get install -y a1 b.c.", ["unirender xorg-config",
                                                                              "sudo apt-get install -y a1 b.c"]),
    ("nothing to install", []),
])  # fmt: skip
def test_fix_commands_are_found_in_instructions(text, commands):
    from unirender.platforms.doctor import fix_commands

    assert fix_commands(text) == commands


@pytest.mark.parametrize(
    "args, message",
    [(["--width", "0"], "--width must be positive"), (["--x-display", "nope"], "invalid X display"),
     (["--height", "abc"], "invalid int value")],
)  # fmt: skip
def test_doctor_bad_input(args, message, capsys):
    rc, out, err = _run_in_process(capsys, "doctor", *args)
    assert rc == 2
    assert message in err and "Traceback" not in err


def test_doctor_on_one_display(xvfb_no_glx, capsys):
    rc, out, err = _run_in_process(capsys, "doctor", "--json", "--x-display", xvfb_no_glx.display)
    report = json.loads(out)
    linux = _row(report, "Linux64")
    assert linux["status"] == "unusable" and "no GLX extension" in linux["reasons"][0]
    assert not any(r["via"] for r in report["platforms"])  # no virtual display for an explicit display
    assert rc == 0  # CloudRendering is still usable


def test_xorg_config_without_nvidia(capsys):
    rc, out, err = _run_in_process(capsys, "xorg-config")
    assert rc == 1 and "no NVIDIA GPU found" in err and out == ""


def test_xorg_config_bad_size(capsys):
    rc, out, err = _run_in_process(capsys, "xorg-config", "--width", "-3")
    assert rc == 2 and "--width must be positive" in err
