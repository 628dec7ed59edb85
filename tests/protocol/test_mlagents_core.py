"""The sans-I/O ML-Agents core against hand-built messages (byte layouts from the communicator's definition)."""

from __future__ import annotations

import io
import struct
import uuid

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

from PIL import Image  # noqa: E402

from unirender.protocol.mlagents import communicator_objects_pb2 as pb  # noqa: E402
from unirender.protocol.mlagents import observations as O  # noqa: E402
from unirender.protocol.mlagents import side_channels as sc  # noqa: E402
from unirender.protocol.mlagents.errors import (  # noqa: E402
    CommunicatorStoppedError,
    MLAgentsProtocolError,
    ObservationError,
    SideChannelError,
    VersionMismatchError,
)
from unirender.protocol.mlagents.steps import ActionTuple  # noqa: E402
from unirender.protocol.mlagents.trainer import CLOSE_MESSAGE, State, TrainerProtocol  # noqa: E402

BEHAVIOR = "Visual?team=0"


def png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def init_request(version="1.5.0", package="2.2.1-exp.1") -> bytes:
    m = pb.UnityMessageProto()
    m.header.status = 200
    init = m.unity_output.rl_initialization_output
    init.name, init.communication_version, init.package_version = "AcademySingleton", version, package
    init.capabilities.baseRLCapabilities = True
    return m.SerializeToString()


def visual_obs(pixels: np.ndarray, layout="HWC") -> pb.ObservationProto:
    h, w, c = pixels.shape
    shape = [h, w, c] if layout == "HWC" else [c, h, w]
    return pb.ObservationProto(shape=shape, compression_type=pb.PNG, compressed_data=png(pixels),
                               dimension_properties=[2, 2, 1] if layout == "HWC" else [1, 2, 2], name="CameraSensor")


def vector_obs(values) -> pb.ObservationProto:
    obs = pb.ObservationProto(shape=[len(values)], dimension_properties=[1], name="VectorSensor_size3")
    obs.float_data.data.extend(values)
    return obs


def output_request(agents, *, brain=True, side_channel=b"", branches=(3,)) -> bytes:
    m = pb.UnityMessageProto()
    m.header.status = 200
    lst = m.unity_output.rl_output.agentInfos[BEHAVIOR].value
    for agent in agents:
        lst.add().CopyFrom(agent)
    m.unity_output.rl_output.side_channel = side_channel
    if brain:
        bp = m.unity_output.rl_initialization_output.brain_parameters.add(brain_name=BEHAVIOR, is_training=True)
        bp.action_spec.num_continuous_actions = 2
        bp.action_spec.num_discrete_actions = len(branches)
        bp.action_spec.discrete_branch_sizes.extend(branches)
    return m.SerializeToString()


def handshake(protocol: TrainerProtocol, package="2.2.1-exp.1") -> None:
    got = protocol.receive(init_request(package=package))
    reply = pb.UnityMessageProto.FromString(got.reply)
    assert reply.header.status == 200
    assert reply.unity_input.rl_initialization_input.communication_version == "1.5.0"
    assert protocol.receive(bytes.fromhex("0a0308c801")).handshake_done
    assert protocol.state is State.READY


def test_handshake_reply_bytes_and_reset_bytes():
    p = TrainerProtocol()
    got = p.receive(init_request())
    # H2 as mlagents-envs 1.1.0 sends it (seed 0 omitted, "1.5.0", package "1.1.0", all seven capabilities,
    # num_areas 1)
    assert got.reply == bytes.fromhex(
        "0a0308c8011a22122012053" "12e352e301a05312e312e3022" "0e080110011801200128013001380128" "01"
    )
    assert got.result is None and p.state is State.AWAIT_ACK
    assert p.receive(bytes.fromhex("0a0308c801")).handshake_done
    assert p.reset() == bytes.fromhex("0a0308c8011a040a022001")
    assert p.close() == CLOSE_MESSAGE == bytes.fromhex("0a03089003")


