"""MLAgentsController + the reference player over real gRPC on 127.0.0.1, on both renderers."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("grpc")

from unirender.errors import PlayerCrashedError, PlayerTimeoutError, RestartError  # noqa: E402
from unirender.mlagents import MLAgentsController, Sampler  # noqa: E402
from unirender.player.mlagents import game as G  # noqa: E402
from unirender.player.render import create_renderer  # noqa: E402

PLATFORM_BACKENDS = {"EGL": "egl", "CloudRendering": "vulkan"}
PLAYER_ENV = {"UNIRENDER_MLAGENTS_MAX_STEP": "20"}


def make(platform="EGL", **kwargs) -> MLAgentsController:
    kwargs.setdefault("time_scale", 100.0)
    kwargs.setdefault("timeout", 30.0)
    kwargs.setdefault("env", PLAYER_ENV)
    return MLAgentsController("builtin", platform=platform, **kwargs)


def reference_frame(backend: str, decision, index: int, light: float = 1.0, size=(84, 84)) -> np.ndarray:
    """Render agent ``index``'s camera from the poses in the vector observations, in this process."""
    vectors = decision.obs[1]
    poses = [(v[0], v[1], v[2]) for v in vectors]
    target = (vectors[0][3], vectors[0][4])
    renderer = create_renderer(backend, *size)
    try:
        renderer.set_scene(*G.render_scene(poses, target, light))
        x, z, yaw = poses[index]
        return G.frame_from_render(renderer.render(G.agent_camera(x, z, yaw), {"rgb"})["rgb"])
    finally:
        renderer.close()


def allowed_actions(spec, decision, rng):
    """Random actions that respect the mask (sprint is forbidden near the edge)."""
    actions = spec.random(len(decision), rng)
    masked = decision.action_mask[0]
    for i in range(len(decision)):
        while masked[i, actions.discrete[i, 0]]:
            actions.discrete[i, 0] = rng.integers(0, 3)
    return actions


@pytest.fixture(scope="module", params=list(PLATFORM_BACKENDS))
def controller(request):
    c = make(request.param)
    c.backend = PLATFORM_BACKENDS[request.param]
    yield c
    c.close()


def test_handshake_50_random_steps_and_frames_match_a_render(controller):
    # the player behaves as a current game (package 4.x: CHW) for a current trainer (we announce 1.1.0)
    assert controller.unity.communication_version == "1.5.0" and controller.unity.layout == "CHW"
    assert controller.unity.package_version == "4.0.0"
    event = controller.reset()
    spec = controller.behavior_specs[G.BEHAVIOR]
    assert [(o.name, o.shape, o.dimension_property) for o in spec.observation_specs] == [
        ("CameraSensor", (3, 84, 84), (1, 2, 2)), ("VectorSensor_size8", (8,), (1,))]  # fmt: skip
    assert spec.action_spec.continuous_size == 2 and spec.action_spec.discrete_branches == (3,)
    rng = np.random.default_rng(7)
    stats, both = {}, False
    for _ in range(50):
        decision, _ = event.steps()
        event = controller.step(allowed_actions(spec.action_spec, decision, rng))
        decision, terminal = event.steps()
        assert len(decision) == 2 and event.frames()["CameraSensor"].dtype == np.uint8
        both |= bool(set(decision.agent_id) & set(terminal.agent_id))
        for key, values in event.stats.items():
            stats.setdefault(key, []).extend(values)
    assert both, "max_step=20: interrupted agents must be in the terminal and the decision steps of one step"
    assert len(stats["Environment/Episode Length"]) >= 4
    frames = event.frames()["CameraSensor"]
    for i in range(2):
        expected = reference_frame(controller.backend, decision, i)
        np.testing.assert_array_equal(frames[i], expected)
        np.testing.assert_allclose(decision.obs[0][i], expected.transpose(2, 0, 1) / 255.0, atol=1e-6)
    assert len(np.unique(frames[0].reshape(-1, 3), axis=0)) >= 2  # sky and floor at least: not a blank


