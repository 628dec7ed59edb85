"""mlagents-envs' side channels on ``unirender.mlagents.UnityEnvironment``, both ways, over the reference game:
engine configuration and environment parameters change what the game renders, stats come back, a user's own
``SideChannel`` subclass receives the game's records and its own messages reach the game."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import numpy as np
import pytest

from unirender.mlagents import (
    UnityEnvironment,
    UnityEnvironmentException,
    UnityObservationException,
    UnitySideChannelException,
)
from unirender.mlagents.side_channel import IncomingMessage, OutgoingMessage, SideChannel
from unirender.mlagents.side_channel.engine_configuration_channel import (
    EngineConfig,
    EngineConfigurationChannel,
)
from unirender.mlagents.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from unirender.mlagents.side_channel.float_properties_channel import FloatPropertiesChannel
from unirender.mlagents.side_channel.side_channel_manager import SideChannelManager
from unirender.mlagents.side_channel.stats_side_channel import StatsAggregationMethod, StatsSideChannel
from unirender.protocol.mlagents import side_channels as core

BEHAVIOR = "ReachTarget?team=0"
MAX_STEP = 6


class StringLogChannel(SideChannel):
    """The custom channel of ml-agents' docs/Custom-SideChannels.md (strings both ways)."""

    def __init__(self) -> None:
        super().__init__(uuid.UUID("621f0a70-4f87-11ea-a6bf-784f4387d1f7"))
        self.received: list[str] = []

    def on_message_received(self, msg: IncomingMessage) -> None:
        self.received.append(msg.read_string())

    def send_string(self, data: str) -> None:
        msg = OutgoingMessage()
        msg.write_string(data)
        super().queue_message_to_send(msg)