def test_forced_hwc_announces_the_0_28_generation_and_num_areas_is_sent():
    # H2 exactly as observed from mlagents-envs 0.28.0 (the protocol spec's bytes)
    assert TrainerProtocol(layout="HWC").receive(init_request()).reply == bytes.fromhex(
        "0a0308c8011a23122112053" "12e352e301a06302e32382e3022" "0e080110011801200128013001380128" "01"
    )
    reply = pb.UnityMessageProto.FromString(TrainerProtocol(num_areas=4, seed=9).receive(init_request()).reply)
    init = reply.unity_input.rl_initialization_input
    assert (init.num_areas, init.seed, init.package_version) == (4, 9, "1.1.0")
    with pytest.raises(ValueError, match="num_areas"):
        TrainerProtocol(num_areas=0)


@pytest.mark.parametrize("package,dims,shape,layout", [
    ("2.2.1-exp.1", [1, 2, 2], [3, 4, 5], "CHW"),  # the sensor's dimension properties beat the package's layout
    ("4.0.0", [2, 2, 1], [4, 5, 3], "HWC"),
    ("4.0.0", [], [3, 4, 5], "CHW"),  # none declared: the package's
    ("2.2.1-exp.1", [0, 0, 0], [4, 5, 3], "HWC"),
])  # fmt: skip
def test_a_sensors_layout_comes_from_its_dimension_properties_then_the_package(package, dims, shape, layout):
    p = TrainerProtocol()
    handshake(p, package=package)
    p.reset()
    rgb = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    camera = visual_obs(rgb, layout)
    del camera.dimension_properties[:]
    camera.dimension_properties.extend(dims)
    assert list(camera.shape) == shape
    d = p.receive(output_request([pb.AgentInfoProto(id=0, observations=[camera, vector_obs([0, 0, 0])])])).result
    spec = p.behavior_specs[BEHAVIOR].observation_specs
    assert spec[0].layout == layout and spec[1].layout is None
    np.testing.assert_array_equal(d.decision_steps[BEHAVIOR].frames["CameraSensor"][0], rgb)


def test_generation_layouts():
    from unirender.protocol.mlagents.versions import dimension_layout, trainer_layout, unity_package_layout

    assert [unity_package_layout(v) for v in ("2.2.1-exp.1", "2.3.0-exp.3", "3.0.0", "4.0.0", "")] == [
        "HWC", "HWC", "CHW", "CHW", "HWC"]  # fmt: skip
    assert [trainer_layout(v) for v in ("0.28.0", "0.30.0", "1.0.0", "1.1.0", "1.2.0.dev0", "", "custom")] == [
        "HWC", "HWC", "CHW", "CHW", "CHW", None, None]  # fmt: skip
    assert [dimension_layout(d) for d in ([2, 2, 1], [1, 2, 2], [], [0, 0, 0], [4, 1], [2, 1, 2])] == [
        "HWC", "CHW", None, None, None, None]  # fmt: skip


@pytest.mark.parametrize("theirs", ["2.0.0", "0.15.0", "API-15"])
def test_version_mismatch_names_both_versions(theirs):
    p = TrainerProtocol()
    with pytest.raises(VersionMismatchError) as info:
        p.receive(init_request(version=theirs, package="9.9.9"))
    assert theirs in str(info.value) and "1.5.0" in str(info.value) and "9.9.9" in str(info.value)
    assert p.state is State.CLOSED


def test_minor_version_difference_is_accepted():
    p = TrainerProtocol()
    assert p.receive(init_request(version="1.2.0")).reply


