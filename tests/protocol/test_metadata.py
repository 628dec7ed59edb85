"""Lazy metadata (unirender.protocol.metadata): the partial read never disagrees with a full decode, patches merge
lazily to what an eager merge gives, events decode on first access and pickle the received bytes."""

import json
import math
import pickle

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from unirender.protocol import ControllerProtocol, FifoDecoder, MetadataError, build_event, parse_form
from unirender.protocol.fifo import split_player_message
from unirender.protocol.metadata import (
    AGENT_STEP_KEYS,
    JSON,
    MSGPACK,
    TOP_STEP_KEYS,
    DecodedMetadata,
    PatchedMetadata,
    RawMetadata,
    agent_json_document,
    agent_msgpack,
    agent_step_keys,
    loads_json,
    one_agent_document,
    scan_step_fields,
    step_fields_of,
)
from unirender.protocol.multipart import form_payload_parts
from unirender.protocol.unity import encode_fifo_emission, encode_wsgi_emission, order_images

W, H = 4, 3


def agent_meta(**extra) -> dict:
    meta = {
        "objects": [
            {"objectId": f"Apple|{i}", "position": {"x": i * 0.5, "y": 1.0, "z": -i}} for i in range(3)
        ],
        "screenWidth": W,
        "screenHeight": H,
        "lastAction": "MoveAhead",
        "lastActionSuccess": True,
        "errorMessage": "",
        "errorCode": "",
        "depthFormat": "Meters",
        "actionReturn": None,
    }
    meta.update(extra)
    return meta


def document(*agents, sequence_id=0, active=0) -> dict:
    return {
        "agents": list(agents),
        "thirdPartyCameras": None,
        "activeAgentId": active,
        "sequenceId": sequence_id,
    }


def full_decode(raw, fmt):
    """What an eager decode gives (msgpack-python / json.loads, as 5.0.0), or None where it fails."""
    try:
        if fmt == MSGPACK:
            return msgpack.unpackb(raw, raw=False, strict_map_key=False)
        return json.loads(raw)
    except Exception:
        return None