def test_reset_starts_new_episodes_and_light_changes_the_frame(controller):
    event = controller.reset()
    decision, terminal = event.steps()
    assert decision.obs[1][:, 7].tolist() == [0.0, 0.0] and len(terminal) == 0  # step/max_step back to 0
    still = {"continuous": np.zeros((2, 2)), "discrete": np.full((2, 1), 2)}  # stand still
    before = controller.step(still).frames()["CameraSensor"].copy()
    controller.set_environment_parameters(light_intensity=0.2)
    event = controller.step(still)
    decision, _ = event.steps()
    after = event.frames()["CameraSensor"]
    assert after.mean() < before.mean() - 5
    np.testing.assert_array_equal(after[0], reference_frame(controller.backend, decision, 0, light=0.2))
    controller.set_environment_parameters(light_intensity=1.0)
    with pytest.raises(ValueError, match=r"input of dimension \(2, 2\)"):
        controller.step({"continuous": np.zeros((3, 2))})
    controller.step(still)  # the bad call sent nothing: the controller is still usable


@pytest.mark.parametrize("package,layout", [("2.2.1-exp.1", "HWC"), ("3.0.0", "CHW")])
def test_forced_package_and_engine_resolution(package, layout):
    """UNIRENDER_MLAGENTS_PACKAGE_VERSION fixes the player's generation whatever the trainer announces."""
    env = {**PLAYER_ENV, "UNIRENDER_MLAGENTS_PACKAGE_VERSION": package, "UNIRENDER_MLAGENTS_AGENTS": "1"}
    with make(width=48, height=32, env=env) as c:
        assert c.unity.layout == layout and c.unity.package_version == package
        event = c.reset()
        spec = c.behavior_specs[G.BEHAVIOR]
        assert spec.observation_specs[0].shape == ((32, 48, 3) if layout == "HWC" else (3, 32, 48))
        decision, _ = event.steps()
        frame = event.frames()["CameraSensor"][0]
        assert frame.shape == (32, 48, 3)  # frames are HWC whatever the game writes
        expected = reference_frame("egl", decision, 0, size=(48, 32))
        np.testing.assert_array_equal(frame, expected)
        values = expected if layout == "HWC" else expected.transpose(2, 0, 1)
        np.testing.assert_allclose(decision.obs[0][0], values / 255.0, atol=1e-6)


def test_a_trainer_forcing_hwc_gets_a_2x_game():
    """layout="HWC" announces mlagents-envs 0.28.0: the player then writes a 2.x game's HWC images (it announced
    4.0.0 before it knew the trainer, as a game must; the sensors' dimension properties say HWC)."""
    with make(layout="HWC", env={**PLAYER_ENV, "UNIRENDER_MLAGENTS_AGENTS": "1"}) as c:
        event = c.reset()
        obs_spec = c.behavior_specs[G.BEHAVIOR].observation_specs[0]
        assert (obs_spec.shape, obs_spec.dimension_property, obs_spec.layout) == ((84, 84, 3), (2, 2, 1), "HWC")
        decision, _ = event.steps()
        np.testing.assert_array_equal(event.frames()["CameraSensor"][0], reference_frame("egl", decision, 0))
        assert "HWC (a package 2.2.1-exp.1 game, for mlagents-envs 0.28.0)" in open(c.log_path).read()


def test_raw_1024_camera_passes_the_message_limit():
    env = {**PLAYER_ENV, "UNIRENDER_MLAGENTS_CAMERA_COMPRESSION": "none", "UNIRENDER_MLAGENTS_AGENTS": "1"}
    with make(width=1024, height=1024, env=env) as c:
        event = c.reset()  # 12 MiB of floats in one message: over gRPC's 4 MiB default
        frame = event.frames()["CameraSensor"][0]
        assert frame.shape == (1024, 1024, 3) and len(np.unique(frame.reshape(-1, 3), axis=0)) >= 2


def test_sigkill_mid_step_detected_within_a_second_then_restart():
    with make(max_restarts=1) as c:
        c.reset()
        first_pid = c.process.pid
        killed = threading.Timer(0.05, os.kill, (first_pid, signal.SIGKILL))
        started = time.monotonic()
        killed.start()
        with pytest.raises(RestartError) as info:
            while True:  # steps until the kill lands in one
                c.step()
        crash = info.value.__cause__
        assert isinstance(crash, PlayerCrashedError) and crash.signal_name == "SIGKILL"
        assert "ML-Agents" in str(crash) and c.log_path in str(crash)
        assert c.process.pid != first_pid
        assert len(c.reset().steps()[0]) == 2  # the restarted player plays
        # a second crash exceeds max_restarts=1: reported, not restarted; detection is timed from the kill
        pid = c.process.pid
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(PlayerCrashedError, match="SIGKILL"):
            c.step()
        assert time.monotonic() - started < 1.0
        assert c.process is None