class StatsReader(SideChannel):
    """A user's own channel on the stats channel's id: it reads the game's records itself."""

    def __init__(self) -> None:
        super().__init__(uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520"))
        self.records: list[tuple[str, float, int]] = []

    def on_message_received(self, msg: IncomingMessage) -> None:
        self.records.append((msg.read_string(), msg.read_float32(), msg.read_int32()))


def make(channels, monkeypatch):
    monkeypatch.setenv("UNIRENDER_MLAGENTS_MAX_STEP", str(MAX_STEP))
    return UnityEnvironment(file_name="builtin", side_channels=channels, timeout_wait=60)


def test_engine_configuration_and_environment_parameters_reach_the_game(monkeypatch):
    engine, parameters, stats = EngineConfigurationChannel(), EnvironmentParametersChannel(), StatsSideChannel()
    env = make([engine, parameters, stats], monkeypatch)
    try:
        engine.set_configuration_parameters(width=64, height=40, time_scale=100.0)
        env.reset()
        assert env.behavior_specs[BEHAVIOR].observation_specs[0].shape in {(40, 64, 3), (3, 40, 64)}  # HWC or CHW
        bright = env.get_steps(BEHAVIOR)[0].obs[0].mean()
        parameters.set_float_parameter("light_intensity", 0.2)  # sent with the next step, read at reset
        env.step()
        env.reset()
        dim = env.get_steps(BEHAVIOR)[0].obs[0].mean()
        assert dim < bright - 0.05  # the light is part of the shading (the sky is not)
        parameters.set_uniform_sampler_parameters("light_intensity", 0.9, 1.0, seed=3)
        parameters.set_gaussian_sampler_parameters("target_red", 0.5, 0.01, seed=4)
        parameters.set_multirangeuniform_sampler_parameters("target_green", [(0.0, 0.1), (0.2, 0.3)], seed=5)
        env.reset()
        assert env.get_steps(BEHAVIOR)[0].obs[0].mean() > dim + 0.05
        # A spec is fixed once announced: a camera resized afterwards no longer matches it, which the images
        # say when they are read (mlagents-envs' exception; the rest of the step stays readable).
        engine.set_configuration(EngineConfig(32, 32, None, 100.0, None, None))
        env.reset()
        decision = env.get_steps(BEHAVIOR)[0]
        with pytest.raises(UnityObservationException, match=r"not \(40, 64, 3\)"):
            _ = decision.obs
        assert len(decision) == 2 and decision.reward.shape == (2,)
        engine.set_configuration_parameters(width=64, height=40)
        for _ in range(MAX_STEP):
            env.step()
        got = stats.get_and_reset_stats()
        assert [value for value, _ in got["Environment/Episode Length"]] == [MAX_STEP, MAX_STEP]
        assert all(agg is StatsAggregationMethod.AVERAGE for _, agg in got["Environment/Cumulative Reward"])
        assert stats.get_and_reset_stats() == {}
    finally:
        env.close()


def test_a_users_own_channels_both_ways(monkeypatch):
    strings, reader = StringLogChannel(), StatsReader()
    env = make([strings, reader], monkeypatch)
    try:
        strings.send_string("hello from python")
        env.reset()  # queued messages ride along the next reset or step
        assert strings.message_queue == []
        for _ in range(MAX_STEP):
            env.step()
        assert sorted(key for key, _, _ in reader.records) == ["Environment/Cumulative Reward"] * 2 + [
            "Environment/Episode Length"
        ] * 2
        assert [value for key, value, _ in reader.records if key.endswith("Length")] == [MAX_STEP, MAX_STEP]
        assert strings.received == []  # the reference game never writes on it
        log = Path(env.log_path).read_text()
        payload = len(b"hello from python") + 4
        assert f"side channel data for unknown channel {strings.channel_id} ({payload} bytes)" in log
    finally:
        env.close()


def test_engine_channel_checks_like_mlagents_envs():
    engine = EngineConfigurationChannel()
    with pytest.raises(UnitySideChannelException, match="without also setting the height/width"):
        engine.set_configuration_parameters(width=10)
    engine.set_configuration_parameters(width=10, height=20, quality_level=1, time_scale=2.0,
                                        target_frame_rate=30, capture_frame_rate=60)  # fmt: skip
    # one record per setting, each its tag then its values, exactly what the core encodes
    expected = core.EngineConfig(10, 20, 1, 2.0, 30, 60).messages()
    assert [bytes(m) for m in engine.message_queue] == [r.payload for r in expected]
    assert engine.message_queue[0] == struct.pack("<iii", 0, 10, 20)


def test_messages_and_manager_framing():
    out = OutgoingMessage()
    out.write_bool(True)
    out.write_int32(-7)
    out.write_float32(1.5)
    out.write_float32_list([0.25, 0.5])
    out.write_string("key")
    message = IncomingMessage(bytes(out.buffer))
    assert message.read_bool() is True and message.read_int32() == -7 and message.read_float32() == 1.5
    assert message.read_float32_list() == [0.25, 0.5] and message.read_string() == "key"
    assert message.read_int32(default_value=42) == 42  # past the end: the default, as mlagents-envs
    assert message.get_raw_bytes() == out.buffer

    properties = FloatPropertiesChannel()
    properties.set_property("gravity", -9.8)
    manager = SideChannelManager([properties])
    framed = bytes(manager.generate_side_channel_messages())
    assert framed[:16] == properties.channel_id.bytes_le and struct.unpack_from("<i", framed, 16)[0] == len(framed) - 20
    manager.process_side_channel_message(framed)  # the game sending the same property back
    assert properties.get_property("gravity") == pytest.approx(-9.8) and properties.list_properties() == ["gravity"]
    with pytest.raises(UnityEnvironmentException, match="problem reading a message in a SideChannel"):
        manager.process_side_channel_message(framed[:-1])
    with pytest.raises(UnityEnvironmentException, match="cannot be two side channels with the same channel id"):
        SideChannelManager([StatsSideChannel(), StatsReader()])


def test_stats_records_reach_the_channel_unchanged():
    stats = StatsSideChannel()
    SideChannelManager([stats]).deliver([core.stats_message("a", 2.0, core.StatsAggregation.SUM)])
    assert dict(stats.get_and_reset_stats()) == {"a": [(2.0, StatsAggregationMethod.SUM)]}
    assert np.float32(2.0) == 2.0