def same(a, b) -> bool:
    """Equality where NaN equals NaN and 1 is not True (a partial read must give the very value)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def check_agreement(raw, fmt) -> None:
    """The property: the partial read gives what the full decode gives, or stands back (None), or the document
    is one the full decode rejects, and then reading it says so with MetadataError."""
    fields = scan_step_fields(raw, fmt)
    full = full_decode(raw, fmt)
    document = RawMetadata(raw, fmt)
    if full is None:
        with pytest.raises(MetadataError):
            document.decode()
        if fields is None:
            with pytest.raises(MetadataError):
                document.fields  # noqa: B018
        return
    try:
        expected = step_fields_of(full)
    except MetadataError:
        assert fields is None  # a wrong shape is never read partially
        with pytest.raises(MetadataError):
            document.fields  # noqa: B018
        return
    if fields is not None:
        assert same(fields.top, expected.top) and same(fields.agents, expected.agents), (fields, expected)
    got = document.fields
    assert same(got.top, expected.top) and same(got.agents, expected.agents)
    assert same(document.decode(), full)


# -- the partial read vs the full decode -------------------------------------------------------------------------
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.text(max_size=8),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
step_keys = st.sampled_from(AGENT_STEP_KEYS + TOP_STEP_KEYS + ("agents", "objects", "x"))
# Pairs, not dicts: duplicate keys (the last one wins in both decoders) must be covered too.
pairs = st.lists(st.tuples(step_keys, values), max_size=8)


def json_object(items, encode) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{encode(v)}" for k, v in items) + "}"


def msgpack_map(items, encode) -> bytes:
    packer = msgpack.Packer()
    return packer.pack_map_header(len(items)) + b"".join(packer.pack(k) + encode(v) for k, v in items)


@st.composite
def documents(draw):
    """A document as ``(top pairs, agent pair lists)``: step keys of every type, duplicated, missing, misplaced."""
    agents = draw(st.lists(pairs, min_size=0, max_size=3))
    top = draw(pairs)
    where = draw(st.integers(0, len(top)))
    agents_value = draw(st.sampled_from(["list", "list", "list", "absent", "null", "twice"]))
    return top, agents, where, agents_value


def encode_document(doc, fmt):
    top, agents, where, agents_value = doc
    if fmt == JSON:
        dumps = json.dumps

        def agents_text():
            return "[" + ",".join(json_object(a, dumps) for a in agents) + "]"

        items = [(k, dumps(v)) for k, v in top]
        if agents_value == "list":
            items.insert(where, ("agents", agents_text()))
        elif agents_value == "null":
            items.insert(where, ("agents", "null"))
        elif agents_value == "twice":
            items[where:where] = [("agents", "[]"), ("agents", agents_text())]
        return json_object(items, lambda text: text)
    pack = msgpack.Packer(use_single_float=False).pack

    def agents_bytes():
        return msgpack.Packer().pack_array_header(len(agents)) + b"".join(
            msgpack_map(a, pack) for a in agents
        )

    items = [(k, pack(v)) for k, v in top]
    if agents_value == "list":
        items.insert(where, ("agents", agents_bytes()))
    elif agents_value == "null":
        items.insert(where, ("agents", pack(None)))
    elif agents_value == "twice":
        items[where:where] = [("agents", pack([])), ("agents", agents_bytes())]
    return msgpack_map(items, lambda data: data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), fmt=st.sampled_from([MSGPACK, JSON]))
def test_partial_read_agrees_with_full_decode(doc, fmt):
    check_agreement(encode_document(doc, fmt), fmt)


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from([MSGPACK, JSON]),
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 255), st.sampled_from("xdi")), max_size=4
    ),
    cut=st.integers(0, 10_000) | st.none(),
)
def test_corrupted_documents_never_disagree(fmt, edits, cut):
    """Adversarial bytes: a real document with bytes flipped, deleted, inserted or cut off."""
    meta = document(
        agent_meta(), agent_meta(lastActionSuccess=False, errorCode="InvalidAction"), sequence_id=7
    )
    data = bytearray(msgpack.packb(meta) if fmt == MSGPACK else json.dumps(meta).encode())
    for pos, byte, kind in edits:
        pos %= len(data) + 1
        if kind == "x" and pos < len(data):
            data[pos] = byte
        elif kind == "d" and pos < len(data):
            del data[pos]
        else:
            data[pos:pos] = bytes([byte])
    if cut is not None:
        del data[cut % (len(data) + 1) :]
    if fmt == JSON:
        try:  # the form parser hands over text (invalid UTF-8 is a 400 before this)
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            assume(False)
        check_agreement(text, fmt)
    else:
        check_agreement(bytes(data), fmt)


@pytest.mark.parametrize(
    "text",
    [
        '{"agents":[{"lastAction\\u0053uccess":false}],"sequenceId":1}',  # an escaped key is the same key
        '{"agents":[{"lastActionSuccess":true,"lastActionSuccess":false}],"sequenceId":1,"sequenceId":2}',
        '{"agents":[{"lastActionSuccess":NaN}],"sequenceId":1}',  # json.loads takes NaN; msgspec does not
        '{"agents":[{"errorMessage":"\\ud800"}],"sequenceId":1}',  # a lone surrogate
        '{"agents":[{"screenWidth":1e400}],"sequenceId":123456789012345678901234567890}',
        '{"agents":[{"lastActionSuccess":[true]}],"sequenceId":1}',  # not a scalar: full decode
        '{"agents":[{"errorMessage":"\\"lastActionSuccess\\": false"}],"sequenceId":1}',
        '{"agents":[{"x":{"lastActionSuccess":false}}],"sequenceId":1,"y":{"sequenceId":5}}',  # nested: not step keys
        '{"agents":[{}],"sequenceId":1} trailing',
        '{"agents":[{}],"sequenceId":1,"z":[1,2,]}',  # malformed where nobody looks
        '{"agents":{"0":{}},"sequenceId":1}',
        '{"agents":[1],"sequenceId":1}',
        "[1]",
        '{"agents":[{}],"sequenceId":1,"x":'
        + "[" * 100_000
        + "]" * 100_000
        + "}",  # nesting beyond any limit
    ],
    ids=lambda value: repr(value)[:48],
)
def test_json_edge_cases(text):
    check_agreement(text, JSON)


@pytest.mark.parametrize(
    "data",
    [
        msgpack.packb({"agents": [{"lastActionSuccess": False, "x": b"\xff"}], "sequenceId": 1}),  # bin value
        msgpack.packb({"agents": [{"x": msgpack.ExtType(5, b"ab")}], "sequenceId": 1}),
        msgpack.packb({"agents": [{"lastActionSuccess": msgpack.ExtType(5, b"ab")}], "sequenceId": 1}),
        msgpack.packb({"agents": [{1: "int key"}], "sequenceId": 1}),  # int keys: strict_map_key=False
        msgpack.packb({b"agents": [{}], "sequenceId": 1}),  # a bin key is not the str key
        msgpack.packb({"agents": [{}], "sequenceId": 1}) + b"\x00",  # extra data
        # invalid UTF-8 in a string
        msgpack.packb({"agents": [{"x": "ok"}], "sequenceId": 1}).replace(b"\xa2ok", b"\xa2\xff\xfe"),
        msgpack.packb({"agents": [{"lastActionSuccess": True}], "sequenceId": 1})[:-1],  # truncated
        b"\xc1",  # never used
        b"\x82\xa6agents\x91\x80\xa1x" + b"\x91" * 100_000 + b"\x01",  # nesting beyond any limit
    ],
    ids=lambda value: repr(value)[:48],
)
def test_msgpack_edge_cases(data):
    check_agreement(data, MSGPACK)


def test_bad_utf8_where_nobody_looks_is_reported_on_first_read():
    """The documented difference from eager decoding: a well-formed msgpack document with an undecodable string
    outside the step keys passes the step and fails with MetadataError when the metadata is read."""
    data = msgpack.packb(document(agent_meta(sceneName="ok"))).replace(b"\xa2ok", b"\xa2\xff\xfe")
    payload = ControllerProtocol().accept(RawMetadata(data, MSGPACK), {})
    event = build_event(payload)
    assert bool(event) and event.screen_width == W
    with pytest.raises(MetadataError, match="not valid msgpack"):
        event.metadata  # noqa: B018


def test_json_full_decode_is_json_loads():
    text = json.dumps({"a": [1.5, 2**70, -0.0, "é\u2028", {"b": None}], "n": 1e-320, "big": 1e308})
    assert same(loads_json(text), json.loads(text))
    assert loads_json('{"x": NaN, "x": Infinity}') == {"x": math.inf}  # json.loads' extensions, last key wins
    with pytest.raises(MetadataError, match="not JSON"):
        loads_json("{nope")


@settings(max_examples=200, deadline=None)
@given(value=st.recursive(scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_json_full_decode_matches_json_loads(value):
    text = json.dumps(value)
    assert same(loads_json(text), json.loads(text))


@settings(max_examples=300, deadline=None)
@given(number=st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,40})?([eE][-+]?[0-9]{1,3})?", fullmatch=True))
def test_json_numbers_decode_as_json_loads(number):
    """Every JSON number spelling (long mantissas, huge or tiny exponents) gives json.loads' value exactly."""
    text = f'{{"n": [{number}]}}'
    assert same(loads_json(text), json.loads(text))


