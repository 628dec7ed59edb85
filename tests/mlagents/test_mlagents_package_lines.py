"""MLAgentsController against a stand-in game of each com.unity.ml-agents line users have (2.x HWC, 3.x and 4.x
CHW; ``fixtures/mlagents_game.py``), over real gRPC on 127.0.0.1: grayscale, stacked (concatenated PNGs with a
channel mapping) and grid cameras, variable-length, goal-signal and stacked vector sensors, ``num_areas``, groups,
a behavior appearing mid-run, and the stats / echo side channels. Frames come out HWC whatever the line writes."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from fixtures import mlagents_game as game
from unirender.mlagents import MLAgentsController
from unirender.protocol.mlagents.side_channels import StatsAggregation

COLLECTOR, SCOUT = game.COLLECTOR, game.SCOUT
H, W = game.CAMERA_H, game.CAMERA_W
VISUAL = {"CameraGray": (H, W, 1), "CameraRGB": (H, W, 3), "GridSensor": (game.GRID_H, game.GRID_W, 5),
          "StackingSensor_size2_CameraRGB": (H, W, 6), "StackingSensor_size4_CameraGray": (H, W, 4)}  # fmt: skip
VECTOR = {"BufferSensor": (4, 3), "GoalSensor": (2,), "StackingSensor_size3_Velocity": (6,), "VectorSensor_size6": (6,)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected_frames(agent_id: int, step: int, history: dict) -> dict[str, np.ndarray]:
    """What each visual sensor of a Collector agent shows, HWC uint8, computed from the stand-in's pictures."""
    def black():
        return np.zeros((H, W, 3), np.uint8)

    def gray(rgb):
        return np.rint(rgb.astype(np.float32).mean(axis=2, keepdims=True)).astype(np.uint8)

    if step == 0:  # a new episode: the stacks start black again
        history[agent_id] = []
    steps = history.setdefault(agent_id, [])
    steps.append(step)
    rgb_stack = [game.image(agent_id, s, game.STACK_RGB) if s is not None else black() for s in ([None] + steps)[-2:]]
    gray_stack = [game.image(agent_id, s, game.STACK_GRAY) if s is not None else black()
                  for s in ([None] * 3 + steps)[-4:]]  # fmt: skip
    return {
        "CameraGray": gray(game.image(agent_id, step, game.CAMERA_GRAY)),
        "CameraRGB": game.image(agent_id, step, game.CAMERA_RGB),
        "GridSensor": (game.grid(step, agent_id) * 255).astype(np.uint8),
        "StackingSensor_size2_CameraRGB": np.concatenate(rgb_stack, axis=2),
        "StackingSensor_size4_CameraGray": np.concatenate([gray(f) for f in gray_stack], axis=2),
    }