def test_agent_in_both_decision_and_terminal_steps_and_mask():
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    rgb = np.random.default_rng(0).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    a0 = pb.AgentInfoProto(id=0, observations=[visual_obs(rgb), vector_obs([1, 2, 3])], action_mask=[False, True, False])
    a1 = pb.AgentInfoProto(id=1, observations=[visual_obs(rgb), vector_obs([4, 5, 6])])
    result = p.receive(output_request([a0, a1])).result
    spec = p.behavior_specs[BEHAVIOR]
    assert [s.shape for s in spec.observation_specs] == [(4, 5, 3), (3,)]
    assert spec.action_spec.continuous_size == 2 and spec.action_spec.discrete_branches == (3,)
    d = result.decision_steps[BEHAVIOR]
    assert list(d.agent_id) == [0, 1]
    assert [m.tolist() for m in d.action_mask] == [[[False, True, False], [False, False, False]]]
    np.testing.assert_array_equal(d.frames["CameraSensor"][0], rgb)
    np.testing.assert_allclose(d.obs[0][1], rgb / 255.0, atol=1e-7)
    np.testing.assert_array_equal(d.obs[1], [[1, 2, 3], [4, 5, 6]])

    p.step({BEHAVIOR: ActionTuple(np.zeros((2, 2)), np.array([[0], [2]]))})
    finished = pb.AgentInfoProto(id=1, done=True, max_step_reached=True, reward=1.0,
                                 observations=[visual_obs(rgb), vector_obs([0, 0, 0])])  # fmt: skip
    again = pb.AgentInfoProto(id=1, observations=[visual_obs(rgb), vector_obs([7, 8, 9])])
    other = pb.AgentInfoProto(id=0, reward=-0.5, observations=[visual_obs(rgb), vector_obs([1, 1, 1])])
    result = p.receive(output_request([other, finished, again], brain=False)).result
    d, t = result.decision_steps[BEHAVIOR], result.terminal_steps[BEHAVIOR]
    assert list(d.agent_id) == [0, 1] and list(t.agent_id) == [1]
    assert t.interrupted.tolist() == [True] and t.reward.tolist() == [1.0] and d.reward.tolist() == [-0.5, 0.0]
    np.testing.assert_array_equal(d.obs[1][1], [7, 8, 9])
    assert p.decision_counts == {BEHAVIOR: 2}


def test_step_actions_wire_order_and_checks():
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    agents = [pb.AgentInfoProto(id=i, observations=[visual_obs(np.zeros((2, 2, 3), np.uint8)), vector_obs([0, 0, 0])])
              for i in (5, 3)]  # fmt: skip
    p.receive(output_request(agents))
    with pytest.raises(ValueError, match=r"input of dimension \(2, 2\)"):
        p.step({BEHAVIOR: ActionTuple(np.zeros((1, 2)), np.zeros((2, 1)))})
    with pytest.raises(ValueError, match="branch 0 takes 0..2"):
        p.step({BEHAVIOR: ActionTuple(np.zeros((2, 2)), np.array([[0], [3]]))})
    with pytest.raises(ValueError, match="has no behavior"):
        p.step({"Other?team=0": None})
    assert p.state is State.READY  # nothing was sent
    data = p.step({BEHAVIOR: {"continuous": [[0.5, -1], [0.25, 1]], "discrete": [[1], [2]]}})
    sent = pb.UnityMessageProto.FromString(data).unity_input.rl_input
    actions = sent.agent_actions[BEHAVIOR].value
    assert [list(a.continuous_actions) for a in actions] == [[0.5, -1.0], [0.25, 1.0]]
    assert [list(a.discrete_actions) for a in actions] == [[1], [2]]
    assert list(actions[1].vector_actions_deprecated) == [0.25, 1.0, 2.0]
    assert sent.command == pb.STEP
    with pytest.raises(MLAgentsProtocolError, match="needs a pending Unity call"):
        p.step()


def test_unity_close_status_raises():
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    with pytest.raises(CommunicatorStoppedError):
        p.receive(bytes.fromhex("0a03089003"))


@pytest.mark.parametrize("layout,package", [("HWC", "2.2.1-exp.1"), ("CHW", "3.0.0")])
def test_layout_follows_unity_package_version(layout, package):
    p = TrainerProtocol()
    handshake(p, package=package)
    assert p.unity.layout == layout
    p.reset()
    rgb = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    agent = pb.AgentInfoProto(id=0, observations=[visual_obs(rgb, layout), vector_obs([0, 0, 0])])
    d = p.receive(output_request([agent])).result.decision_steps[BEHAVIOR]
    np.testing.assert_array_equal(d.frames["CameraSensor"][0], rgb)  # frames are HWC either way
    expected = rgb / 255.0 if layout == "HWC" else (rgb / 255.0).transpose(2, 0, 1)
    np.testing.assert_allclose(d.obs[0][0], expected, atol=1e-7)


