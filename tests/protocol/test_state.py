"""Sequence ids (protocol.md 5.5), METADATA_PATCH merging (3.6), action encoding (2.7/3.5)."""

import numpy as np
import pytest

from unirender.protocol import ControllerProtocol, MetadataError, SequenceIdMismatchError, encode_json_action


def full(sequence_id, **agent):
    return {
        "agents": [{"lastAction": "Init", "actionReturn": None, **agent}],
        "activeAgentId": 0,
        "sequenceId": sequence_id,
        "thirdPartyCameras": None,
    }


def test_prepare_action_assigns_sequence_ids_and_copies():
    protocol = ControllerProtocol()
    original = {"action": "RotateRight", "rotation": 90, "nested": {"k": [1]}}
    sent = protocol.prepare_action(original)
    assert sent == {"action": "RotateRight", "rotation": {"y": 90}, "nested": {"k": [1]}, "sequenceId": 1}
    sent["nested"]["k"].append(2)
    assert original == {"action": "RotateRight", "rotation": 90, "nested": {"k": [1]}}  # deep copy
    assert protocol.prepare_action({"action": "Pass", "rotation": {"y": 5}})["rotation"] == {"y": 5}
    assert protocol.sequence_id == 2
    # Reset carries an explicit 0: adopted, then counting restarts from it
    assert protocol.prepare_action({"action": "Reset", "sequenceId": 0})["sequenceId"] == 0
    assert protocol.prepare_action({"action": "Initialize"})["sequenceId"] == 1
    with pytest.raises(TypeError, match="must be a dict"):
        protocol.prepare_action("Pass")


def test_encode_json_action_is_ascii_and_numpy_aware():
    action = {
        "action": "Teleport",
        "rotation": np.float32(90),
        "position": np.array([1, 2]),
        "n": np.int64(3),
    }
    assert encode_json_action(action) == (
        b'{"action": "Teleport", "rotation": 90.0, "position": [1, 2], "n": 3}'
    )
    encoded = encode_json_action({"name": "café"})
    assert encoded == b'{"name": "caf\\u00e9"}' and encoded.isascii()
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_json_action({"x": object()})


def test_accept_checks_sequence_id():
    protocol = ControllerProtocol()
    assert protocol.accept(full(0), {}).metadata["sequenceId"] == 0  # hello event
    protocol.prepare_action({"action": "Pass"})
    with pytest.raises(SequenceIdMismatchError, match="player echoed 0, last action sent had 1") as info:
        protocol.accept(full(0), {})
    assert (info.value.expected, info.value.got) == (1, 0)
    assert protocol.accept(full(1), {}).patched is False


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ([], "must be a JSON object / msgpack map, got list"),
        ({"sequenceId": 0}, "non-empty 'agents' list"),
        ({"agents": [], "sequenceId": 0}, "non-empty 'agents' list"),
        ({"agents": [1], "sequenceId": 0}, r"agents\[0\] must be an object"),
        ({"agents": [{}]}, "no 'sequenceId'"),
    ],
)
def test_accept_rejects_bad_metadata(metadata, match):
    with pytest.raises(MetadataError, match=match):
        ControllerProtocol().accept(metadata, {})


def test_patch_merges_into_previous_and_reuses_images():
    protocol = ControllerProtocol()
    files = {"image": [memoryview(b"pixels")]}
    previous = full(0, lastAction="Init", sceneName="S")
    del previous["thirdPartyCameras"]  # 5.0.0 raised KeyError here
    protocol.accept(previous, files)
    protocol.prepare_action({"action": "GetReachablePositions"})
    patched = protocol.accept_patch(
        {"agentId": 0, "lastAction": "GetReachablePositions", "actionReturn": [1], "lastActionSuccess": True}
    )
    agent = patched.metadata["agents"][0]
    assert agent == {
        "lastAction": "GetReachablePositions",
        "actionReturn": [1],
        "lastActionSuccess": True,
        "sceneName": "S",
        "agentId": 0,
    }
    assert patched.metadata["sequenceId"] == 1 and patched.metadata["activeAgentId"] == 0
    assert patched.metadata["thirdPartyCameras"] is None
    assert patched.files is files and patched.patched
    assert previous["agents"][0]["lastAction"] == "Init"  # previous metadata untouched
    # a second patch merges into the merged result
    second = protocol.accept_patch({"agentId": 0, "errorMessage": "e"})
    assert (
        second.metadata["agents"][0]["actionReturn"] == [1]
        and second.metadata["agents"][0]["errorMessage"] == "e"
    )


def test_patch_targets_the_right_agent():
    protocol = ControllerProtocol()
    metadata = {"agents": [{"n": 0}, {"n": 1}], "activeAgentId": 0, "sequenceId": 0, "thirdPartyCameras": [1]}
    protocol.accept(metadata, {})
    patched = protocol.accept_patch({"agentId": 1, "n": 11})
    assert [a["n"] for a in patched.metadata["agents"]] == [0, 11]
    assert patched.metadata["activeAgentId"] == 1 and patched.metadata["thirdPartyCameras"] == [1]


def test_patch_errors():
    protocol = ControllerProtocol()
    with pytest.raises(MetadataError, match="before any full METADATA"):
        protocol.accept_patch({"agentId": 0})
    protocol.accept(full(0), {})
    with pytest.raises(MetadataError, match="agentId 3 is not one of the 1 agent"):
        protocol.accept_patch({"agentId": 3})
    with pytest.raises(MetadataError, match="must be a map"):
        protocol.accept_patch([1])
