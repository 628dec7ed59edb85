"""Helpers of the Gymnasium tests: a small reference player (EGL, 64x64), task callables, view lookup."""

import numpy as np

PLAYER = {"executable": "builtin", "width": 64, "height": 64, "platform": "EGL", "server": "fifo"}
ALL_MODALITIES = ["rgb", "depth", "instance_segmentation", "semantic_segmentation", "normals", "flow"]


def yaw(event) -> int:
    return round(event.metadata["agent"]["rotation"]["y"]) % 360


def yaw_reward(previous, action, event) -> float:
    """Reward = the new yaw in quarter turns: every step's reward says where the agent looks."""
    return yaw(event) / 90


def half_turn(event) -> bool:
    return yaw(event) == 180


def view_of(frame, views) -> int:
    for angle, view in views.items():
        if np.array_equal(frame, view):
            return angle
    raise AssertionError("the observation matches no known view")
