"""The service's body formats round-trip exactly (property-based), and bad bodies raise WireError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from unirender import http_format
from unirender.service.http_format import negotiate

DTYPES = st.sampled_from([np.uint8, np.float32, np.uint32, np.int16])
SHAPES = st.sampled_from([(5, 7), (4, 6, 3), (3, 5, 4), (2, 4, 6, 3), (1, 1)])


@st.composite
def frame(draw):
    a = draw(arrays(draw(DTYPES), draw(SHAPES)))
    if a.ndim == 3 and a.shape[2] == 4 and draw(st.booleans()):
        a = a[..., :3]  # RGB view of an RGBA buffer, as the instance colours are
    if a.ndim >= 2 and draw(st.booleans()):
        a = a[::-1]  # top-down view of a bottom-up buffer, as player frames are
    if draw(st.booleans()):
        a = a[..., ::-1] if a.ndim == 3 else a  # a layout that needs a copy (reversed channels)
    return a


@settings(max_examples=60, deadline=None)
@given(frames=st.dictionaries(st.sampled_from(["frame", "depth_frame", "x"]), frame(), max_size=3),
       fmt=st.sampled_from(http_format.FORMATS), many=st.booleans())
def test_documents_round_trip_exactly(frames, fmt, many):
    doc = {"metadata": {"agent": {"position": {"x": 1.5}}, "frames": "metadata keys are not frames"},
           "frames": frames}
    body_doc = {"events": [doc, doc]} if many else doc
    content_type, body = http_format.encode_document(body_doc, fmt)
    if isinstance(body, list):
        body = b"".join(body)
    out = http_format.decode_document(content_type, body)
    for event in out["events"] if many else [out]:
        assert event["metadata"] == doc["metadata"]
        assert set(event["frames"]) == set(frames)
        for name, array in frames.items():
            got = event["frames"][name]
            assert got.dtype == array.dtype and got.shape == array.shape
            assert np.array_equal(got, array, equal_nan=array.dtype.kind == "f")


@pytest.mark.parametrize(("content_type", "body"), [
    ("application/x-msgpack", b"\xc1"),
    ("application/json", b"{"),
    ("multipart/mixed", b"--x\r\n"),
    ('multipart/mixed; boundary="b"', b"--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n"),
    ("text/html", b"<html>"),
])
def test_bad_response_bodies_raise_wire_error(content_type, body):
    with pytest.raises(http_format.WireError):
        http_format.decode_document(content_type, body)


def test_request_bodies():
    assert http_format.decode_request_body(None, b'{"a": 1}') == {"a": 1}
    assert http_format.decode_request_body("application/x-msgpack", b"\x81\xa1a\x01") == {"a": 1}
    assert http_format.decode_request_body("application/json", b"") == {}
    with pytest.raises(http_format.UnsupportedMediaType):
        http_format.decode_request_body("text/plain", b"x")


def test_negotiation():
    assert negotiate(None) == http_format.JSON
    assert negotiate("application/x-msgpack, application/json;q=0.5") == http_format.MSGPACK
    assert negotiate("multipart/*") == http_format.MULTIPART
    assert negotiate("image/png") is None


@pytest.mark.parametrize("value", [
    "application/json", 'multipart/mixed; boundary="a1b2"', "multipart/mixed; boundary=a1b2",
    'attachment; name="f0.png"; filename="f0.png"', "Application/X-Msgpack ; Charset=utf-8", "", "text/json",
])
def test_options_header_parser_agrees_with_werkzeug(value):
    """The client's stdlib parser gives what the service's werkzeug parser gives (up to case)."""
    from werkzeug.http import parse_options_header

    mime, options = parse_options_header(value)
    assert http_format.parse_options_header(value) == (mime.lower(), {k.lower(): v for k, v in options.items()})


def test_service_http_format_is_the_shared_module():
    from unirender.service import http_format as service_http_format

    assert service_http_format.decode_document is http_format.decode_document
    assert service_http_format.WireError is http_format.WireError


@settings(max_examples=40, deadline=None)
@given(frames=st.dictionaries(st.sampled_from(["frame", "depth_frame"]), frame(), max_size=2),
       many=st.booleans(), packed=st.sampled_from(["dict", "msgpack", "json"]), step=st.booleans(),
       view=st.booleans())
def test_lazy_msgpack_documents_decode_metadata_on_first_read(frames, many, packed, step, view):
    """The client's path: each event's metadata stays bytes until read; forwarded (``PackedMsgpack``, or a WSGI
    player's JSON document as ``metadata_json``) or packed here, it reads back the same. With the ``step`` keys
    the service read, the client does not even scan it."""
    import json

    import msgpack

    from unirender.client import _event_from_document
    from unirender.protocol.metadata import RawMetadata

    meta = {"lastActionSuccess": True, "screenWidth": 7, "screenHeight": 5, "agent": {"position": {"x": 1.5}}, "objects": [{"a": 1}],
            "frames": "metadata keys are not frames"}
    if packed == "json":  # the player's whole document (a one-agent scene), maybe a view into its request body
        text = json.dumps({"agents": [meta], "sequenceId": 4}).encode()
        doc = {http_format.METADATA_JSON: memoryview(bytearray(text)) if view else text, "frames": frames}
    else:
        doc = {"metadata": http_format.PackedMsgpack(msgpack.packb(meta)) if packed == "msgpack" else meta, "frames": frames}
    if step and packed != "dict":
        doc[http_format.STEP] = {"lastActionSuccess": True, "screenWidth": 7, "screenHeight": 5}
    failed = {"session": "s2", "status": 502, "error": {"code": "player_crashed", "message": "gone"}}
    content_type, body = http_format.encode_document({"events": [doc, failed, doc]} if many else doc,
                                                     http_format.MSGPACK)  # fmt: skip
    out = http_format.decode_document(content_type, body, lazy_metadata=True)
    if many:  # a batch's answer (one pass over the body): a failed step's item as it was sent
        assert out["events"].pop(1) == failed and set(out) == {"events"}
    for event_doc in out["events"] if many else [out]:
        document = event_doc["metadata"]
        assert isinstance(document, RawMetadata) and not document.decoded
        event = _event_from_document(event_doc)
        assert event.screen_width == 7 and event and not document.decoded  # step keys without a decode
        assert (document._fields is None) == (http_format.STEP in doc)  # ... and without a scan, given them
        assert event.metadata == meta and document.decoded
        for name, array in frames.items():
            assert np.array_equal(event_doc["frames"][name], array, equal_nan=array.dtype.kind == "f")
    eager = http_format.decode_document(content_type, body)  # eager: dicts under "metadata", whatever was sent
    keys = {"metadata", "frames"} | ({http_format.STEP} if http_format.STEP in doc else set())
    if many:
        assert eager["events"].pop(1) == failed
    assert all(d["metadata"] == meta and set(d) == keys for d in (eager["events"] if many else [eager]))
    generic = http_format._unpack_lazy_generic(body)  # the path for documents of any other shape: the same result
    if many:
        assert generic["events"].pop(1) == failed
    for got, other in zip(out["events"] if many else [out], generic["events"] if many else [generic], strict=True):
        assert got["metadata"].decode() == other["metadata"].decode()
        assert set(got["frames"]) == set(other["frames"])



@pytest.mark.parametrize("many", [False, True])
def test_eager_msgpack_frames_are_read_only_views_of_the_body(many):
    """An eagerly decoded document (the ML-Agents client's) still leaves its large frames in the response body: no
    copy per frame (1.5 MiB a step at 512x512), read-only as the body is; a small array (a vector observation)
    is its own copy, so keeping it does not keep the body."""
    frames = {"CameraSensor": (np.arange(2 * 128 * 128 * 3) % 251).astype(np.uint8).reshape(2, 128, 128, 3),
              "obs": np.linspace(0, 1, 16, dtype=np.float32).reshape(2, 8)}
    doc = {"metadata": {"batched": True, "behaviors": {"b": {"sensors": ["obs"]}}}, "frames": frames}
    content_type, body = http_format.encode_document({"events": [doc, doc]} if many else doc, http_format.MSGPACK)
    body = bytes(body)
    whole = np.frombuffer(body, np.uint8)
    out = http_format.decode_document(content_type, body)
    for event in out["events"] if many else [out]:
        assert event["metadata"] == doc["metadata"]
        for name, array in frames.items():
            got = event["frames"][name]
            assert np.array_equal(got, array) and not got.flags.writeable
            assert np.shares_memory(got, whole) == (name == "CameraSensor")


@pytest.mark.parametrize("body", [b"", b"\x92\x01\x02", b"\x81\xa8metadata\x81", b"\x80\x00", b"\xc1",
                                  b"\x81\xa6events\x92\x80", b"\x81\xa6events\x91\x81\xa6frames"])
def test_bad_lazy_msgpack_bodies_raise_wire_error(body):
    with pytest.raises(http_format.WireError):
        http_format.decode_document(http_format.MSGPACK, body, lazy_metadata=True)


@pytest.mark.parametrize("many", [False, True])
def test_msgpack_encoding_lets_go_of_the_frames_at_once(many):
    """No reference cycle survives an encode: the frame arrays (views of a player's buffer, which the transports
    recycle once nothing holds it) are freed by reference counting, not at the cyclic GC's next run."""
    import gc
    import weakref

    buffer = np.zeros(32 * 24 * 3, dtype=np.uint8)  # a player's buffer (it owns the memory: views point at it)
    alive = weakref.ref(buffer)
    frame = buffer.reshape(32, 24, 3)[::-1]  # flipped, as players send
    doc = {"metadata": {"lastActionSuccess": True}, "frames": {"frame": frame}}
    gc.disable()
    try:
        http_format.encode_document({"events": [doc, doc]} if many else doc, http_format.MSGPACK)
        del doc, buffer, frame
        assert alive() is None
    finally:
        gc.enable()


def test_msgpack_pieces_hold_the_frames_memory_and_few_buffers():
    """What the service sends with one ``sendmsg``: each frame's data is a view of its own memory (nothing copied)
    between a few joined runs of small bytes, and the pieces concatenate to the msgpack body."""
    stored = np.arange(5 * 6 * 4, dtype=np.uint8).reshape(5, 6, 4)
    frames = {"frame": stored[::-1, :, :3], "depth_frame": np.linspace(0, 1, 30, dtype=np.float32).reshape(5, 6)}
    doc = {"metadata": {"lastActionSuccess": True, "objects": [{"a": 1}] * 3}, "step": {"screenWidth": 6},
           "frames": frames}
    pieces = http_format.msgpack_pieces(doc)
    views = [p for p in pieces if isinstance(p, memoryview)]
    assert len(views) == 2 and len(pieces) <= 2 * len(views) + 1  # no run of bytes left unjoined
    assert np.shares_memory(np.frombuffer(views[0], np.uint8), stored)  # the stored RGBA rows, as they are
    assert np.shares_memory(np.frombuffer(views[1], np.float32), frames["depth_frame"])
    decoded = http_format.decode_document(http_format.MSGPACK, b"".join(pieces))
    assert np.array_equal(decoded["frames"]["frame"], frames["frame"]) and decoded["step"] == {"screenWidth": 6}


def test_the_old_name_is_the_same_module_with_a_deprecation_warning():
    import importlib
    import sys

    sys.modules.pop("unirender.wire", None)
    with pytest.warns(DeprecationWarning, match="unirender.http_format"):
        old = importlib.import_module("unirender.wire")
    assert old is http_format
