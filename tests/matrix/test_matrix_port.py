"""The simulator port on every family and backend: the session says what it is and what it takes and gives."""

import numpy as np
import pytest

from unirender.simulator import Description, FlatCameraWarning


def test_a_session_describes_its_simulator(case):
    backend = case.backend()
    with backend.create_session(case.controller_kwargs) as session:
        assert session.family == case.family
        assert session.info()["family"] == case.family
        d = session.describe()
        assert isinstance(d, Description) and d.family == case.family
        assert d.pid and d.platform == case.platform and d.log_path
        cameras = d.cameras()
        assert cameras, d
        for camera in cameras:
            assert camera.kind == "image" and camera.shape[:2] == (40, 48) and camera.dtype == "uint8"
        if case.family == "ai2thor":
            assert d.actions.kind == "named" and "MoveAhead" in d.actions.names
            assert d.server_type == case.controller_kwargs["server"].upper()
            frame = session.last_event.frame
        elif case.family == "webgl":
            assert d.actions.kind == "named" and d.actions.names[:3] == ("noop", "left", "right")
            frame = session.last_event.frame
        else:
            assert d.actions.kind == "behaviors" and d.actions.behaviors
            behavior, space = next(iter(d.actions.behaviors.items()))
            assert space.continuous == 2 and space.discrete == (3,)
            assert d.build_version
            frame = session.last_event.frames(behavior)["CameraSensor"][0]
        assert frame.shape == cameras[0].shape[-3:]
        assert np.ptp(frame) > 0  # a rendered view, not a flat colour
        doc = d.to_dict()
        assert doc["family"] == case.family and doc["observations"]


def test_a_flat_first_frame_is_warned_about_with_the_platform_and_cause(mlagents_case):
    """An ML-Agents game started with -nographics renders black cameras (as Unity does): the session warns, on
    the caller's side whatever the backend."""
    kwargs = {**mlagents_case.controller_kwargs, "args": ["-nographics"]}
    with pytest.warns(FlatCameraWarning) as caught, mlagents_case.backend().create_session(kwargs):
        pass
    message = str(caught[0].message)
    assert "CameraSensor" in message and "EGL" in message and "-nographics" in message


def test_a_rendered_first_frame_raises_no_warning(case, recwarn):
    with case.backend().create_session(case.controller_kwargs):
        pass
    assert not [w for w in recwarn if issubclass(w.category, FlatCameraWarning)]


def test_no_graphics_on_a_game_with_cameras_is_refused_with_the_reason():
    from unirender.mlagents import MLAgentsController

    controller = MLAgentsController("builtin", width=32, height=32, platform="EGL", no_graphics=True)
    with pytest.raises(ValueError, match=r"no_graphics=True, but the game declares camera sensors .*CameraSensor"):
        controller.reset()
    assert controller.process is None  # closed: no player left behind
    with MLAgentsController("builtin", width=32, height=32, platform="EGL", no_graphics=True,
                            allow_blank_cameras=True) as allowed:  # fmt: skip
        frames = allowed.reset().frames()["CameraSensor"]
        assert frames.max() == 0  # black, as Unity's -nographics cameras are


def test_the_drop_in_keeps_mlagents_envs_no_graphics_but_warns():
    from unirender.mlagents import UnityEnvironment

    env = UnityEnvironment(file_name="builtin", no_graphics=True, timeout_wait=60)
    try:
        with pytest.warns(FlatCameraWarning, match="CameraSensor"):
            env.reset()
    finally:
        env.close()
