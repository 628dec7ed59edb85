"""The OpenEnv layer's parts without a player: the token gate, images, token files, the open-server refusal."""

from __future__ import annotations

import asyncio
import base64
import io

import numpy as np
import pytest

pytest.importorskip("openenv.core")  # the openenv extra

from PIL import Image  # noqa: E402

from unirender.errors import SpecError  # noqa: E402
from unirender.openenv.app import BodyLimit, TokenGate, load_served, presented_token, read_tokens, serve  # noqa: E402
from unirender.openenv.images import decode_array, decode_image, encode_array, encode_image, image_fields  # noqa: E402

TOKEN = "a-token-of-enough-length"


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(b"authorization", f"Bearer {TOKEN}".encode())], TOKEN),
        ([(b"Authorization", basic("openenv", TOKEN))], TOKEN),  # what a ws://user:token@host URL sends
        ([(b"authorization", b"Basic not-base64!")], None),
        ([(b"authorization", b"Digest x")], None),
        ([(b"host", b"127.0.0.1")], None),
    ],
)
def test_the_token_a_request_presents(headers, expected):
    assert presented_token(headers) == expected


def run_gate(scope_type: str, headers: list, path: str = "/state") -> tuple[bool, list]:
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        sent.append(message)

    async def receive():
        return {}

    gate = TokenGate(app, [TOKEN, "another-token-of-length"])
    asyncio.run(gate({"type": scope_type, "path": path, "headers": headers}, receive, send))
    return bool(reached), sent


def test_the_gate_lets_a_token_through_and_refuses_the_rest_before_the_app():
    assert run_gate("http", [(b"authorization", f"Bearer {TOKEN}".encode())]) == (True, [])
    assert run_gate("websocket", [(b"authorization", basic("u", TOKEN))]) == (True, [])
    assert run_gate("http", [], path="/health") == (True, [])  # the probe
    reached, sent = run_gate("http", [(b"authorization", b"Bearer wrong")])
    assert not reached and sent[0]["status"] == 401 and b"token" in sent[1]["body"]
    reached, sent = run_gate("websocket", [])
    assert not reached and sent == [{"type": "websocket.close", "code": 1008}]


def run_limit(chunks: list[bytes], headers: list) -> tuple[bytes | None, list, int]:
    """What BodyLimit(limit 10) hands the app (None: the app was not called), what it sent, the chunks read."""
    reached, sent, read = [], [], []

    async def app(scope, receive, send):
        reached.append((await receive())["body"])

    async def send(message):
        sent.append(message)

    async def receive():
        read.append(chunks[len(read)])
        return {"type": "http.request", "body": read[-1], "more_body": len(read) < len(chunks)}

    asyncio.run(
        BodyLimit(app, limit=10)({"type": "http", "path": "/step", "headers": headers}, receive, send)
    )
    return (reached[0] if reached else None), sent, len(read)


def test_a_body_past_the_limit_is_refused_before_the_rest_is_read():
    assert run_limit([b"12345", b"6789"], [(b"content-length", b"9")]) == (b"123456789", [], 2)
    assert run_limit([b"12345", b"67890"], []) == (b"1234567890", [], 2)  # chunked, at the limit
    body, sent, read = run_limit([b"x" * 11], [(b"content-length", b"11")])
    assert body is None and read == 0 and sent[0]["status"] == 413  # refused from the head, nothing read
    body, sent, read = run_limit(
        [b"123456", b"789012", b"never"], []
    )  # chunked: refused at the chunk past it
    assert body is None and read == 2 and sent[0]["status"] == 413 and b"at most 10" in sent[1]["body"]