def test_layout_override_wins_and_mismatch_is_a_clear_error():
    p = TrainerProtocol(layout="CHW")
    handshake(p, package="2.2.1-exp.1")
    p.reset()
    rgb = np.zeros((4, 5, 3), np.uint8)
    agent = pb.AgentInfoProto(id=0, observations=[visual_obs(rgb, "HWC"), vector_obs([0, 0, 0])])
    event = p.receive(output_request([agent])).result
    with pytest.raises(ObservationError, match="expected shape"):
        event.frames()  # images are decoded when first read


def test_concatenated_png_with_channel_mapping():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 256, (3, 4, 3), np.uint8), rng.integers(0, 256, (3, 4, 3), np.uint8)
    data = png(a) + png(b)
    assert len(O.split_pngs(data)) == 2
    # 5 channels: a's three, b's first two; b's third is padding (-1)
    pixels = O.decode_png_pixels(data, [3, 4, 5], [0, 1, 2, 3, 4, -1], "HWC")
    np.testing.assert_array_equal(pixels, np.concatenate([a, b[:, :, :2]], axis=2))
    # grayscale stacked frames: each RGB image's channels average into one destination
    gray = O.decode_png_pixels(data, [3, 4, 2], [0, 0, 0, 1, 1, 1], "HWC")
    np.testing.assert_allclose(gray[:, :, 0], a.mean(axis=2), rtol=1e-6)
    np.testing.assert_allclose(gray[:, :, 1], b.mean(axis=2), rtol=1e-6)
    # without a mapping: concatenated and truncated; one channel = mean of the first image
    np.testing.assert_array_equal(O.decode_png_pixels(data, [4, 3, 4], [], "CHW"), np.concatenate([a, b], 2)[:, :, :4])
    np.testing.assert_allclose(O.decode_png_pixels(data, [3, 4, 1], [], "HWC")[:, :, 0], a.mean(axis=2), rtol=1e-6)
    with pytest.raises(ObservationError, match="6 decoded channels"):
        O.decode_png_pixels(data, [3, 4, 5], [0, 1, 2, 3], "HWC")
    with pytest.raises(ObservationError, match="cover"):
        O.decode_png_pixels(data, [3, 4, 2], [0, 2, -1, -1, -1, -1], "HWC")
    with pytest.raises(ObservationError, match="IEND|signature"):
        O.decode_png_pixels(data[:-5], [3, 4, 3], [], "HWC")


def test_raw_float_visual_observation_and_6_mib_message():
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    h, w = 1024, 512  # 1.5 M floats = 6 MiB per agent
    pixels = np.random.default_rng(2).integers(0, 256, (h, w, 3), np.uint8)
    obs = pb.ObservationProto(shape=[h, w, 3], dimension_properties=[2, 2, 1], name="CameraSensor")
    obs.float_data.data.extend((pixels.astype(np.float32) / 255.0).ravel().tolist())
    agent = pb.AgentInfoProto(id=0, observations=[obs, vector_obs([0, 0, 0])])
    data = output_request([agent])
    assert len(data) > 6 * 1024 * 1024
    d = p.receive(data).result.decision_steps[BEHAVIOR]
    np.testing.assert_array_equal(d.frames["CameraSensor"][0], pixels)
    assert d.obs[0].shape == (1, h, w, 3) and d.obs[0].dtype == np.float32


