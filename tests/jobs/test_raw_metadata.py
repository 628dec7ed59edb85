"""Jobs store the player's metadata bytes as received (no decode/re-encode round trip) when no key selection
applies, and a dataset reads back exactly what the player sent, for both transports."""

from __future__ import annotations

import json
import struct

import msgpack
import numpy as np
import pytest
import zstandard

from unirender.jobs import load_dataset, render
from unirender.jobs.chunks import PackedMap, decode_records, encode_records
from unirender.jobs.write_behind import frame_metadata
from unirender.protocol import metadata as metadata_module
from unirender.protocol.event import Event
from unirender.protocol.metadata import JSON, RawMetadata, one_agent_document

AGENT = {
    "agent": {"position": {"x": 1.5, "y": 0.9, "z": -2.25}, "rotation": {"x": 0, "y": 90, "z": 0}},
    "objects": [{"objectId": "Mug|1", "visible": True, "distance": 1.25, "receptacleObjectIds": None}],
    "lastActionSuccess": True,
    "errorMessage": "",
    "screenWidth": 4,
    "screenHeight": 4,
    "unicode": "Küche ✓",
}
FRAMES = {"frame": np.zeros((4, 4, 3), np.uint8)}


def records(metadata) -> list[dict]:
    return [
        {"index": i, "location": f"frames/u/{i:04d}", "files": {"rgb": f"{i:06d}.rgb"}, "metadata": metadata}
        for i in range(3)
    ]


def test_a_packed_map_is_spliced_into_the_same_chunk_bytes_as_its_dict():
    plain = encode_records(records(AGENT))
    spliced = encode_records(records(PackedMap(msgpack.packb(AGENT, use_bin_type=True))))
    assert spliced == plain
    assert decode_records(spliced) == records(AGENT)


def test_a_packed_map_keeps_the_players_own_encoding():
    # A player may pack narrower than msgpack-python would (float32, fixed-width ints): stored as sent.
    float32 = b"\x81\xa1x\xca" + struct.pack(">f", 0.5)
    chunk = encode_records([{"index": 0, "metadata": PackedMap(float32)}])
    assert float32 in zstandard.ZstdDecompressor().decompress(chunk)
    assert decode_records(chunk) == [{"index": 0, "metadata": {"x": 0.5}}]


def test_frame_metadata_forwards_msgpack_without_decoding():
    event = Event.from_frames(one_agent_document(msgpack.packb(AGENT)), FRAMES)
    stored = frame_metadata(event, "all")
    assert isinstance(stored, PackedMap) and stored.unpack() == AGENT
    assert not event.metadata_document.decoded
    assert event.peek_metadata("lastActionSuccess") is True and not event.metadata_document.decoded


def test_frame_metadata_converts_a_json_document_once():
    text = json.dumps({"agents": [AGENT], "sequenceId": 3, "activeAgentId": 0})
    event = Event.from_frames(RawMetadata(text, JSON), FRAMES)
    stored = frame_metadata(event, "all")
    assert isinstance(stored, PackedMap) and stored.unpack() == json.loads(text)["agents"][0]
    assert not event.metadata_document.decoded


def test_frame_metadata_selects_keys_from_the_decoded_dict():
    event = Event.from_frames(one_agent_document(msgpack.packb(AGENT)), FRAMES)
    assert frame_metadata(event, ["agent.position"]) == {"agent": {"position": AGENT["agent"]["position"]}}
    assert frame_metadata(event, "none") == {}
    # Once the dict was read (and might have been changed), it is what gets stored.
    event.metadata["added"] = 1
    assert frame_metadata(event, "all")["added"] == 1


@pytest.mark.parametrize("transport", ["fifo", "wsgi"])
def test_a_job_does_not_decode_every_frames_metadata(tmp_path, monkeypatch, transport):
    decodes = {"n": 0}
    for name in ("unpack_metadata", "loads_json_metadata"):
        original = getattr(metadata_module, name)

        def counting(*args, _original=original, **kwargs):
            decodes["n"] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(metadata_module, name, counting)
    count = 20
    job = {
        "name": "raw",
        "environment": {
            "executable": "builtin",
            "platform": "EGL",
            "width": 32,
            "height": 32,
            "transport": transport,
        },
        "render": {"modalities": ["rgb"]},
        "episodes": [
            {"scene": "FloorPlan1_physics", "generator": {"kind": "random", "count": count, "seed": 1}}
        ],
        "output": {"directory": str(tmp_path / "out"), "frames_per_shard": 5},
        "workers": 1,
    }
    assert render(job).frames == count
    # A few fixed decodes (the controller's start and scene load, the manifest's first frame, reachable
    # positions); the frames themselves are stored as the player sent them (before: one full decode per frame).
    assert decodes["n"] < count // 2, decodes
    dataset = load_dataset(tmp_path / "out")
    metadata = [r["metadata"] for r in dataset.records]
    assert len(metadata) == count
    assert all(m["lastActionSuccess"] is True and len(m["objects"]) > 0 for m in metadata)
    positions = {json.dumps(m["agent"]["position"], sort_keys=True) for m in metadata}
    assert len(positions) > 1  # each frame's own metadata, not one copied around
    assert dataset.event(count - 1).metadata == metadata[-1]
