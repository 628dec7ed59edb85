"""Fixtures of the Gymnasium tests: a backend for a module, the four reference views."""

import numpy as np
import pytest
from gym_helpers import PLAYER, yaw

from unirender.cluster import LocalBackend


@pytest.fixture(scope="module")
def backend():
    with LocalBackend(max_sessions=8) as b:
        yield b
    assert b.sessions() == []


@pytest.fixture(scope="module")
def views(backend):
    """The rgb frame at each yaw 0/90/180/270 of the default scene: observations are identified by lookup."""
    session = backend.create_session(PLAYER)
    try:
        frames = {0: np.asarray(session.reset().frame).copy()}
        for _ in range(3):
            event = session.step("RotateRight")
            frames[yaw(event)] = np.asarray(event.frame).copy()
    finally:
        session.stop()
    assert len({f.tobytes() for f in frames.values()}) == 4  # the four views differ
    return frames
