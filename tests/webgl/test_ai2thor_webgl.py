"""AI2-THOR WebGL builds through the webgl family: the JavaScriptInterface bridge (onGameLoaded,
onUnityMetadata, SendMessage FPSController.Step / PhysicsSceneManager.SwitchScene) mapped onto unirender's
AI2-THOR Event, on a fake build that follows that contract."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.webgl import ai2thor_webgl_build
from unirender import Event
from unirender.errors import ActionError
from unirender.webgl.ai2thor import AI2THORWebGLController


@pytest.fixture
def thor(browser_binary, tmp_path):
    with AI2THORWebGLController(ai2thor_webgl_build(tmp_path / "thor"), 96, 64, log_dir=tmp_path) as controller:
        yield controller


def test_actions_answer_ai2thor_events(thor):
    event = thor.reset("FloorPlan28", gridSize=0.25)
    assert isinstance(event, Event) and event.metadata["lastAction"] == "Initialize" and event
    assert event.metadata["sceneName"] == "FloorPlan28"
    assert event.frame.shape == (64, 96, 3) and event.screen_width == 96
    moved = thor.step("MoveAhead")
    assert moved.metadata["agent"]["position"]["z"] == 0.25
    assert (moved.frame == 230).all(axis=2).sum() > (event.frame == 230).all(axis=2).sum()  # the square grew
    turned = thor.step(dict(action="RotateRight"))
    assert turned.metadata["agent"]["rotation"]["y"] == 90 and not np.array_equal(turned.frame, moved.frame)
    failed = thor.step("Fly")
    assert not failed and failed.metadata["errorMessage"] == "Invalid action: Fly"
    assert thor.describe().family == "ai2thor" and thor.last_event is failed


def test_reset_switches_the_scene_and_starts_over(thor):
    thor.reset("FloorPlan1")
    thor.step("MoveAhead")
    again = thor.reset("FloorPlan2")
    assert again.metadata["sceneName"] == "FloorPlan2" and again.metadata["agent"]["position"]["z"] == 0
    with pytest.raises(ActionError, match="needs an 'action'"):
        thor.step({"degrees": 30})