def test_images_round_trip_in_every_format():
    rgb = np.random.default_rng(0).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    png = Image.open(io.BytesIO(base64.b64decode(encode_image(rgb, "png"))))
    assert np.array_equal(np.asarray(png), rgb)
    for pixels in (np.dstack([rgb, rgb[:, :, :1]]), rgb[:, :, 0], rgb[:, :, :1]):  # RGBA, grey, one channel
        decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(encode_image(pixels, "png")))))
        assert np.array_equal(decoded, pixels.reshape(decoded.shape))
    assert base64.b64decode(encode_image(rgb, "jpeg"))[:2] == b"\xff\xd8"
    depth = np.full((6, 8), 1.2345, np.float32)
    as_png = np.asarray(Image.open(io.BytesIO(base64.b64decode(encode_image(depth, "png")))))
    assert as_png.dtype == np.uint16 and as_png[0, 0] == 1234  # millimetres
    with pytest.raises(ValueError, match="JPEG"):
        encode_image(np.zeros((2, 2, 4), np.uint8), "jpeg")
    assert np.array_equal(decode_array(encode_array(depth).model_dump()), depth)
    # decode_image (libspng for 8-bit PNGs, Pillow for the rest) gives what Pillow gives, in every form
    for pixels in (rgb, np.dstack([rgb, rgb[:, :, :1]]), rgb[:, :, 0], rgb[:, :, :1], depth):
        for image_format in ("png", "jpeg") if pixels.dtype == np.uint8 and pixels.ndim == 3 else ("png",):
            if image_format == "jpeg" and pixels.shape[2] == 4:
                continue
            text = encode_image(pixels, image_format)
            decoded = decode_image(text)
            pillow = np.asarray(Image.open(io.BytesIO(base64.b64decode(text))))
            assert decoded.dtype == pillow.dtype and np.array_equal(decoded, pillow), (
                pixels.shape,
                image_format,
            )


def test_arrays_are_standard_base64_with_or_without_pybase64(monkeypatch):
    """pybase64 (the openenv extra's SIMD codec) and the standard library's fallback write the same text, any
    client's base64 decoder reads it, and both refuse a character outside the alphabet."""
    import importlib
    import sys

    import unirender.openenv.images as images

    rgb = np.random.default_rng(1).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    strided = np.zeros((5, 14, 3), np.uint8)[:, ::2]  # not C-contiguous: encode_array copies it first
    strided[:] = rgb
    fast = images.encode_array(strided)
    monkeypatch.setitem(sys.modules, "pybase64", None)  # the import fails: the standard library's codec
    try:
        fallback = importlib.reload(images)
        assert fallback.encode_array(rgb) == fast
        assert base64.b64decode(fast.data, validate=True) == rgb.tobytes()
        assert np.array_equal(fallback.decode_array(fast), rgb)
        with pytest.raises(ValueError):  # binascii.Error
            fallback.decode_array({"dtype": "|u1", "shape": [3], "data": "AA$A"})
    finally:
        monkeypatch.undo()
        images = importlib.reload(images)
    assert np.array_equal(images.decode_array(fast.model_dump()), rgb)
    with pytest.raises(ValueError):
        images.decode_array({"dtype": "|u1", "shape": [3], "data": "AA$A"})