# -- events over raw documents --------------------------------------------------------------------------------
def rgba() -> np.ndarray:
    return np.arange(H * W * 4, dtype=np.uint8).reshape(H, W, 4)


def fifo_payload(meta: dict, images: dict, protocol=None):
    msg = FifoDecoder().feed(encode_fifo_emission(meta, order_images([images], [])))[0]
    metadata, files, is_patch = split_player_message(msg)
    assert isinstance(metadata, RawMetadata) and not is_patch
    return (protocol or ControllerProtocol()).accept(metadata, files)


def wsgi_payload(meta: dict, images: dict):
    content_type, body = encode_wsgi_emission(meta, order_images([images], []), "token")
    metadata, files, token = form_payload_parts(*parse_form(content_type, body))
    assert isinstance(metadata, RawMetadata) and token == "token"
    return ControllerProtocol().accept(metadata, files)


@pytest.mark.parametrize("make_payload", [fifo_payload, wsgi_payload], ids=["fifo", "wsgi"])
def test_event_reads_frames_and_step_keys_without_decoding(make_payload):
    frame = rgba()
    depth = np.full((H, W), 2.5, dtype=np.float32)
    meta = document(agent_meta(lastActionSuccess=False, errorMessage="blocked", errorCode="InvalidAction"))
    wire = {"image": np.ascontiguousarray(frame[::-1]).tobytes(), "image_depth": depth[::-1].tobytes()}
    payload = make_payload(meta, wire)
    event = build_event(payload)
    np.testing.assert_array_equal(event.frame, frame[..., :3])
    np.testing.assert_array_equal(event.depth_frame, depth)
    assert not event and (event.screen_width, event.screen_height) == (W, H)
    assert (
        event.peek_metadata("errorCode") == "InvalidAction"
        and event.peek_metadata("errorMessage") == "blocked"
    )
    assert event.metadata_document is payload.document
    payload2 = make_payload(meta, wire)
    event2 = build_event(payload2)
    _ = event2.frame, event2.depth_frame, bool(event2), event2.peek_metadata("lastActionSuccess")
    assert not payload2.document.decoded  # frames and step keys never decoded the document
    assert event2.metadata == meta["agents"][0] and payload2.document.decoded
    assert event2.metadata["objects"][2]["position"]["z"] == -2


