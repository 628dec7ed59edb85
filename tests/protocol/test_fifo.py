"""FIFO framing against hand-written bytes from protocol.md 3.3-3.5, fragmentation properties, malformed input."""

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirender.protocol import (
    FrameTooLargeError,
    MetadataError,
    ProtocolError,
    TruncatedFrameError,
    UnknownFieldTypeError,
)
from unirender.protocol.fifo import (
    END_OF_MESSAGE,
    FieldType,
    FifoDecoder,
    decode_player_message,
    encode_frame,
    encode_message,
)
from unirender.protocol.pool import UNUSED_REFS
from unirender.protocol.state import ControllerProtocol, encode_json_action
from unirender.protocol.unity import decode_fifo_action, encode_fifo_emission, encode_fifo_patch

# A player message written by hand from protocol.md 3.3/3.4: METADATA frame (msgpack {"a": 1} = 81 a1 61 01),
# one RGB_IMAGE frame of 3 bytes, one THIRD_PARTY_FLOW frame of 2 bytes, END_OF_MESSAGE.
HAND_PLAYER_MESSAGE = bytes.fromhex(
    "01 00000004 81a16101"  # METADATA, big-endian length 4
    "04 00000003 010203"  # RGB_IMAGE
    "10 00000002 0909"  # THIRD_PARTY_FLOW
    "ff 00000000"  # END_OF_MESSAGE
)
# The first action 5.0.0 sends (protocol.md 3.5 probe): one ACTION frame + EOM.
HAND_ACTION_BODY = b'{"action": "Pass", "sequenceId": 1}'
HAND_ACTION_MESSAGE = (
    b"\x02" + len(HAND_ACTION_BODY).to_bytes(4, "big") + HAND_ACTION_BODY + b"\xff\x00\x00\x00\x00"
)


def test_hand_written_player_message_decodes():
    (msg,) = FifoDecoder().feed(HAND_PLAYER_MESSAGE)
    assert [t for t, _ in msg.frames] == [FieldType.METADATA, FieldType.RGB_IMAGE, FieldType.THIRD_PARTY_FLOW]
    metadata, files, is_patch = decode_player_message(msg)
    assert metadata == {"a": 1} and not is_patch
    assert bytes(files["image"][0]) == b"\x01\x02\x03"
    # Unity's real third-party flow field name (5.0.0 looked for "..._flows" and lost it)
    assert bytes(files["image_thirdParty_flow"][0]) == b"\x09\x09"


def test_action_message_is_byte_exact():
    protocol = ControllerProtocol()
    action = protocol.prepare_action({"action": "Pass"})
    assert encode_message([(FieldType.ACTION, encode_json_action(action))]) == HAND_ACTION_MESSAGE
    (msg,) = FifoDecoder().feed(HAND_ACTION_MESSAGE)
    assert decode_fifo_action(msg) == {"action": "Pass", "sequenceId": 1}


def test_encoders_match_hand_written_bytes():
    assert END_OF_MESSAGE == b"\xff\x00\x00\x00\x00"
    assert encode_frame(FieldType.DEPTH_IMAGE, b"xyz") == b"\x05\x00\x00\x00\x03xyz"
    emission = encode_fifo_emission(
        {"a": 1}, [("image", b"\x01\x02\x03"), ("image_thirdParty_flow", b"\x09\x09")]
    )
    assert emission == HAND_PLAYER_MESSAGE


def test_patch_message_and_int_map_keys():
    # strict_map_key=False: dict-valued actionReturn may have integer keys
    patch = {"agentId": 0, "actionReturn": {1: "one"}, "lastAction": "X"}
    (msg,) = FifoDecoder().feed(encode_fifo_patch(patch))
    assert msg.frames[0][0] is FieldType.METADATA_PATCH
    metadata, files, is_patch = decode_player_message(msg)
    assert is_patch and files == {} and metadata["actionReturn"] == {1: "one"}


