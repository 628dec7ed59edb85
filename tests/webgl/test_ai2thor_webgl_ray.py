"""An AI2-THOR WebGL build on the Ray placement: a session launched in a Ray actor through the AI2-THOR family's
WebGL launcher (cluster.simulators.WEBGL_LAUNCHERS), its Events crossing the object store with the family's codec,
on the contract-exact fake build."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.webgl import ai2thor_webgl_build
from unirender.webgl.browser import group_members

pytest.importorskip("ray")  # the module-scoped ray_backend fixture: tests/webgl/conftest.py

pytestmark = pytest.mark.ray


def test_an_ai2thor_webgl_session_in_a_ray_actor(browser_binary, ray_backend, tmp_path):
    from unirender import Event

    build = ai2thor_webgl_build(tmp_path / "thor")
    session = ray_backend.create_session({"executable": str(build), "width": 96, "height": 64,
                                          "scene": "FloorPlan10", "log_dir": str(tmp_path)})
    try:
        first = session.last_event
        assert isinstance(first, Event) and first.metadata["sceneName"] == "FloorPlan10"
        moved = session.step({"action": "MoveAhead"})
        assert moved.metadata["agent"]["position"]["z"] == 0.25 and moved.frame.shape == (64, 96, 3)
        assert (moved.frame[:4, :4] == [255, 0, 0]).all() and not np.array_equal(moved.frame, first.frame)
        browser = session.info()["pid"]
        assert group_members(browser)
    finally:
        session.stop()
    assert group_members(browser) == []
