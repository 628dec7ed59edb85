"""Executable paths (protocol.md 6.1) and per-platform applicability."""

from __future__ import annotations

import plistlib

import pytest

from unirender.errors import PlatformError
from unirender.platforms import EGL, CloudRendering, Linux64, OSXIntel64, PlatformRequest, WebGL


def test_linux_executable_path(tmp_path):
    assert Linux64().executable_path(tmp_path, "thor-Linux64-abc") == tmp_path / "thor-Linux64-abc"
    assert CloudRendering().executable_path(tmp_path, "x") == tmp_path / "x"


def test_osx_executable_from_info_plist(tmp_path):
    contents = tmp_path / "thor-OSXIntel64-abc.app" / "Contents"
    contents.mkdir(parents=True)
    with open(contents / "Info.plist", "wb") as f:
        plistlib.dump({"CFBundleExecutable": "AI2-THOR", "CFBundleName": "x"}, f)
    assert OSXIntel64().executable_path(tmp_path, "thor-OSXIntel64-abc") == contents / "MacOS" / "AI2-THOR"


@pytest.mark.parametrize("content", [None, b"not a plist", plistlib.dumps({"CFBundleName": "x"})])
def test_osx_bad_bundle_is_a_clear_error(tmp_path, content):
    contents = tmp_path / "b.app" / "Contents"
    contents.mkdir(parents=True)
    if content is not None:
        (contents / "Info.plist").write_bytes(content)
    with pytest.raises(PlatformError, match="Info.plist"):
        OSXIntel64().executable_path(tmp_path, "b")


def test_webgl_has_no_executable(tmp_path):
    with pytest.raises(PlatformError, match="no executable; pass the build folder"):
        WebGL().executable_path(tmp_path, "x")


def test_webgl_needs_chromium_and_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("UNIRENDER_CHROMIUM", str(tmp_path / "no-such-browser"))
    a = WebGL().assess(PlatformRequest(system="Linux"))
    assert not a.usable and a.applicable
    assert "no Chromium found" in a.reasons[0] and "sudo apt-get install -y chromium" in a.reasons[0]
    assert not WebGL().assess(PlatformRequest(system="Darwin")).applicable


def test_webgl_picks_swiftshader_or_the_gpu_through_angle(monkeypatch):
    monkeypatch.setenv("UNIRENDER_CHROMIUM", "/bin/true")
    software = WebGL().assess(PlatformRequest(system="Linux"))
    assert software.usable and software.device.software and "--use-angle=swiftshader" in software.args
    gpu = WebGL().assess(PlatformRequest(system="Linux", gpu_device=0))
    assert gpu.usable and not gpu.device.software and "--use-angle=vulkan" in gpu.args
    assert software.env == {"UNIRENDER_CHROMIUM": "/bin/true"}


@pytest.mark.parametrize("cls", [Linux64, CloudRendering, EGL])
def test_linux_platforms_do_not_apply_on_macos(cls):
    a = cls().assess(PlatformRequest(system="Darwin", builtin=True))
    assert not a.usable and not a.applicable and "only on Linux" in a.reasons[0]


def test_osx_usable_on_macos_only():
    assert OSXIntel64().validate(PlatformRequest(system="Darwin")) == []
    assert OSXIntel64().validate(PlatformRequest(system="Linux")) == [
        "OSXIntel64 runs only on Darwin (this is Linux)"
    ]


def test_headless_unity_needs_no_display():
    request = PlatformRequest(system="Linux", headless=True, x_display=":4321")
    assert Linux64().validate(request) == [] and Linux64().launch_env(request) == {}