def test_token_files_say_what_is_wrong(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# no token yet\n\n")
    with pytest.raises(SpecError, match="holds no token"):
        read_tokens(path)
    path.write_text("short\n")
    with pytest.raises(SpecError, match="at least 16"):
        read_tokens(path)
    path.write_text(f"# ours\n{TOKEN}\n")
    assert read_tokens(path) == [TOKEN]
    with pytest.raises(SpecError, match="token file"):
        read_tokens(tmp_path / "missing")


def test_an_open_server_binds_loopback_only(tmp_path):
    spec = tmp_path / "env.yaml"
    spec.write_text("environment:\n  executable: builtin\n")
    served = load_served(spec, max_sessions=1)
    with pytest.raises(SpecError, match="--token-file"):
        serve(served, host="0.0.0.0", port=0, announce=lambda line: pytest.fail(f"it served: {line}"))
    with pytest.raises(SpecError, match="at least 1"):
        load_served(spec, max_sessions=0)


@pytest.mark.parametrize(
    ("depth_format", "depth", "expected"),
    [(None, 1.2345, 1234), ("Millimeters", 1234.5, 1234), ("Normalized", 0.5, 32767)],
)
def test_a_depth_png_holds_what_a_datasets_png16_holds_for_the_spec_s_depth_format(
    tmp_path, depth_format, depth, expected
):
    spec = tmp_path / "env.yaml"
    render = f"render:\n  modalities: [rgb, depth]\n  depth_format: {depth_format}\n" if depth_format else ""
    spec.write_text("environment:\n  executable: builtin\n" + render)
    served = load_served(spec, max_sessions=1)
    assert served.controller_kwargs.get("depth_format", "Meters") == (depth_format or "Meters")
    text = image_fields({"depth": np.full((2, 3), depth, np.float32)}, "png", served.depth_scale)[
        "visual_observations"
    ][0]
    assert decode_image(text)[0, 0] == expected  # millimetres from metres or millimetres, not scaled twice


def test_a_webgl_action_is_a_declared_name_and_nothing_else():
    from unirender.openenv.models import UnirenderAction
    from unirender.openenv.webgl import WebGLAdapter
    from unirender.simulator import ActionDescription, Description, ObservationDescription

    description = Description(
        family="webgl",
        actions=ActionDescription("named", names=("noop", "left", "right")),
        observations=(ObservationDescription("frame", "image", (40, 48, 3), "uint8", camera=True),),
    )
    adapter = WebGLAdapter(description, ["rgb"])
    assert adapter.observation_spec["observations"][0]["shape"] == [40, 48, 3]
    assert adapter.session_action(UnirenderAction(action="left"), None) == "left"
    assert adapter.session_action(UnirenderAction(), None) == "noop"  # no input this step
    with pytest.raises(ValueError, match="did you mean 'right'.*declared: noop, left, right"):
        adapter.session_action(UnirenderAction(action="rigth"), None)
    with pytest.raises(ValueError, match="declared action's name, not"):  # raw input is not taken
        adapter.session_action(UnirenderAction(action={"key": "ArrowLeft"}), None)
    with pytest.raises(ValueError, match="not ML-Agents'"):
        adapter.session_action(UnirenderAction(discrete_actions=[1]), None)
    with pytest.raises(ValueError, match="no scene or environment_parameters"):
        adapter.first_event(None, False, {"scene": "FloorPlan1"})


def test_ai2thor_step_metadata_is_read_from_the_players_msgpack_as_a_full_decode_reads_it():
    """The five keys an AI2-THOR observation carries are scanned from the agent's msgpack map (the rest of the
    map, e.g. every object, is skipped); where the event has no such bytes, or they do not scan, the decoded
    metadata gives them, the same values."""
    import msgpack

    from unirender.openenv.ai2thor import step_metadata

    agent = {
        "objects": [{"objectId": f"Cup|{i}", "position": {"x": i, "y": 0.5, "z": -i}} for i in range(50)],
        "lastActionSuccess": False,
        "errorMessage": "blocked",
        "sceneName": "FloorPlan1",
        "agent": {"position": {"x": 1.0, "y": 0.9, "z": -0.5}, "rotation": {"y": 90.0}, "isStanding": True},
        "actionReturn": {1: [2, 3]},  # an int key: what strict_map_key=False exists for
    }  # no lastAction: a key the player left out stays out

    class Event:
        def __init__(self, raw):
            self.raw, self.metadata = raw, dict(agent)

        def metadata_msgpack(self):
            return self.raw

    expected = {k: agent[k] for k in ("lastActionSuccess", "errorMessage", "sceneName", "agent")}
    for raw in (msgpack.packb(agent), memoryview(msgpack.packb(agent)), None, b"\xc1 not msgpack"):
        read = step_metadata(Event(raw))
        assert read == expected and list(read) == list(expected), raw
