"""The fake player's hand-built bytes against the spec's literal examples and unirender's Unity-side encoders.

Two independent implementations of Unity's side agreeing byte for byte is what makes the fake a fair test peer.
"""

from __future__ import annotations

import msgpack

from fixtures.fake_player import fifo_frames, www_urlencode, wwwform
from unirender.protocol.fifo import FieldType, encode_message
from unirender.protocol.multipart import build_wwwform
from unirender.protocol.unity import encode_fifo_patch


def test_multipart_matches_spec_layout_and_protocol_builder():
    boundary = "A" * 40
    fields = [("metadata", b'{"a": 1}', False), ("image", b"\x00\x01", True), ("token", b"t", False)]
    content_type, parts = wwwform(fields, boundary.encode())
    body = b"".join(parts)
    assert content_type == 'multipart/form-data; boundary="' + boundary + '"'
    assert body == (
        b"\r\n--" + boundary.encode() + b"\r\n"
        b'Content-Type: text/plain; charset="utf-8"\r\nContent-disposition: form-data; name="metadata"\r\n\r\n'
        b'{"a": 1}'
        b"\r\n--" + boundary.encode() + b"\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b'Content-disposition: form-data; name="image"; filename="image.dat"\r\n\r\n'
        b"\x00\x01"
        b"\r\n--" + boundary.encode() + b"\r\n"
        b'Content-Type: text/plain; charset="utf-8"\r\nContent-disposition: form-data; name="token"\r\n\r\n'
        b"t"
        b"\r\n--" + boundary.encode() + b"--\r\n"
    )
    ours = build_wwwform([("metadata", '{"a": 1}'), ("image", b"\x00\x01"), ("token", "t")], boundary=boundary)
    assert ours == (content_type, body)


def test_urlencoded_branch_matches_protocol_builder():
    fields = [("metadata", b'{"x": [1, 2], "s": "a b/c"}', False), ("token", b"tok-1", False)]
    content_type, parts = wwwform(fields)
    assert content_type == "application/x-www-form-urlencoded"
    assert parts[0].startswith(b"metadata=%7b%22x%22%3a%20%5b1%2c%202%5d")  # lower-case hex, space as %20
    assert build_wwwform([("metadata", fields[0][1].decode()), ("token", "tok-1")]) == (content_type, parts[0])
    assert www_urlencode(b"\x7f\x1f~") == b"%7f%1f~"


def test_fifo_frames_match_protocol_framing():
    meta = msgpack.packb({"agents": [], "sequenceId": 0})
    images = [("image", b"rgb"), ("image_depth", b"dddd"), ("image-thirdParty-camera", b"tp")]
    ours = encode_message([(FieldType.METADATA, meta), (FieldType.RGB_IMAGE, b"rgb"),
                           (FieldType.DEPTH_IMAGE, b"dddd"), (FieldType.THIRD_PARTY_IMAGE, b"tp")])  # fmt: skip
    assert b"".join(fifo_frames(0x01, meta, images)) == ours
    assert ours.endswith(b"\xff\x00\x00\x00\x00") and ours[:5] == b"\x01" + len(meta).to_bytes(4, "big")
    patch = {"lastAction": "X", "agentId": 0}
    assert b"".join(fifo_frames(0x0B, msgpack.packb(patch), [])) == encode_fifo_patch(patch)