def test_side_channel_layouts():
    gid = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
    assert gid.bytes_le.hex() == "2c3451e97e4fea11b238784f4387d1f7"
    engine = sc.EngineConfig(width=84, height=84, time_scale=20.0, quality_level=5, target_frame_rate=-1,
                             capture_frame_rate=60).messages()  # fmt: skip
    assert [m.payload.hex() for m in engine] == [
        "000000005400000054000000", "0100000005000000", "020000000000a041", "03000000ffffffff", "040000003c000000",
    ]
    assert [sc.parse_engine_setting(m.payload) for m in engine][0] == (sc.EngineSetting.SCREEN_RESOLUTION, (84, 84))
    with pytest.raises(ValueError, match="both width and height"):
        sc.EngineConfig(width=10).messages()
    gravity = sc.environment_parameter_message("gravity", 9.81)
    assert gravity.payload.hex() == "07000000" + b"gravity".hex() + "00000000" + "c3f51c41"
    assert sc.parse_environment_parameter(gravity.payload) == ("gravity", pytest.approx(9.81))
    for sampler in (sc.Sampler.uniform(1, 2, seed=7), sc.Sampler.gaussian(0, 1, seed=3),
                    sc.Sampler.multirange_uniform([(1, 2), (5, 6)], seed=1)):  # fmt: skip
        key, back = sc.parse_environment_parameter(sc.environment_parameter_message("k", sampler).payload)
        assert key == "k" and back == sampler
    uniform = sc.environment_parameter_message("k", sc.Sampler.uniform(1, 2, seed=7)).payload
    assert uniform == b"\x01\x00\x00\x00k" + struct.pack("<iiiff", 1, 7, 0, 1.0, 2.0)
    multi = sc.environment_parameter_message("k", sc.Sampler.multirange_uniform([(1, 2), (5, 6)])).payload
    assert multi[5:] == struct.pack("<iiii4f", 1, 0, 2, 4, 1, 2, 5, 6)
    stats = sc.stats_message("Env/Score", 1.5, sc.StatsAggregation.MOST_RECENT)
    assert stats.payload == struct.pack("<i", 9) + b"Env/Score" + struct.pack("<fi", 1.5, 1)
    raw = sc.raw_bytes_message("12345678-1234-5678-1234-567812345678", b"\x00\xffhello")
    framed = sc.encode_records([gravity, stats, raw])
    assert framed[:20] == sc.ENVIRONMENT_PARAMETERS.bytes_le + struct.pack("<i", len(gravity.payload))
    assert sc.decode_records(framed) == [gravity, stats, raw]
    with pytest.raises(SideChannelError, match="announces"):
        sc.decode_records(framed[:-1])
    with pytest.raises(SideChannelError, match="ASCII"):
        sc.PayloadWriter().string("grav\u00eety")
    reader = sc.PayloadReader(b"\x01\x00")  # reads past the end give the default
    assert reader.int32(-7) == -7 and reader.float32(2.5) == 2.5 and reader.string("d") == "d"


def test_stats_collected_and_unknown_channels_kept():
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    unknown = sc.SideChannelMessage(uuid.uuid4(), b"keep me")
    records = sc.encode_records([sc.stats_message("Env/Score", 1.0), unknown, sc.stats_message("Env/Score", 3.0)])
    agent = pb.AgentInfoProto(id=0, observations=[visual_obs(np.zeros((2, 2, 3), np.uint8)), vector_obs([0, 0, 0])])
    result = p.receive(output_request([agent], side_channel=records)).result
    assert result.stats == {"Env/Score": [(1.0, sc.StatsAggregation.AVERAGE), (3.0, sc.StatsAggregation.AVERAGE)]}
    assert result.side_channel_messages == [unknown]


def test_garbage_and_out_of_order_requests():
    p = TrainerProtocol()
    with pytest.raises(MLAgentsProtocolError, match="not a UnityMessageProto"):
        p.receive(b"\xff\xff\xff")
    with pytest.raises(MLAgentsProtocolError, match="rl_initialization_output"):
        TrainerProtocol().receive(bytes.fromhex("0a0308c801"))
    with pytest.raises(MLAgentsProtocolError, match="needs a pending"):
        TrainerProtocol().reset()
    q = TrainerProtocol()
    handshake(q)
    with pytest.raises(MLAgentsProtocolError, match="one call at a time"):
        q.receive(bytes.fromhex("0a0308c801"))


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_side_channel_bytes_raise_a_clear_error_or_parse(data):
    try:
        records = sc.decode_records(data)
    except SideChannelError:
        return
    assert sc.encode_records(records) == data  # whatever parses frames back to the same bytes


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_requests_raise_protocol_errors_only(data):
    for protocol in (TrainerProtocol(), _ready_protocol()):
        try:
            got = protocol.receive(data)
        except MLAgentsProtocolError:
            continue
        if got.result is not None:  # a message that happens to parse: its images decode or fail clearly
            for steps in got.result.decision_steps.values():
                try:
                    assert all(f.dtype == np.uint8 for f in steps.frames.values())
                except MLAgentsProtocolError:
                    pass


