"""The real Unity runtime under the webgl family: Decentraland's Unity 2020.3 WebGL renderer from the npm
registry, booted in headless Chromium on SwiftShader with its window.DCL host stub. Frames come back, are not
blank, and change when the renderer is told to (its FPS panel, drawn by Unity's UI, and its world, on the
SendMessages its kernel would send); a declared click reaches the renderer's C# (it takes pointer lock, which it
does only once its world is on), and what it reports back (its position after a teleport) comes through
``window.unirender``. Its first-person controls do not move the empty world: docs/webgl.md, "A real Unity
runtime", says what was measured."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures import unity_webgl
from unirender.webgl import WebGLController

pytestmark = pytest.mark.slow

# The id of the element holding pointer lock once the browser has answered a request (or None after 5 s without
# one): Chromium grants a lock asynchronously, after the mouse event that asked for it.
POINTER_LOCK = """new Promise(resolve => {
  const answer = () => resolve(document.pointerLockElement ? document.pointerLockElement.id : null);
  if (document.pointerLockElement) return answer();
  document.addEventListener("pointerlockchange", answer, {once: true});
  document.addEventListener("pointerlockerror", answer, {once: true});
  setTimeout(answer, 5000);
})"""


def changed_pixels(a: np.ndarray, b: np.ndarray) -> int:
    return int((np.abs(a.astype(int) - b).sum(axis=2) > 0).sum())


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
        assert settled.std() > 0  # the first-person crosshair on white: the world is not on yet
        shown = unity.step("fps_panel").frame
        assert changed_pixels(shown, settled) > 1000  # Unity's FPS panel (text in red over the lower half)
        red = (shown[..., 0] > 100) & (shown[..., 1] < 60) & (shown[..., 2] < 60)
        assert red.sum() > 500 and not ((settled[..., 0] > 100) & (settled[..., 1] < 60)).any()

        # The click is delivered, but with its world off the renderer ignores it: no pointer lock.
        unity.step("click")
        assert unity.evaluate(POINTER_LOCK, await_promise=True) is None

        # The world on (the kernel's ForceActivateRendering): the sky over the ground replaces the white, and the
        # renderer acknowledges it. A step without input changes only the FPS panel's counters.
        before = unity.step().frame
        world = unity.step("show_world")
        assert {"engine_message": "ControlEvent", "body": {"eventType": "ActivateRenderingACK"}} in world.messages
        still = unity.step().frame
        assert changed_pixels(world.frame, before) > 0.9 * 300 * 300
        assert changed_pixels(still, world.frame) < 0.1 * 300 * 300  # what a step changes by itself: the panel
        assert (world.frame[..., 2] > world.frame[..., 0]).mean() > 0.5  # a blue sky, not white

        # Its character placed where the kernel would put it: the renderer reports the position back.
        placed = unity.step("teleport")
        positions = [m["body"]["position"] for m in placed.messages if m.get("engine_message") == "ReportPosition"]
        assert positions and all((p["x"], p["z"]) == (8.0, 8.0) for p in positions), placed.messages

        # The same click now reaches the renderer's C# (its mouse catcher locks the cursor, and Unity's page code
        # asks the browser for pointer lock on the canvas).
        unity.step("click")
        assert unity.evaluate(POINTER_LOCK, await_promise=True) == "unity-canvas"