def test_whole_bodies_are_zero_copy_views_of_the_input():
    data = encode_fifo_emission({"a": 1}, [("image", b"\x07" * 1000)])
    (msg,) = FifoDecoder().feed(data)
    body = msg.frames[1][1]
    assert body.readonly and body.obj is data  # a view into the caller's bytes, no copy


def test_split_bodies_are_filled_once_and_read_only():
    data = encode_fifo_emission({"a": 1}, [("image", bytes(range(256)) * 40)])
    decoder = FifoDecoder()
    out = []
    for i in range(0, len(data), 999):
        out += decoder.feed(bytearray(data[i : i + 999]))  # mutable input: must be copied
    (msg,) = out
    assert bytes(msg.frames[1][1]) == bytes(range(256)) * 40 and msg.frames[1][1].readonly


messages_strategy = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from([t for t in FieldType if t is not FieldType.END_OF_MESSAGE]),
            st.binary(max_size=300),
        ),
        max_size=6,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(messages=messages_strategy, cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_any_fragmentation_yields_the_same_messages(messages, cuts):
    stream = b"".join(encode_message(frames) for frames in messages)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = FifoDecoder()
    out = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        out += decoder.feed(stream[start:end])
    decoder.end_of_stream()
    assert [[(t, bytes(b)) for t, b in m.frames] for m in out] == [
        [(t, bytes(b)) for t, b in frames] for frames in messages
    ]
    assert not decoder.in_message


def test_unknown_field_type():
    with pytest.raises(UnknownFieldTypeError, match="0x42") as info:
        FifoDecoder().feed(b"\x42\x00\x00\x00\x00")
    assert info.value.field_type == 0x42


def test_oversized_frame_is_refused_before_allocating():
    with pytest.raises(FrameTooLargeError, match="RGB_IMAGE frame of 4294967295 bytes") as info:
        FifoDecoder().feed(b"\x04\xff\xff\xff\xff")
    assert info.value.limit == FifoDecoder().max_frame_size
    with pytest.raises(FrameTooLargeError):
        FifoDecoder(max_frame_size=10).feed(encode_frame(FieldType.METADATA, b"x" * 11))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x04\x00\x00", "inside a frame header"),
        (b"\x04\x00\x00\x00\x05abc", "RGB_IMAGE frame body: got 3 of 5"),
        (encode_frame(FieldType.METADATA, b"\x80"), "without END_OF_MESSAGE"),
    ],
)
def test_truncated_stream(data, match):
    decoder = FifoDecoder()
    assert decoder.feed(data) == []
    with pytest.raises(TruncatedFrameError, match=match):
        decoder.end_of_stream()


def test_end_of_message_with_a_body_is_an_error():
    with pytest.raises(ProtocolError, match="END_OF_MESSAGE frame must have an empty body"):
        FifoDecoder().feed(b"\xff\x00\x00\x00\x01")


def test_player_message_errors():
    def decode(frames):
        return decode_player_message(FifoDecoder().feed(encode_message(frames))[0])

    with pytest.raises(MetadataError, match="no frames"):
        decode([])
    with pytest.raises(MetadataError, match="must start with METADATA, got RGB_IMAGE"):
        decode([(FieldType.RGB_IMAGE, b"x")])
    with pytest.raises(MetadataError, match="not valid msgpack"):
        decode([(FieldType.METADATA, b"\xc1")])
    with pytest.raises(MetadataError, match="must be a msgpack map, got list"):
        decode([(FieldType.METADATA, msgpack.packb([1, 2]))])
    with pytest.raises(MetadataError, match="second metadata frame"):
        decode([(FieldType.METADATA, b"\x80"), (FieldType.METADATA, b"\x80")])
    with pytest.raises(UnknownFieldTypeError, match="ACTION is not valid in a message from the player"):
        decode([(FieldType.METADATA, b"\x80"), (FieldType.ACTION, b"{}")])