def _ready_protocol() -> TrainerProtocol:
    p = TrainerProtocol()
    handshake(p)
    p.reset()
    rgb = np.zeros((2, 2, 3), np.uint8)
    p.receive(output_request([pb.AgentInfoProto(id=0, observations=[visual_obs(rgb), vector_obs([0, 0, 0])])]))
    p.step()
    return p


def test_png_decoders_agree_and_reject_garbage():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (7, 9, 3), np.uint8)
    gray = rng.integers(0, 256, (7, 9), np.uint8)
    for image in (rgb, gray):
        data = png(image)
        np.testing.assert_array_equal(O.decode_png(data), O.decode_png_pillow(data))
        np.testing.assert_array_equal(O.decode_png(data).reshape(image.shape), image)
    broken = bytearray(png(rgb))
    broken[40:60] = b"\x00" * 20  # inside the compressed pixels
    for decode in (O.decode_png, O.decode_png_pillow):
        with pytest.raises(ObservationError, match="not a decodable PNG"):
            decode(bytes(broken))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 6), branches=st.lists(st.integers(1, 5), max_size=3), seed=st.integers(0, 2**32 - 1),
       density=st.floats(0, 1), data=st.data())
def test_random_actions_never_take_a_masked_choice(n, branches, seed, density, data):
    """The random policy's discrete draws: only choices the mask leaves; uniform over them; without a mask (or
    with nothing masked) the same draws as before masks were honoured; continuous-only specs work too."""
    from unirender.protocol.mlagents.steps import ActionSpec

    spec = ActionSpec(continuous_size=2, discrete_branches=tuple(branches))
    mask = [np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=b, max_size=b), min_size=n, max_size=n)),
                     bool).reshape(n, b) & (np.random.default_rng(seed).random((n, b)) < density) for b in branches]
    actions = spec.random(n, np.random.default_rng(seed), mask)
    assert actions.continuous.shape == (n, 2) and actions.discrete.shape == (n, len(branches))
    for k, forbidden in enumerate(mask):
        for agent in range(n):
            choice = actions.discrete[agent, k]
            assert 0 <= choice < branches[k]
            if not forbidden[agent].all():
                assert not forbidden[agent, choice]
    rng = np.random.default_rng(seed)  # the draws of the unmasked rule: continuous first, then branch by branch
    rng.uniform(-1.0, 1.0, (n, 2))
    legacy = np.zeros((n, len(branches)), np.int32)
    for k, b in enumerate(branches):
        legacy[:, k] = rng.integers(0, b, n)
    unmasked = [np.zeros((n, b), bool) for b in branches]
    assert np.array_equal(spec.random(n, np.random.default_rng(seed), unmasked).discrete, legacy)
    assert np.array_equal(spec.random(n, np.random.default_rng(seed)).discrete, legacy)


def test_masked_random_choices_are_uniform_over_the_allowed_ones():
    from unirender.protocol.mlagents.steps import ActionSpec

    spec = ActionSpec(continuous_size=0, discrete_branches=(4,))
    mask = [np.tile(np.array([[False, True, False, True]]), (20000, 1))]
    chosen = spec.random(20000, np.random.default_rng(1), mask).discrete[:, 0]
    counts = np.bincount(chosen, minlength=4)
    assert counts[1] == counts[3] == 0 and abs(counts[0] - counts[2]) < 800  # ~10,000 each
