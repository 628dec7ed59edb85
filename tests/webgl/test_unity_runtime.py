"""The real Unity runtime under the webgl family: Decentraland's Unity 2020.3 WebGL renderer from the npm
registry, booted in headless Chromium on SwiftShader with its window.DCL host stub. Frames come back, are not
blank, and change when input is sent (the renderer's own FPS panel, drawn by Unity's UI, on a SendMessage)."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures import unity_webgl
from unirender.webgl import WebGLController

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dcl_build():
    try:
        return unity_webgl.install()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot install {unity_webgl.PACKAGE}@{unity_webgl.VERSION}: {exc}")


@pytest.mark.timeout(600)
def test_decentralands_unity_renderer_runs_as_an_environment(browser_binary, dcl_build, tmp_path):
    with WebGLController(dcl_build, 300, 300, actions=unity_webgl.ACTIONS, host_script=unity_webgl.HOST_SCRIPT,
                         wait_for="ready", frames_per_step=20, boot_timeout=300, step_timeout=120,
                         log_dir=tmp_path) as unity:
        first = unity.reset()
        assert first.messages[0] == {"engine_started": True}  # the host stub saw EngineStarted()
        description = unity.describe()
        assert description.family == "webgl" and "SwiftShader" in description.device
        frames = [first.frame] + [unity.step().frame for _ in range(10)]  # past the "Made with Unity" splash
        for frame in frames:
            assert frame.shape == (300, 300, 3)
        assert any(frame.std() > 1 for frame in frames)  # the splash logo: not blank
        settled = frames[-1]
        assert settled.std() > 0  # the first-person crosshair on the empty world
        shown = unity.step("fps_panel").frame
        changed = np.abs(shown.astype(int) - settled).sum(axis=2) > 0
        assert changed.sum() > 1000  # Unity's FPS panel (text in red over the lower half)
        red = (shown[..., 0] > 100) & (shown[..., 1] < 60) & (shown[..., 2] < 60)
        assert red.sum() > 500 and not ((settled[..., 0] > 100) & (settled[..., 1] < 60)).any()
