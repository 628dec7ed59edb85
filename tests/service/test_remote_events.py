"""The client's ML-Agents events (core ``MLAgentsEvent``s built from the service's arrays,
``client.mlagents.event_from_document``) read as the game's MLAgentsEvent they were made from:
a real game's events (the reference player, local backend) through the service's event document, and a
document with two behaviors and a terminal agent."""

from __future__ import annotations

import numpy as np

from unirender.client.mlagents import event_from_document
from unirender.cluster import create_backend
from unirender.jobs.mlagents_episodes import behavior_views
from unirender.protocol.mlagents import DecisionSteps, MLAgentsEvent, TerminalSteps
from unirender.service.mlagents_sessions import mlagents_document
from unirender.spec.mlagents import RecordSpec

BEHAVIOR = "ReachTarget?team=0"


def assert_reads_the_same(remote: MLAgentsEvent, event) -> None:
    assert remote.behavior_names == event.behavior_names
    for name in event.behavior_names:
        deciding = set(event.decision_steps[name].agent_id.tolist())
        for theirs, mine in zip(event.steps(name), remote.steps(name), strict=True):
            assert mine.agent_id.tolist() == theirs.agent_id.tolist()
            assert np.allclose(mine.reward, theirs.reward)
            assert mine.agent_id_to_index == theirs.agent_id_to_index
            assert len(mine.obs) == len(theirs.obs)
            # One record per agent: an agent in both steps carries its decision step's observations.
            same = [i for i, a in enumerate(theirs.agent_id.tolist()) if theirs is event.decision_steps[name]
                    or a not in deciding]
            for a, b in zip(mine.obs, theirs.obs, strict=True):
                assert a.shape == b.shape and np.allclose(a[same], b[same], atol=1e-6)
        decision = event.decision_steps[name]
        for sensor, frames in event.frames(name).items():
            assert np.array_equal(remote.frames(name)[sensor], frames)
            for agent in decision.agent_id:
                assert np.array_equal(remote.decision_steps[name].frame(agent, sensor), decision.frame(agent, sensor))
        assert remote.terminal_steps[name].interrupted.tolist() == event.terminal_steps[name].interrupted.tolist()


def test_a_game_s_events_read_the_same_through_the_document():
    kwargs = {"protocol": "mlagents", "executable": "builtin", "platform": "EGL", "width": 16, "height": 16,
              "time_scale": 100, "env": {"UNIRENDER_MLAGENTS_AGENTS": "2", "UNIRENDER_MLAGENTS_MAX_STEP": "3"}}
    with create_backend("local", max_sessions=1) as backend:
        session = backend.create_session(kwargs)
        try:
            description = session.describe()
            # The builtin game is a package 4.x one: its cameras are CHW, and the description says so, so the
            # remote obs are laid out as the local ones (they used to be HWC: the layout was not described).
            assert [o.layout for o in description.observations] == ["CHW", None]
            specs, record = behavior_views(description), RecordSpec()
            event, ended = session.last_event, 0
            for step in range(6):  # agents end at max_step 3: terminal steps with interrupted flags
                doc = mlagents_document(event, step, specs, record)
                remote = event_from_document(doc, description.to_dict())
                assert_reads_the_same(remote, event)
                ended += len(event.terminal_steps[BEHAVIOR])
                event = session.step({})
            assert ended, "no agent reached max_step: the terminal steps went untested"
            no_description = event_from_document(mlagents_document(event, 6, specs, record))
            assert no_description.decision_steps[BEHAVIOR].sensor_names == ["CameraSensor", "VectorSensor_size8"]
        finally:
            session.stop()


def test_two_behaviors_and_an_agent_that_ended():
    image = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
    doc = {
        "metadata": {"step": 4, "behaviors": {
            "A": {"agents": [
                {"id": 7, "decision": True, "terminal": True, "reward": 0.5, "terminal_reward": 1.5,
                 "interrupted": True, "observations": {"v": [1.0, 2.0]}},
                {"id": 9, "decision": False, "terminal": True, "reward": -1.0, "terminal_reward": -1.0,
                 "interrupted": False, "observations": {"v": [3.0, 4.0]}},
            ]},
            "B": {"agents": [{"id": 1, "decision": True, "terminal": False, "reward": 0.25}]},
        }},
        "frames": {"A.cam.0": image, "A.cam.1": image + 1, "B.cam.0": image + 2},
    }  # fmt: skip
    event = event_from_document(doc)
    assert event.behavior_names == ["A", "B"] and event.step == 4
    decision, terminal = event.steps("A")
    assert decision.agent_id.tolist() == [7] and decision.reward.tolist() == [0.5]
    assert terminal.agent_id.tolist() == [7, 9] and terminal.reward.tolist() == [1.5, -1.0]
    assert terminal.interrupted.tolist() == [True, False]
    assert np.array_equal(decision.frames["cam"], image[None]) and np.array_equal(terminal.frame(9, "cam"), image + 1)
    assert decision.sensor_names == ["cam", "v"] and terminal.obs[1].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert np.array_equal(event.frames("B")["cam"], (image + 2)[None]) and len(event.terminal_steps["B"]) == 0
    assert event.terminal_steps["B"].frames["cam"].shape == (0, 2, 2, 3)