def check_collector_frames(decision, histories: dict) -> None:
    frames = decision.frames
    assert set(frames) == set(VISUAL)
    vectors = decision.obs[-1]  # VectorSensor_size6: [id, step, area, ...]
    for i, agent_id in enumerate(decision.agent_id):
        step = int(vectors[i, 1])
        for name, want in expected_frames(int(agent_id), step, histories).items():
            assert frames[name].shape == (len(decision), *VISUAL[name]) and frames[name].dtype == np.uint8
            np.testing.assert_array_equal(frames[name][i], want, err_msg=f"{name} of agent {agent_id}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("compression", ["png", "none"])
@pytest.mark.parametrize("line", list(game.LINES))
def test_controller_against_each_package_line(line, compression, tmp_path):
    package, layout = game.LINES[line]
    port = free_port()
    process = game.start(port, line, tmp_path / "stand-in.log", compression)
    try:
        with MLAgentsController(None, port=port, num_areas=2, seed=11, time_scale=5.0, start_timeout=60, timeout=15,
                                environment_parameters={"reward_scale": 2.0}) as c:  # fmt: skip
            assert (c.unity.package_version, c.unity.layout) == (package, layout)
            event = c.reset()
            assert c.behavior_names == [COLLECTOR] and event.new_behaviors == [COLLECTOR]
            spec = c.behavior_specs[COLLECTOR]
            names = sorted({**VISUAL, **VECTOR})
            assert spec.sensor_names == names
            by_name = {o.name: o for o in spec.observation_specs}
            for name, hwc in VISUAL.items():  # the wire's shapes and dimension properties, in the line's layout
                h, w, ch = hwc
                o = by_name[name]
                assert o.shape == ((h, w, ch) if layout == "HWC" else (ch, h, w)) and o.layout == layout
                assert o.dimension_property == ((2, 2, 1) if layout == "HWC" else (1, 2, 2))
            assert by_name["BufferSensor"].dimension_property == (4, 1) and by_name["BufferSensor"].layout is None
            assert by_name["GoalSensor"].observation_type == 1 and by_name["CameraRGB"].observation_type == 0
            assert (spec.action_spec.continuous_size, spec.action_spec.discrete_branches) == (1, (2, 3))
            described = {o.key: o.shape for o in c.describe().observations if o.kind == "image"}  # as frames() gives
            assert described == {f"{COLLECTOR}/{name}": hwc for name, hwc in VISUAL.items()}

            decision, terminal = event.steps()
            assert decision.agent_id.tolist() == [0, 1, 2, 3] and len(terminal) == 0  # 2 areas x 2 agents
            assert decision.group_id.tolist() == [1, 1, 2, 2]
            histories: dict = {}
            check_collector_frames(decision, histories)
            for i, name in enumerate(names):  # mlagents-envs' float view: the declared shape, images / 255
                assert decision.obs[i].shape == (4, *by_name[name].shape) and decision.obs[i].dtype == np.float32
            camera = decision.obs[names.index("CameraRGB")]
            hwc = camera if layout == "HWC" else camera.transpose(0, 2, 3, 1)
            np.testing.assert_allclose(hwc * 255, decision.frames["CameraRGB"], atol=1e-3)
            np.testing.assert_array_equal(decision.obs[names.index("GoalSensor")], [[0, 1], [0, 1], [1, 1], [1, 1]])
            mask = decision.action_mask
            assert [m.shape for m in mask] == [(4, 2), (4, 3)] and not mask[0].any()  # step 0: nothing masked

            stats = {key: list(values) for key, values in event.stats.items()}
            scout_seen = scout_ended = collector_ended = echoed = False
            for k in range(1, 7):
                if k == 3:
                    c.send_side_channel(game.ECHO_CHANNEL, b"ping")
                actions = {COLLECTOR: {"continuous": [[0.25 * i] for i in range(4)],
                                       "discrete": [[0, (k + i) % 3] for i in range(4)]}}  # fmt: skip
                if SCOUT in c.behavior_specs:
                    actions[SCOUT] = [[3], [1]]  # scout 0 ends its episode, scout 1 goes on
                event = c.step(actions)
                for key, values in event.stats.items():
                    stats.setdefault(key, []).extend(values)
                echoed |= any(m.channel_id == game.ECHO_CHANNEL and m.payload == b"echo:ping"
                              for m in event.side_channel_messages)  # fmt: skip
                decision, terminal = event.steps(COLLECTOR)
                vectors = decision.obs[names.index("VectorSensor_size6")]
                np.testing.assert_allclose(vectors[:, 3], [0.25 * i for i in range(4)])  # our actions, in order
                assert vectors[:, 5].tolist() == [(k + i) % 3 for i in range(4)]
                for i, (agent_id, step) in enumerate(vectors[:, :2].astype(int)):  # t % 4 entities, zero padded
                    entities = np.zeros((4, 3), np.float32)
                    for e in range(step % 4):
                        entities[e] = [agent_id, step, e]
                    np.testing.assert_array_equal(decision.obs[names.index("BufferSensor")][i], entities)
                check_collector_frames(decision, histories)
                if k == game.MAX_STEP:  # every Collector's episode hit max_step: terminal (interrupted) and new
                    assert terminal.agent_id.tolist() == [0, 1, 2, 3] and terminal.interrupted.all()
                    assert terminal.group_reward.tolist() == [0.5] * 4 and decision.obs[-1][:, 1].tolist() == [0] * 4
                    collector_ended = True
                if SCOUT in event.new_behaviors:
                    assert k == game.SCOUT_FROM_STEP + 1 and c.behavior_specs[SCOUT].action_spec.discrete_branches == (4,)
                    with pytest.raises(ValueError, match="pass a behavior name"):
                        event.frames()
                    scout_seen = True
                elif scout_seen:
                    scout_decision, scout_terminal = event.steps(SCOUT)
                    assert len(scout_decision) == 2 and scout_decision.frames == {}
                    if len(scout_terminal):
                        assert scout_terminal.interrupted.tolist() == [False]
                        assert scout_terminal.reward.tolist() == pytest.approx([1.0 + 0.2 * 2.0])
                        scout_ended = True
            assert scout_seen and scout_ended and collector_ended and echoed
            assert stats["Engine/TimeScale"][0] == (5.0, StatsAggregation.MOST_RECENT)
            assert stats["Academy/NumAreas"][0][0] == 2.0 and stats["Academy/Seed"][0][0] == 11.0
            assert stats["Collector/Reward"][0] == (pytest.approx(0.2), StatsAggregation.AVERAGE)
            assert {a for _, a in stats["Collector/Histogram"]} == {StatsAggregation.HISTOGRAM}
            assert {a for _, a in stats["Collector/Steps"]} == {StatsAggregation.SUM}
            with pytest.raises(ValueError, match="discrete branch 1 takes 0..2"):
                c.step({COLLECTOR: {"continuous": [[0.0]] * 4, "discrete": [[0, 3]] * 4}})
            c.step()  # nothing was sent by the bad call; zeros for everyone
        assert process.wait(10) == 0, (tmp_path / "stand-in.log").read_text()
    except Exception as exc:
        exc.add_note(f"stand-in game's log:\n{(tmp_path / 'stand-in.log').read_text()[-3000:]}")
        raise
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
