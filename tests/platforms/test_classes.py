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
    with pytest.raises(PlatformError, match="browser"):
        WebGL().executable_path(tmp_path, "x")


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