def test_multi_agent_event_decodes_once_and_delegates():
    meta = document(agent_meta(agentId=0), agent_meta(agentId=1, lastActionSuccess=False), active=1)
    payload = fifo_payload(meta, {})
    event = build_event(payload)
    assert not event and event.peek_metadata("lastActionSuccess") is False
    assert not payload.document.decoded
    assert event.metadata["agentId"] == 1 and event.events[0].metadata["agentId"] == 0
    assert event.metadata is event.events[1].metadata


def test_pickling_keeps_the_received_bytes():
    meta = document(agent_meta(), agent_meta(agentId=1), active=0)
    frame = rgba()
    wire = np.ascontiguousarray(frame[::-1]).tobytes()
    payload = fifo_payload(meta, {"image": wire})  # one image per agent
    payload.files["image"].append(payload.files["image"][0])
    multi = build_event(payload)
    raw_size = len(payload.document.raw)
    data = pickle.dumps(multi)
    assert data.count(bytes(payload.document.raw)) == 1  # the document once, for both agents
    assert b"objectId" not in data.replace(bytes(payload.document.raw), b"")  # no dict tree beside it
    copy = pickle.loads(data)
    assert not copy.events[0].metadata_document.decoded
    np.testing.assert_array_equal(copy.events[1].frame, frame[..., :3])
    assert copy.metadata == meta["agents"][0] and copy.events[1].metadata == meta["agents"][1]
    assert len(data) < raw_size + 2 * frame.nbytes + 2000
    # metadata that was read (and maybe changed) travels as the dict
    single = build_event(fifo_payload(document(agent_meta()), {}))
    single.metadata["mine"] = 1
    assert pickle.loads(pickle.dumps(single)).metadata["mine"] == 1


