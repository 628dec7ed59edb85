"""The webgl family on the Ray placement: a session launched in a Ray actor through the same registry line
(cluster.simulators), its WebGLEvents (numpy frame, emitted JSON) crossing the object store as they are."""

from __future__ import annotations

import pytest

from fixtures.webgl import ACTIONS, GAME
from unirender.webgl.browser import group_members

pytest.importorskip("ray")  # the module-scoped ray_backend fixture: tests/webgl/conftest.py

pytestmark = pytest.mark.ray


def test_a_webgl_session_in_a_ray_actor(browser_binary, ray_backend, tmp_path):
    session = ray_backend.create_session({"protocol": "webgl", "executable": str(GAME), "width": 120,
                                          "height": 100, "actions": ACTIONS, "log_dir": str(tmp_path)})
    try:
        assert session.last_event.frame.shape == (100, 120, 3)
        moved = session.step("right")
        assert moved.metadata["position"][0] == 43 and moved.reward == 0.0
        browser = session.info()["pid"]
        assert group_members(browser)
    finally:
        session.stop()
    assert group_members(browser) == []