def test_sigstop_hang_times_out_and_close_leaves_nothing(tmp_path):
    c = make(timeout=1.5, log_dir=tmp_path)
    c.close_grace_s = 0.2
    c.reset()
    pid, port, log_path = c.process.pid, c.port, c.log_path
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(PlayerTimeoutError, match="within 1.5 s"):
        c.step()
    assert c.process is None  # closed after a hang
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    _assert_released(port, log_path)


def test_close_leaves_no_process_port_or_log_handle(tmp_path):
    c = make(log_dir=tmp_path)
    c.reset()
    pid, port, log_path = c.process.pid, c.port, c.log_path
    c.close()
    c.close()  # idempotent
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    _assert_released(port, log_path)
    assert "ML-Agents player" in open(log_path).read()  # the player wrote its log where -logFile said


def _assert_released(port: int, log_path: str) -> None:
    with socket.socket() as s:  # nobody listens there any more (SO_REUSEADDR: TIME_WAIT leftovers don't count)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    open_files = {os.path.realpath(os.path.join("/proc/self/fd", fd)) for fd in os.listdir("/proc/self/fd")}
    assert os.path.realpath(log_path) not in open_files


def test_executable_none_waits_for_a_player_started_elsewhere(tmp_path):
    """Editor mode: nothing is launched; a player started by hand on the port (after we listen) connects."""
    import sys

    from unirender._process import ManagedProcess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    players = []

    def start_player():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # like pressing Play once the trainer listens (an event: it accepts)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        env = {**os.environ, "UNIRENDER_MLAGENTS_AGENTS": "1"}
        players.append(ManagedProcess([sys.executable, "-m", "unirender.player", "--mlagents-port", str(port)],
                                      env=env, log_path=tmp_path / "player.log"))  # fmt: skip

    threading.Thread(target=start_player).start()
    try:
        with MLAgentsController(None, port=port, start_timeout=60, time_scale=20.0) as c:
            assert c.process is None and c.port == port
            event = c.reset()
            assert len(event.steps()[0]) == 1
            assert event.frames()["CameraSensor"].shape == (1, 84, 84, 3)
        assert players[0].wait(10) == 0  # the close message made it quit by itself
    finally:
        for p in players:
            p.terminate(0.5)


def test_step_before_reset_resets_and_actions_for_one_behavior_need_no_name():
    dim = Sampler.uniform(0.1, 0.2, seed=1)  # drawn by the player at each episode start
    with make(time_scale=1.0, env={**PLAYER_ENV, "UNIRENDER_MLAGENTS_AGENTS": "1"},
              environment_parameters={"light_intensity": dim}) as c:  # fmt: skip
        event = c.step()  # no episode yet: resets, as mlagents-envs does
        assert event.steps()[0].obs[1][0, 7] == 0.0 and c.behavior_names == [G.BEHAVIOR]
        frame, decision = event.frames()["CameraSensor"][0], event.steps()[0]
        bright, dark = (reference_frame("egl", decision, 0, light=v) for v in (0.2, 0.1))
        assert dark.mean() <= frame.mean() <= bright.mean() and not np.array_equal(frame, bright)
        before = event.steps()[0].obs[1][0, :3].copy()
        event = c.step({"continuous": [[1.0, 0.0]], "discrete": [[0]]})  # walk straight ahead
        after = event.steps()[0].obs[1][0, :3]
        assert np.hypot(*(after[:2] - before[:2])) == pytest.approx(G.MOVE_M, abs=1e-4) or max(map(abs, after[:2])) > 4
        with pytest.raises(ValueError, match="continuous and discrete actions"):
            c.step(np.zeros((1, 2)))  # a bare array for a behavior with continuous and discrete actions
        # time scale 1 = real time: 10 Academy steps of 0.02 s take about 0.2 s (a lower bound: load only adds)
        started = time.monotonic()
        for _ in range(10):
            c.step()
        assert time.monotonic() - started >= 0.15
        assert "TIME_SCALE (1.0,)" in open(c.log_path).read()
