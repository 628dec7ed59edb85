"""Real X servers for the platform tests: started once per module, stopped (and checked gone) after."""

from __future__ import annotations

import os

import pytest

from fixtures import foreign_x
from unirender.platforms import probes
from unirender.platforms.xvfb import ScreenSpec, start_xvfb


@pytest.fixture(scope="module")
def xvfb_two_screens():
    """GLX, depth 24: screen 0 is 640x480, screen 1 is 200x200 (too small for 300x300)."""
    with start_xvfb([ScreenSpec(640, 480), ScreenSpec(200, 200)]) as display:
        yield display


@pytest.fixture(scope="module")
def xvfb_no_glx():
    with start_xvfb([ScreenSpec(640, 480)], glx=False) as display:
        yield display


@pytest.fixture(scope="module")
def xvfb_depth16():
    with start_xvfb([ScreenSpec(640, 480, 16)]) as display:
        yield display


@pytest.fixture
def empty_icd(tmp_path, monkeypatch):
    """Hide every Vulkan driver from the loader (the probe runs in a subprocess that inherits this)."""
    path = tmp_path / "no-drivers.json"
    path.write_text("{}")
    monkeypatch.setenv("VK_DRIVER_FILES", str(path))
    monkeypatch.setenv("VK_ICD_FILENAMES", str(path))
    yield path
    monkeypatch.undo()
    assert os.environ.get("VK_DRIVER_FILES") != str(path)


@pytest.fixture
def hidden_egl(tmp_path, monkeypatch):
    """Hide every EGL vendor library from glvnd."""
    path = tmp_path / "no-egl-vendor.json"
    path.write_text("{}")
    monkeypatch.setenv("__EGL_VENDOR_LIBRARY_FILENAMES", str(path))
    return path


@pytest.fixture(autouse=True)
def _fresh_probe_cache_per_env():
    # The cache is keyed by the driver environment already; this only keeps tests independent of order.
    yield
    probes.refresh()


@pytest.fixture(scope="module")
def foreign_xvfb():
    """An Xvfb started by another process (so nothing in this process knows what it renders with)."""
    with foreign_x.foreign_xvfb() as display:
        yield display
