"""The webgl family through the port's registry: a local backend's session launched by
``cluster.simulators.launch`` from controller kwargs with ``protocol: webgl``, stepped by declared action names,
its camera read by the family's reader."""

from __future__ import annotations

import numpy as np

from fixtures.webgl import ACTIONS, GAME
from unirender.cluster.local import LocalBackend
from unirender.cluster.simulators import camera_reader, flat_first_frame


def test_a_local_session_of_the_webgl_family(browser_binary, tmp_path):
    with LocalBackend() as backend:
        session = backend.create_session({"protocol": "webgl", "executable": str(GAME), "width": 120,
                                          "height": 100, "actions": ACTIONS, "log_dir": str(tmp_path)})
        try:
            assert session.last_event.messages[-1]["frame"] == 1 and session.family == "webgl"
            moved = session.step("right")
            assert moved.metadata["position"][0] == 43
            frames = camera_reader("webgl")(moved)
            assert frames["frame"].shape == (100, 120, 3) and np.array_equal(frames["frame"], moved.frame)
            assert flat_first_frame(session) == []
            assert session.describe().actions.names[:3] == ("noop", "left", "right")
            assert session.reset().messages[-1]["position"][0] == 40
        finally:
            session.stop()