def test_player_side_action_reader():
    first, last = json.dumps({"action": "A"}).encode(), json.dumps({"action": "B"}).encode()
    (msg,) = FifoDecoder().feed(encode_message([(FieldType.ACTION, first), (FieldType.ACTION, last)]))
    assert decode_fifo_action(msg) == {"action": "B"}  # last ACTION wins (protocol.md 3.5)
    (msg,) = FifoDecoder().feed(encode_message([(FieldType.METADATA, b"\x80")]))
    with pytest.raises(UnknownFieldTypeError, match="only ACTION"):
        decode_fifo_action(msg)
    (msg,) = FifoDecoder().feed(encode_message([(FieldType.ACTION, b"[1]")]))
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        decode_fifo_action(msg)


def _readv(buffers: list[memoryview], available: bytes) -> int:
    """What ``os.readv`` does: fill the buffers in order from what the pipe holds; the byte count."""
    n = 0
    for buffer in buffers:
        take = min(len(buffer), len(available) - n)
        buffer[:take] = available[n : n + take]
        n += take
        if n == len(available):
            break
    return n


@settings(max_examples=60, deadline=None)
@given(
    messages=messages_strategy,
    reads=st.lists(st.integers(min_value=1, max_value=70000), min_size=1, max_size=20),
)
def test_read_into_buffers_yields_the_same_messages(messages, reads):
    # the os.readv(fd, decoder.get_buffers()) pattern, with short reads of arbitrary sizes
    stream = b"".join(encode_message(frames) for frames in messages)
    decoder = FifoDecoder()
    out, pos, i = [], 0, 0
    while pos < len(stream):
        n = _readv(decoder.get_buffers(), stream[pos : pos + reads[i % len(reads)]])
        pos += n
        i += 1
        out += decoder.buffers_updated(n)
    decoder.end_of_stream()
    assert [[(t, bytes(b)) for t, b in m.frames] for m in out] == [
        [(t, bytes(b)) for t, b in frames] for frames in messages
    ]


def test_large_bodies_are_read_in_place():
    image = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_fifo_emission({"a": 1}, [("image", image)])
    decoder = FifoDecoder()
    out, pos, targets = [], 0, []
    while pos < len(stream):
        buffers = decoder.get_buffers()
        targets += [b.obj for b in buffers]
        n = _readv(buffers, stream[pos:])
        pos += n
        out += decoder.buffers_updated(n)
    (msg,) = out
    body = msg.frames[1][1]
    assert bytes(body) == image and body.readonly
    assert body.obj in [t for t in targets if t is not targets[0]]  # the kernel would have written into it


def _read_in_place(decoder: FifoDecoder, stream: bytes) -> list:
    out, pos = [], 0
    while pos < len(stream):
        n = _readv(decoder.get_buffers(), stream[pos:])
        pos += n
        out += decoder.buffers_updated(n)
    return out


@pytest.mark.skipif(UNUSED_REFS < 0, reason="no recycling on free-threaded builds")
def test_body_buffers_are_recycled_only_once_nothing_holds_them():
    import weakref

    import numpy as np

    decoder = FifoDecoder()
    size = 300_000

    def message(value: int):
        stream = encode_fifo_emission({"a": value}, [("image", bytes([value]) * size)])
        (msg,) = _read_in_place(decoder, stream)
        return msg

    first = message(1)
    frame = np.frombuffer(first.frames[1][1], np.uint8)  # a user keeps a frame of step 1 (a view)
    kept_view = message(2).frames[1][1]  # ... and a raw view of step 2
    del first
    recycled = None
    for value in range(3, 9):
        msg = message(value)
        body = msg.frames[1][1]
        assert bytes(body[:3]) == bytes([value]) * 3
        if recycled is None:
            recycled = weakref.ref(body.obj)  # a weak reference does not hold the buffer
        # steps 3-8 all reuse one buffer: no fresh allocation (and its page faults) per step
        assert body.obj is recycled()
        del msg, body
    assert (frame == 1).all() and bytes(kept_view) == bytes([2]) * size  # held buffers were never reused
