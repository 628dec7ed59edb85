"""Image decoding (protocol.md 4) and Event / MultiAgentEvent (protocol.md 5.2, 5.3): every modality, every depth encoding."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirender.protocol import (
    ControllerProtocol,
    DepthFormat,
    Event,
    FifoDecoder,
    ImageSizeError,
    MetadataError,
    MultiAgentEvent,
    Payload,
    build_event,
    decode_player_message,
    parse_form,
    payload_parts_from_form,
)
from unirender.protocol.http import RequestReader, build_train_request
from unirender.protocol.unity import encode_fifo_emission, encode_wsgi_emission, order_images

W, H = 5, 4
rng = np.random.default_rng(7)


def wire(top_down: np.ndarray) -> bytes:
    """What Unity sends for a top-down image: rows bottom first."""
    return np.ascontiguousarray(top_down[::-1]).tobytes()


def rgba() -> np.ndarray:
    return rng.integers(0, 256, (H, W, 4), dtype=np.uint8)


def agent_meta(**extra):
    meta = {
        "screenWidth": W,
        "screenHeight": H,
        "lastAction": "Pass",
        "lastActionSuccess": True,
        "errorMessage": "",
        "actionReturn": None,
        "depthFormat": "Meters",
        "thirdPartyCameras": None,
        "colors": [
            {"name": "Apple|1|2|3", "color": [10, 0, 0]},
            {"name": "Apple|4|5|6", "color": [20, 0, 0]},
            {"name": "Table|0|0|0", "color": [30, 0, 0]},
            {"name": "Apple", "color": [99, 0, 0]},
        ],
    }
    meta.update(extra)
    return meta


def segmentation(channels=4) -> np.ndarray:
    seg = np.zeros((H, W, channels), dtype=np.uint8)
    if channels == 4:
        seg[..., 3] = 255
    seg[0, 0, 0] = 10  # Apple|1|2|3: top-left pixel
    seg[2:4, 3:5, 0] = 20  # Apple|4|5|6: bottom-right 2x2
    seg[1, 1:4, 0] = 30  # Table
    seg[3, 0, :3] = [1, 2, 3]  # a color nobody names -> background
    return seg


def payload(meta, images, cameras=()):
    full = {"agents": [meta], "activeAgentId": 0, "sequenceId": 0, "thirdPartyCameras": None}
    msg = encode_fifo_emission(full, order_images([images], list(cameras)))
    metadata, files, _ = decode_player_message(FifoDecoder().feed(msg)[0])
    return ControllerProtocol().accept(metadata, files)


@pytest.mark.parametrize("channels", [3, 4])
def test_rgb_and_segmentation_frames(channels):
    rgb, ids, classes = rgba()[..., :channels], segmentation(channels), rgba()[..., :channels]
    event = build_event(
        payload(agent_meta(), {"image": wire(rgb), "image_ids": wire(ids), "image_classes": wire(classes)})
    )
    assert event.frame.shape == (H, W, 3) and event.frame.dtype == np.uint8
    np.testing.assert_array_equal(event.frame, rgb[..., :3])
    np.testing.assert_array_equal(event.cv2img, rgb[..., 2::-1])
    np.testing.assert_array_equal(event.instance_segmentation_frame, ids[..., :3])
    np.testing.assert_array_equal(event.semantic_segmentation_frame, classes[..., :3])
    # read-only zero-copy views with a negative row stride (protocol.md 9.15)
    assert not event.frame.flags.writeable and event.frame.strides[0] < 0
    assert event.depth_frame is None and event.third_party_camera_frames == []


def test_normals_and_flow_keep_their_channels():
    normals, flow = rgba(), rgba()
    event = build_event(payload(agent_meta(), {"image_normals": wire(normals), "image_flow": wire(flow)}))
    np.testing.assert_array_equal(event.normals_frame, normals)
    np.testing.assert_array_equal(event.flow_frame, flow)
    assert event.flows_frame is event.flow_frame  # 5.0.0's attribute name still works


DEPTH_CASES = [
    # (metadata depthFormat, requested format, factor applied to the wire value)
    ("Meters", "Meters", 1.0),
    ("Meters", DepthFormat.Millimeters, 1000.0),
    ("Meters", "Normalized", 1 / 19.9),
    ("Normalized", "Meters", 19.9),
    ("Normalized", "Millimeters", 19900.0),
    (None, "Meters", 19.9),  # absent depthFormat = Normalized (older builds)
    ("Millimeters", "Meters", 0.001),
]


@pytest.mark.parametrize(("source", "target", "factor"), DEPTH_CASES)
def test_float32_depth(source, target, factor):
    depth = rng.uniform(0.1, 5.0, (H, W)).astype("<f4")
    meta = agent_meta(depthFormat=source)
    event = build_event(
        payload(meta, {"image_depth": wire(depth)}),
        depth_format=target,
        camera_near_plane=0.1,
        camera_far_plane=20.0,
    )
    assert event.depth_frame.dtype == np.float32 and event.depth_frame.shape == (H, W)
    np.testing.assert_allclose(event.depth_frame, depth * factor, rtol=1e-6)
    # a view when nothing is converted, a writable copy when a unit conversion multiplies
    assert event.depth_frame.flags.writeable == (factor != 1.0)


@pytest.mark.parametrize("target", ["Normalized", "Meters", "Millimeters"])
def test_legacy_three_byte_depth(target):
    normalized = rng.uniform(0, 1, (H, W))
    fixed = np.round(normalized * 256 * 65536).astype(np.uint32)  # 24-bit fixed point, r most significant
    legacy = np.stack([(fixed >> 16) & 255, (fixed >> 8) & 255, fixed & 255], axis=-1).astype(np.uint8)
    meta = agent_meta()
    del meta["depthFormat"]
    event = build_event(
        payload(meta, {"image_depth": wire(legacy)}),
        depth_format=target,
        camera_near_plane=0.5,
        camera_far_plane=10.5,
    )
    scale = {"Normalized": 1.0, "Meters": 10.0, "Millimeters": 10000.0}[target]
    assert event.depth_frame.dtype == np.float32
    np.testing.assert_allclose(event.depth_frame, normalized * scale, atol=scale * 1e-6)


@pytest.mark.parametrize("channels", [3, 4])
def test_masks_and_detections(channels):
    event = build_event(payload(agent_meta(), {"image_ids": wire(segmentation(channels))}))
    masks = event.instance_masks
    assert set(masks) == {"Apple|1|2|3", "Apple|4|5|6", "Table|0|0|0"} and len(masks) == 3
    expected = np.zeros((H, W), bool)
    expected[2:4, 3:5] = True
    np.testing.assert_array_equal(masks["Apple|4|5|6"], expected)
    assert "Apple" not in masks and "Chair|1|1|1" not in masks
    with pytest.raises(KeyError):
        masks["Chair|1|1|1"]
    # inclusive (x0, y0, x1, y1), top-down
    assert dict(event.instance_detections2D) == {
        "Apple|1|2|3": (0, 0, 0, 0),
        "Apple|4|5|6": (3, 2, 4, 3),
        "Table|0|0|0": (1, 1, 3, 1),
    }
    assert set(event.class_masks) == {"Apple", "Table", "background"}
    apple = np.zeros((H, W), bool)
    apple[0, 0] = True
    apple[2:4, 3:5] = True
    np.testing.assert_array_equal(event.class_masks["Apple"], apple)
    background = np.zeros((H, W), bool)
    background[3, 0] = True
    background |= segmentation(channels)[..., :3].sum(axis=-1) == 0
    np.testing.assert_array_equal(event.class_masks["background"], background)
    assert sorted(event.class_detections2D["Apple"]) == [(0, 0, 0, 0), (3, 2, 4, 3)]
    assert event.color_to_object_id[(30, 0, 0)] == "Table|0|0|0"
    assert event.object_id_to_color["Apple"] == (99, 0, 0)


def test_wire_row_zero_is_the_last_row():
    # protocol.md 4.2 probe: a pixel at wire row 0 lands in the bottom row; its box is (0, 2, 0, 2) in a 3-row image
    meta = agent_meta(screenWidth=1, screenHeight=3, colors=[{"name": "A|0|0|0", "color": [5, 6, 7]}])
    ids = bytes([5, 6, 7, 255]) + bytes([0, 0, 0, 255]) * 2
    event = build_event(payload(meta, {"image_ids": ids}))
    assert event.instance_detections2D["A|0|0|0"] == (0, 2, 0, 2)


def test_no_segmentation_means_empty_masks():
    event = build_event(payload(agent_meta(), {"image": wire(rgba())}))
    assert event.instance_masks == {} and event.class_masks == {} and event.instance_detections2D is None
    assert event.class_detections2D == {}


def test_every_third_party_modality():
    cams = [
        {
            "image-thirdParty-camera": rgba(),
            "image_thirdParty_depth": rng.uniform(0, 3, (H, W)).astype("<f4"),
            "image_thirdParty_normals": rgba(),
            "image_thirdParty_image_ids": segmentation(),
            "image_thirdParty_classes": rgba(),
            "image_thirdParty_flow": rgba(),
        }
        for _ in range(2)
    ]
    wired = [{name: wire(arr) for name, arr in cam.items()} for cam in cams]
    event = build_event(payload(agent_meta(), {"image": wire(rgba())}, wired))
    for i, cam in enumerate(cams):
        # third-party RGB is (H, W, 3) like frame (5.0.0 kept RGBA's 4 channels)
        np.testing.assert_array_equal(
            event.third_party_camera_frames[i], cam["image-thirdParty-camera"][..., :3]
        )
        np.testing.assert_array_equal(event.third_party_depth_frames[i], cam["image_thirdParty_depth"])
        np.testing.assert_array_equal(event.third_party_normals_frames[i], cam["image_thirdParty_normals"])
        np.testing.assert_array_equal(event.third_party_flow_frames[i], cam["image_thirdParty_flow"])
        np.testing.assert_array_equal(
            event.third_party_instance_segmentation_frames[i], cam["image_thirdParty_image_ids"][..., :3]
        )
        np.testing.assert_array_equal(
            event.third_party_semantic_segmentation_frames[i], cam["image_thirdParty_classes"][..., :3]
        )
        assert set(event.third_party_instance_masks[i]) == {"Apple|1|2|3", "Apple|4|5|6", "Table|0|0|0"}
        assert "Apple" in event.third_party_class_masks[i]
    assert event.third_party_flows_frames is event.third_party_flow_frames


def test_legacy_third_party_flow_field_name_is_accepted():
    flow = rgba()
    meta = {"agents": [agent_meta()], "sequenceId": 0}
    event = build_event(Payload(meta, {"image_thirdParty_flows": [memoryview(wire(flow))]}))
    np.testing.assert_array_equal(event.third_party_flow_frames[0], flow)


def test_decoding_is_lazy():
    # a broken depthFormat only matters to whoever reads depth
    event = build_event(
        payload(agent_meta(depthFormat="Furlongs"), {"image": wire(rgba()), "image_depth": wire(rgba())})
    )
    assert event.frame.shape == (H, W, 3) and bool(event)
    with pytest.raises(MetadataError, match="depthFormat.*Furlongs"):
        _ = event.depth_frame


def test_image_size_errors_name_the_field():
    with pytest.raises(ImageSizeError, match=r"'image_depth': buffer has 7 bytes, expected 60 or 80") as info:
        build_event(payload(agent_meta(), {"image": wire(rgba()), "image_depth": b"1234567"}))
    assert (info.value.field, info.value.expected, info.value.got) == ("image_depth", [60, 80], 7)
    with pytest.raises(ImageSizeError, match=r"image_thirdParty_depth\[0\]"):
        build_event(payload(agent_meta(), {}, [{"image_thirdParty_depth": b"12"}]))
    two_agents = {"agents": [agent_meta(), agent_meta()], "activeAgentId": 0, "sequenceId": 0}
    with pytest.raises(ImageSizeError, match="1 buffer\\(s\\) for 2 agent"):
        build_event(Payload(two_agents, {"image": [memoryview(wire(rgba()))]}))
    with pytest.raises(MetadataError, match="screenWidth/screenHeight"):
        build_event(Payload({"agents": [{}], "sequenceId": 0}, {"image": [memoryview(b"123")]}))
    with pytest.raises(MetadataError, match="agents"):
        build_event(Payload({"sequenceId": 0}, {}))


def test_event_from_metadata_only_and_metadata_aliases():
    event = Event(
        {
            "screenWidth": 1,
            "screenHeight": 1,
            "lastAction": "GetReachablePositions",
            "lastActionSuccess": False,
            "actionReturn": [{"x": 1}],
            "heldObjectPose": {"p": 1},
        }
    )
    assert (
        not event
        and event.frame is None
        and event.third_party_camera_frames == []
        and event.events == [event]
    )
    with pytest.deprecated_call():
        assert event.metadata["reachablePositions"] == [{"x": 1}]
    with pytest.deprecated_call():
        assert event.metadata["hand"] == {"p": 1}
    text = repr(event)
    assert "GetReachablePositions" in text and "lastActionSuccess=False" in text


def test_multi_agent_event():
    frames = [rgba(), rgba()]
    meta = {
        "agents": [agent_meta(agentId=0, lastActionSuccess=False), agent_meta(agentId=1)],
        "activeAgentId": 1,
        "sequenceId": 0,
    }
    msg = encode_fifo_emission(
        meta,
        order_images([{"image": wire(f)} for f in frames], [{"image-thirdParty-camera": wire(frames[0])}]),
    )
    event = build_event(ControllerProtocol().accept(*decode_player_message(FifoDecoder().feed(msg)[0])[:2]))
    assert isinstance(event, MultiAgentEvent) and len(event.events) == 2
    assert event.metadata["agentId"] == 1 and bool(event)
    np.testing.assert_array_equal(event.frame, frames[1][..., :3])
    np.testing.assert_array_equal(event.events[0].frame, frames[0][..., :3])
    # the camera images are attached to every agent's event
    assert len(event.events[0].third_party_camera_frames) == 1 and len(event.third_party_camera_frames) == 1
    clone = pickle.loads(pickle.dumps(event))
    np.testing.assert_array_equal(clone.events[0].frame, frames[0][..., :3])
    assert clone.metadata["agentId"] == 1
    with pytest.raises(MetadataError, match="activeAgentId 5"):
        MultiAgentEvent(5, event.events)


def test_frames_round_trip_through_pickle_and_from_frames():
    images = {
        "image": wire(rgba()),
        "image_depth": wire(rng.uniform(0, 3, (H, W)).astype("<f4")),
        "image_ids": wire(segmentation()),
        "image_flow": wire(rgba()),
    }
    event = build_event(
        payload(agent_meta(), images, [{"image-thirdParty-camera": wire(rgba())}]), depth_format="Millimeters"
    )
    frames = event.frames()
    assert set(frames) == {
        "frame",
        "depth_frame",
        "instance_segmentation_frame",
        "flow_frame",
        "third_party_camera_frames",
    }
    assert frames["third_party_camera_frames"].shape == (1, H, W, 3)
    for rebuilt in (pickle.loads(pickle.dumps(event)), Event.from_frames(dict(event.metadata), frames)):
        for name, array in frames.items():
            np.testing.assert_array_equal(rebuilt.frames()[name], array)
        assert dict(rebuilt.instance_detections2D) == dict(event.instance_detections2D)
        assert bool(rebuilt) and rebuilt.screen_width == W
    # pickles carry decoded pixels, not the raw message buffers
    assert pickle.loads(pickle.dumps(event)).depth_frame.dtype == np.float32
    legacy = Event.from_frames({}, {"flows_frame": frames["flow_frame"]})
    assert legacy.flow_frame is not None and (legacy.screen_width, legacy.screen_height) == (W, H)
    with pytest.raises(ValueError, match="unknown frame name 'rgb'"):
        Event.from_frames({}, {"rgb": frames["frame"]})


def test_wsgi_and_fifo_paths_give_the_same_event():
    meta = {"agents": [agent_meta()], "activeAgentId": 0, "sequenceId": 0, "thirdPartyCameras": None}
    images = order_images(
        [{"image": wire(rgba()), "image_depth": wire(rng.uniform(0, 3, (H, W)).astype("<f4"))}]
    )
    fifo_event = build_event(
        ControllerProtocol().accept(
            *decode_player_message(FifoDecoder().feed(encode_fifo_emission(meta, images))[0])[:2]
        )
    )
    content_type, body = encode_wsgi_emission(meta, images, "tok")
    (request,) = RequestReader().feed(build_train_request(content_type, body))
    metadata, files, token = payload_parts_from_form(
        *parse_form(request.headers["content-type"], request.body)
    )
    wsgi_event = build_event(ControllerProtocol().accept(metadata, files))
    assert token == "tok"
    np.testing.assert_array_equal(wsgi_event.frame, fifo_event.frame)
    np.testing.assert_array_equal(wsgi_event.depth_frame, fifo_event.depth_frame)
    # no images at all -> Unity's urlencoded branch, still a valid event
    content_type, body = encode_wsgi_emission(meta, [], "")
    assert content_type == "application/x-www-form-urlencoded"
    metadata, files, token = payload_parts_from_form(*parse_form(content_type, body))
    assert build_event(Payload(metadata, files)).frame is None and token == ""


def test_malformed_colors_are_a_metadata_error():
    bad = agent_meta(colors=[{"name": "A|1", "color": [1, 2]}])
    event = build_event(payload(bad, {"image_ids": wire(segmentation())}))
    with pytest.raises(MetadataError, match=r"colors\[0\] must be"):
        _ = event.instance_masks
    with pytest.raises(MetadataError, match="colors must be a list"):
        _ = Event({"colors": "red"}).color_to_object_id


def test_detections_do_not_compute_every_mask_up_front():
    event = build_event(payload(agent_meta(), {"image_ids": wire(segmentation())}))
    assert event.instance_detections2D["Table|0|0|0"] == (1, 1, 3, 1)
    assert list(event.instance_masks._cache) == ["Table|0|0|0"]  # only the mask that was asked for


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(min_value=1, max_value=17),
    height=st.integers(min_value=1, max_value=13),
    channels=st.sampled_from([3, 4]),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_any_size_decodes_to_what_was_encoded(width, height, channels, seed):
    local = np.random.default_rng(seed)
    rgb = local.integers(0, 256, (height, width, channels), dtype=np.uint8)
    depth = local.uniform(0, 10, (height, width)).astype("<f4")
    meta = agent_meta(screenWidth=width, screenHeight=height)
    event = build_event(
        payload(meta, {"image": wire(rgb), "image_depth": wire(depth), "image_normals": wire(rgb)})
    )
    np.testing.assert_array_equal(event.frame, rgb[..., :3])
    np.testing.assert_array_equal(event.depth_frame, depth)
    np.testing.assert_array_equal(event.normals_frame, rgb)


def test_a_dropped_event_frees_its_buffers_without_the_cyclic_gc():
    """No reference cycle per event: each step's image buffers (MiB at 1024x1024) go as soon as the next event
    replaces the last one, not whenever the cyclic garbage collector happens to run."""
    import gc
    import weakref

    body = np.frombuffer(wire(rgba()), np.uint8).copy()  # an ndarray can be weakly referenced, bytes cannot
    alive = weakref.ref(body)
    payload = Payload({"agents": [agent_meta()], "sequenceId": 0}, {"image": [memoryview(body)]})
    event = build_event(payload)
    assert event.frame.shape == (H, W, 3) and event.events == [event]
    gc.disable()
    try:
        del body, payload, event
        assert alive() is None
    finally:
        gc.enable()