# -- patches merged lazily ---------------------------------------------------------------------------------------
def eager_merge(previous: dict, patch: dict, sequence_id) -> dict:
    """The spec's merge (3.6), applied at once: what unirender did before metadata became lazy."""
    agents = [dict(agent) for agent in previous["agents"]]
    agent_id = patch.get("agentId", 0)
    agents[agent_id].update(patch)
    metadata = dict(previous)
    metadata["agents"] = agents
    metadata["activeAgentId"] = agent_id
    metadata["sequenceId"] = sequence_id
    metadata["thirdPartyCameras"] = previous.get("thirdPartyCameras")
    return metadata


patches = st.fixed_dictionaries(
    {"agentId": st.integers(0, 1)},
    optional={
        key: scalars | st.lists(st.integers(), max_size=2)
        for key in (
            "lastAction",
            "lastActionSuccess",
            "errorMessage",
            "errorCode",
            "actionReturn",
            "screenWidth",
        )
    },
)


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(patches, min_size=1, max_size=6), decode_at=st.integers(0, 6))
def test_lazy_patches_equal_eager_merges(steps, decode_at):
    meta = document(agent_meta(agentId=0), agent_meta(agentId=1), sequence_id=0)
    del meta["thirdPartyCameras"]
    protocol = ControllerProtocol()
    payload = fifo_payload(meta, {}, protocol)
    expected = meta
    for i, patch in enumerate(steps):
        protocol.prepare_action({"action": "GetReachablePositions"})
        payload = protocol.accept_patch(patch)
        expected = eager_merge(expected, patch, protocol.sequence_id)
        assert isinstance(payload.document, PatchedMetadata) and payload.patched
        assert payload.document.base is not None and not isinstance(payload.document.base, PatchedMetadata)
        fields = payload.document.fields
        assert same(fields.agents, step_fields_of(expected).agents)
        assert fields.top == {"sequenceId": protocol.sequence_id, "activeAgentId": patch["agentId"]}
        if i == decode_at:
            assert same(payload.metadata, expected)
    assert same(payload.metadata, expected)
    assert same(pickle.loads(pickle.dumps(payload.document)).decode(), expected)


def test_patch_fields_do_not_decode_the_base():
    protocol = ControllerProtocol()
    base = fifo_payload(document(agent_meta()), {}, protocol)
    protocol.prepare_action({"action": "GetReachablePositions"})
    patched = protocol.accept_patch({"agentId": 0, "lastActionSuccess": False, "errorCode": "X"})
    event = build_event(patched)
    assert not event and event.peek_metadata("errorCode") == "X" and event.screen_width == W
    assert not base.document.decoded
    assert event.metadata["errorCode"] == "X" and event.metadata["objects"][0]["objectId"] == "Apple|0"


@pytest.mark.parametrize("fmt", [MSGPACK, JSON])
def test_realistic_metadata_is_read_partially(fmt):
    """An AI2-THOR-sized document (the fake player's 50 objects) takes the partial read, not the fallback."""
    from fixtures.fake_player import FakeAgentManager, dumps_metadata, pack_metadata

    manager = FakeAgentManager(
        ["-screen-width", "300", "-screen-height", "300"], {"FAKE_PLAYER_OBJECTS": "50"}
    )
    manager.dispatch({"action": "Initialize", "renderInstanceSegmentation": True, "renderDepthImage": True})
    manager.dispatch({"action": "Nope", "sequenceId": 4})  # a failed action: errorCode, errorMessage set
    metadata, _images = manager.emission(render=True)
    raw = pack_metadata(metadata) if fmt == MSGPACK else dumps_metadata(metadata)
    assert 50_000 < len(raw) < 100_000
    fields = scan_step_fields(raw, fmt)
    assert fields is not None
    assert fields.top == {"sequenceId": 4, "activeAgentId": 0}
    assert fields.agents[0]["lastActionSuccess"] is False and fields.agents[0]["errorCode"] == "InvalidAction"
    check_agreement(raw, fmt)