def test_a_described_chw_camera_reads_chw():
    image = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
    doc = {"metadata": {"step": 0, "behaviors": {"A": {"agents": [
        {"id": 3, "decision": True, "terminal": False, "reward": 0.0, "observations": {"v": [1.0, 2.0]}}]}}},
        "frames": {"cam.0": image}}  # fmt: skip
    description = {"observations": [{"key": "A/v", "shape": [2], "behavior": "A"},
                                    {"key": "A/cam", "shape": [2, 2, 3], "behavior": "A", "layout": "CHW"}]}
    decision = event_from_document(doc, description).decision_steps["A"]
    assert decision.sensor_names == ["v", "cam"]  # the game's order, not the document's
    assert decision.obs[1].shape == (1, 3, 2, 2) and np.allclose(decision.obs[1][0], image.transpose(2, 0, 1) / 255)
    assert decision.frames["cam"].shape == (1, 2, 2, 3)  # frames stay HWC, as MLAgentsEvent's do


def test_the_client_builds_the_core_event_types():
    image = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
    doc = {"metadata": {"step": 2, "behaviors": {"A": {"agents": [
        {"id": 3, "decision": True, "terminal": False, "reward": 0.5, "observations": {"v": [1.0, 2.0]}},
        {"id": 4, "decision": False, "terminal": True, "reward": 1.0, "interrupted": True,
         "observations": {"v": [3.0, 4.0]}}]}}},
        "frames": {"cam.0": image, "cam.1": image + 1}}  # fmt: skip
    event = event_from_document(doc)
    assert type(event) is MLAgentsEvent and event.step == 2 and event.metadata == doc["metadata"]
    decision, terminal = event.steps()
    assert type(decision) is DecisionSteps and type(terminal) is TerminalSteps
    assert decision.agent_id.dtype == np.int32 and decision.reward.dtype == np.float32
    # What the document does not carry: no groups (zeros), no masks, no stats or side-channel records.
    assert decision.group_id.tolist() == [0] and decision.group_reward.tolist() == [0.0]
    assert decision.action_mask is None and event.stats == {} and event.side_channel_messages == []
    assert terminal.interrupted.tolist() == [True] and terminal.obs[1].tolist() == [[3.0, 4.0]]
    assert decision.obs[0].dtype == np.float32 and np.allclose(decision.obs[0][0], image / 255)
    assert np.array_equal(event.frames()["cam"], image[None]) and len(event.terminal_steps["A"]) == 1


def test_the_remote_event_s_old_names_are_deprecated_aliases_of_the_core_classes():
    import pytest

    import unirender.client
    import unirender.remote_events as remote_events

    for old, core in [("RemoteMLAgentsEvent", MLAgentsEvent), ("RemoteDecisionSteps", DecisionSteps),
                      ("RemoteTerminalSteps", TerminalSteps)]:  # fmt: skip
        with pytest.warns(DeprecationWarning, match=old):
            assert getattr(remote_events, old) is core
    with pytest.warns(DeprecationWarning, match="RemoteSteps"):
        steps_class = remote_events.RemoteSteps
    event = event_from_document({"metadata": {"step": 0, "behaviors": {"A": {"agents": [
        {"id": 1, "decision": True, "terminal": False, "reward": 0.0}]}}}})  # fmt: skip
    assert isinstance(event.decision_steps["A"], steps_class) and isinstance(event.terminal_steps["A"], steps_class)
    with pytest.warns(DeprecationWarning):
        assert isinstance(event, unirender.client.RemoteMLAgentsEvent)
    with pytest.raises(AttributeError):
        remote_events.Nothing  # noqa: B018
