"""``currentTime`` is the reference player's simulated clock: a function of the actions since the scene was loaded,
never of the wall clock, so two runs of one job (or a resumed one) write the same metadata bytes."""

from __future__ import annotations

import time

import msgpack

from unirender.player.session import FIXED_DELTA_TIME, TIMED_ACTIONS, PlayerSession

POSE = {"action": "TeleportFull", "position": {"x": 0.0, "y": 0.9, "z": 0.0}, "rotation": {"y": 90},
        "horizon": 0, "standing": True}


def _clock(session: PlayerSession, action: dict) -> float:
    return session.step(action, patches=False).metadata["agents"][0]["currentTime"]


def test_each_action_that_lets_the_world_run_takes_one_physics_step():
    session = PlayerSession(None, 32, 24, scene="FloorPlan1_physics")  # metadata only: no renderer needed
    assert session.hello().metadata["agents"][0]["currentTime"] == 0.0
    times = [_clock(session, {"action": name}) for name in ("MoveAhead", "RotateRight", "LookDown", "Pass")]
    assert times == [round(n * FIXED_DELTA_TIME, 4) for n in (1, 2, 3, 4)]
    # absolute state, queries and configuration take no simulated time
    for action in (POSE, {"action": "GetReachablePositions"}, {"action": "Initialize", "gridSize": 0.25},
                   {"action": "AddThirdPartyCamera", "position": {"x": 1, "y": 2, "z": 1},
                    "rotation": {"x": 30, "y": 0, "z": 0}}):
        assert _clock(session, action) == times[-1]
    assert _clock(session, {"action": "MoveAhead", "moveMagnitude": 100.0}) == round(5 * FIXED_DELTA_TIME, 4)  # a
    # blocked move still took its step; a scene load starts the clock again
    assert _clock(session, {"action": "Reset", "sceneName": "FloorPlan1_physics"}) == 0.0
    assert _clock(session, {"action": "RotateLeft"}) == FIXED_DELTA_TIME
    assert {"MoveAhead", "Pass"} <= TIMED_ACTIONS and "TeleportFull" not in TIMED_ACTIONS


def test_the_metadata_is_a_function_of_the_actions_not_of_when_they_ran():
    actions = [{"action": "MoveAhead"}, {"action": "RotateRight", "degrees": 30}, POSE, {"action": "LookUp"}]
    runs = []
    for pause in (0.0, 0.05):
        session = PlayerSession(None, 32, 24, scene="FloorPlan1_physics")
        session.hello()
        frames = []
        for action in actions:
            time.sleep(pause)
            frames.append(msgpack.packb(session.step(action, patches=False).metadata["agents"][0]))
        runs.append(frames)
    assert runs[0] == runs[1]


def test_a_pose_reached_by_teleport_has_the_same_clock_however_it_was_reached():
    """What a resumed pose episode does: teleport to the pose before the first open chunk, then on."""
    straight = PlayerSession(None, 32, 24, scene="FloorPlan1_physics")
    for x in (0.0, 0.25, 0.5):
        last = _clock(straight, {**POSE, "position": {"x": x, "y": 0.9, "z": 0.0}})
    resumed = PlayerSession(None, 32, 24, scene="FloorPlan1_physics")
    assert _clock(resumed, {**POSE, "position": {"x": 0.5, "y": 0.9, "z": 0.0}}) == last == 0.0