def test_fake_player_static_splice_encodes_the_same_document():
    """The benchmark mode of the fake player (pre-encoded objects spliced in) sends the very same document."""
    from fixtures.fake_player import FakeAgentManager, dumps_metadata, pack_metadata

    env = {"FAKE_PLAYER_OBJECTS": "7", "FAKE_PLAYER_STATIC": "1"}
    manager = FakeAgentManager(["-screen-width", "30", "-screen-height", "20"], env)
    manager.dispatch({"action": "Initialize", "agentCount": 2, "renderInstanceSegmentation": True})
    metadata, _images = manager.emission(render=True)
    assert msgpack.unpackb(pack_metadata(metadata)) == msgpack.unpackb(
        msgpack.packb(metadata, use_single_float=True)
    )
    assert json.loads(dumps_metadata(metadata)) == json.loads(json.dumps(metadata))
    assert len(metadata["agents"][1]["objects"]) == 7


def test_a_caller_that_reads_metadata_gets_it_decoded_on_arrival():
    """Adaptive: metadata read last step -> the next document is decoded on arrival (no partial read on top);
    left alone -> the next one stays undecoded."""
    protocol = ControllerProtocol()
    first = fifo_payload(document(agent_meta()), {}, protocol)
    protocol.prepare_action({"action": "MoveAhead"})
    second = fifo_payload(document(agent_meta(), sequence_id=1), {}, protocol)
    assert not first.document.decoded and not second.document.decoded
    assert build_event(second).metadata["lastAction"] == "MoveAhead"
    protocol.prepare_action({"action": "MoveAhead"})
    third = fifo_payload(document(agent_meta(), sequence_id=2), {}, protocol)
    assert third.document.decoded
    build_event(third)  # frames only from now on
    protocol.prepare_action({"action": "MoveAhead"})
    fourth = fifo_payload(document(agent_meta(), sequence_id=3), {}, protocol)
    assert not fourth.document.decoded


# -- forwarding one agent's metadata as it came --------------------------------------------------------------------
def _full_agents(raw, fmt):
    try:
        return RawMetadata(raw, fmt).decode()["agents"]
    except (MetadataError, KeyError, TypeError):
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), fmt=st.sampled_from([MSGPACK, JSON]), agent=st.integers(0, 3))
def test_forwarded_agent_bytes_decode_as_the_full_document(doc, fmt, agent):
    """What the service forwards (``agent_msgpack``) is, decoded, exactly the full decode's ``agents[agent]``;
    where it cannot say so it forwards nothing (None) and the caller packs the decoded dict."""
    raw = encode_document(doc, fmt)
    forwarded = agent_msgpack(RawMetadata(raw, fmt), agent)
    agents = _full_agents(raw, fmt)
    if forwarded is None:
        return
    assert isinstance(agents, list) and agent < len(agents)
    assert same(msgpack.unpackb(forwarded, raw=False, strict_map_key=False), agents[agent])
    assert same(one_agent_document(forwarded).decode(), {"agents": [agents[agent]]})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), agent=st.integers(0, 3), as_text=st.booleans(), scanned=st.booleans())
def test_forwarded_agent_json_decodes_as_the_full_document(doc, agent, as_text, scanned):
    """A WSGI player's metadata forwarded as the JSON it sent (``agent_json_document``: the whole document for
    agent 0 of a one-agent one, else the agent sliced into one of its own) decodes, as ``agents[0]``, exactly as
    the full decode's ``agents[agent]``; where it cannot say so it forwards nothing."""
    raw = encode_document(doc, JSON)
    raw = raw if as_text else (raw.encode() if isinstance(raw, str) else raw)
    document = RawMetadata(raw, JSON)
    if scanned:  # as every received document is (the sequence check)
        try:
            assert document.fields.agents
        except MetadataError:
            pass
    text = agent_json_document(document, agent)
    agents = _full_agents(raw, JSON)
    if text is None:
        return
    assert isinstance(text, bytes | memoryview) and isinstance(agents, list) and agent < len(agents)
    assert same(RawMetadata(text, JSON).decode()["agents"][0], agents[agent])


