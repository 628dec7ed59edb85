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


def test_the_frame_is_the_canvas_right_way_up_and_sendimage_and_onunityevent_are_mapped(thor):
    event = thor.reset("FloorPlan1", renderDepthImage=True)
    red = np.all(event.frame == [255, 0, 0], axis=2)
    assert red[:4, :4].all() and not red[-4:, :4].any()  # the fake's marker is in the top left corner
    assert np.array_equal(event.frame, thor.webgl.last_event.frame)  # the canvas as the page read it
    # onUnityImage("image_depth", bytes): the bytes a Linux64 player sends under that key (rows from the bottom)
    depth = event.depth_frame
    assert depth.shape == (64, 96) and depth[-1, 0] == pytest.approx(1.0) and depth[0, 0] == pytest.approx(1.63)
    # onUnityEvent(event, message) during the step
    assert event.metadata["unityEvents"] == [{"event": "actionFinished", "message": "Initialize"}]
    # Initialize parameters persist across resets, as a Controller's do; a reset without a scene starts over
    thor.step("MoveAhead")
    again = thor.reset()
    assert again.metadata["sceneName"] == "FloorPlan1" and again.metadata["agent"]["position"]["z"] == 0
    assert again.depth_frame is not None


def test_a_controller_refuses_a_webgl_build_and_names_the_bridge(tmp_path):
    from unirender import Controller

    build = ai2thor_webgl_build(tmp_path / "thor")
    with pytest.raises(ValueError, match=r"AI2-THOR WebGL build.*unirender\.webgl\.ai2thor\.launch"):
        Controller(str(build), 96, 64)
    with pytest.raises(ValueError, match="platform WebGL"):
        Controller("builtin", platform="WebGL")


def test_the_ai2thor_launcher_picks_the_bridge_for_a_local_session(browser_binary, tmp_path):
    from unirender.cluster.local import LocalBackend
    from unirender.cluster.simulators import camera_reader, flat_first_frame

    build = ai2thor_webgl_build(tmp_path / "thor")
    with LocalBackend() as backend:  # no protocol: the AI2-THOR family, as for any AI2-THOR build
        session = backend.create_session({"executable": str(build), "width": 96, "height": 64,
                                          "scene": "FloorPlan5", "gridSize": 0.25, "log_dir": str(tmp_path)})
        try:
            first = session.last_event
            assert isinstance(first, Event) and first.metadata["sceneName"] == "FloorPlan5" and session.family == "ai2thor"
            moved = session.step({"action": "MoveAhead"})
            assert moved.metadata["agent"]["position"]["z"] == 0.25
            assert camera_reader("ai2thor")(moved)["frame"].shape == (64, 96, 3) and flat_first_frame(session) == []
            assert session.reset().metadata["agent"]["position"]["z"] == 0
            info = session.info()
            assert info["family"] == "ai2thor" and info["platform"] == "WebGL" and info["pid"] > 0
        finally:
            session.stop()
    with pytest.raises(ValueError, match="headless=True does not apply"):
        from unirender.webgl.ai2thor import launch

        launch(str(build), headless=True)


def test_a_spec_job_renders_frames_and_metadata(browser_binary, tmp_path):
    from unirender.jobs import load_dataset, render

    build = ai2thor_webgl_build(tmp_path / "thor")
    # platform auto: the folder's Build/*.loader.js makes it WebGL (the service test declares platform: WebGL)
    spec = {"environment": {"executable": str(build), "width": 96, "height": 64},
            "episodes": [{"scene": "FloorPlan3", "actions": ["MoveAhead", "RotateRight", "Fly"]}],
            "output": {"directory": str(tmp_path / "out")}}
    result = render(spec)
    assert result.frames == 4 and result.platform == "WebGL"
    frames = list(load_dataset(tmp_path / "out"))
    assert [f.metadata["lastAction"] for f in frames] == ["Initialize", "MoveAhead", "RotateRight", "Fly"]
    assert frames[0].metadata["sceneName"] == "FloorPlan3" and frames[1].metadata["agent"]["position"]["z"] == 0.25
    assert frames[3].metadata["errorMessage"] == "Invalid action: Fly"
    assert frames[0].frame.shape == (64, 96, 3) and not np.array_equal(frames[1].frame, frames[2].frame)


def test_the_gym_env_runs_on_it(browser_binary, tmp_path):
    from unirender.gym import UnityEnv

    build = ai2thor_webgl_build(tmp_path / "thor")
    env = UnityEnv(environment={"executable": str(build), "width": 96, "height": 64},
                   observations="rgb", actions=["MoveAhead", "RotateRight"], scenes=["FloorPlan7"])
    try:
        observation, info = env.reset(seed=1)
        assert observation.shape == (64, 96, 3) and env.observation_space.contains(observation)
        after, reward, terminated, truncated, info = env.step(0)
        assert info["action"] == "MoveAhead" and info["last_action_success"]
        assert env.last_event.metadata["agent"]["position"]["z"] == 0.25 and not np.array_equal(after, observation)
    finally:
        env.close()


def test_spec_check_resolves_the_webgl_platform_for_it(browser_binary, tmp_path):
    import subprocess
    import sys

    import yaml

    build = ai2thor_webgl_build(tmp_path / "thor")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"environment": {"executable": str(build), "width": 96, "height": 64},
                                   "episodes": [{"scene": "FloorPlan3", "actions": ["MoveAhead"]}]}))
    done = subprocess.run([sys.executable, "-m", "unirender.cli", "spec", "check", str(job)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "target         WebGL" in done.stdout and "platform     WebGL" in done.stdout
    assert "warning" not in done.stderr
    from unirender.builds import BuildStore

    # the folder itself is the build (not the folder it lies in)
    assert BuildStore(tmp_path / "store").digest_folder(build) in done.stdout