def test_agent_json_document_is_only_for_undecoded_json():
    meta = document(agent_meta(), agent_meta(lastActionSuccess=False), sequence_id=3)
    text = RawMetadata(json.dumps(meta), JSON)
    assert json.loads(agent_json_document(text, 1)) == {"agents": [meta["agents"][1]]} and not text.decoded
    assert json.loads(agent_json_document(text, 0)) == {"agents": [meta["agents"][0]]}  # two agents: sliced
    assert agent_json_document(text, 2) is None  # no such agent
    assert agent_json_document(RawMetadata(msgpack.packb(meta), MSGPACK), 0) is None  # forwarded as msgpack
    assert agent_json_document(DecodedMetadata(meta), 0) is None
    nan = RawMetadata(json.dumps(meta).replace("3", "NaN", 1), JSON)
    assert agent_json_document(nan, 0) is None and nan.decoded  # not strict JSON: decoded in full, not forwarded
    assert agent_json_document(RawMetadata(b"[1, 2", JSON), 0) is None  # malformed
    text.decode()
    assert agent_json_document(text, 0) is None  # decoded (maybe changed since): the caller packs the dict


def test_a_one_agent_json_document_is_forwarded_as_received():
    """Agent 0 of a one-agent document: the player's own bytes (the very object, nothing copied or rescanned)."""
    raw = json.dumps(document(agent_meta(), sequence_id=5)).encode()
    view = memoryview(bytearray(raw))
    received = RawMetadata(view, JSON)
    assert received.fields.agents[0]["lastActionSuccess"] is True  # read on arrival
    assert agent_json_document(received, 0) is view and not received.decoded
    assert agent_json_document(received, 1) is None
    assert agent_json_document(RawMetadata(raw.decode(), JSON), 0) == raw  # text: as UTF-8


def test_step_keys_read_elsewhere_are_used_only_when_well_formed():
    good = {"lastActionSuccess": False, "screenWidth": 7, "errorMessage": "blocked"}
    assert agent_step_keys(good) is good and agent_step_keys({}) == {}
    for bad in (None, [1], {"lastActionSuccess": [True]}, {"objects": 1}, {1: True}, {"screenWidth": {"x": 1}}):
        assert agent_step_keys(bad) is None


def test_forwarding_needs_no_decode():
    from unirender.protocol.metadata import agent_msgpack

    meta = document(agent_meta(), agent_meta(lastActionSuccess=False), sequence_id=3)
    raw = RawMetadata(msgpack.packb(meta), MSGPACK)
    data = agent_msgpack(raw, 1)
    assert isinstance(data, memoryview) and data.obj is not None and not raw.decoded  # a slice, nothing decoded
    assert msgpack.unpackb(data) == meta["agents"][1]
    text = RawMetadata(json.dumps(meta), JSON)
    assert msgpack.unpackb(agent_msgpack(text, 0)) == meta["agents"][0] and not text.decoded
    assert agent_msgpack(DecodedMetadata(meta), 0) is None  # no raw form: the caller packs the dict
    assert agent_msgpack(RawMetadata(msgpack.packb(meta) + b"\x00", MSGPACK), 0) is None  # trailing byte


@pytest.mark.parametrize("make_payload", [fifo_payload, wsgi_payload], ids=["fifo", "wsgi"])
def test_event_metadata_msgpack_is_the_agent_as_received_until_metadata_is_touched(make_payload):
    meta = document(agent_meta(), agent_meta(lastActionSuccess=False), sequence_id=0)
    payload = make_payload(meta, {})
    event = build_event(payload)  # a MultiAgentEvent: its active agent's event
    data = event.metadata_msgpack()
    assert msgpack.unpackb(data, strict_map_key=False) == meta["agents"][0]
    assert not payload.document.decoded  # FIFO: a slice of the frame; WSGI: that agent converted alone
    event.metadata["lastAction"] = "changed by the caller"
    assert event.metadata_msgpack() is None  # the dict may differ from the bytes now: pack the dict
