"""The real Controller driving the spec-exact fake player over both transports.

Every test also checks cleanup (``no_leaks``: no child process, no FIFO temp dir left). Platform is pinned to
CloudRendering (lavapipe): no X server needed, and the start sequence then always sends ChangeQuality (action 1).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from fixtures import fake_player_exe, no_leaks  # noqa: F401
from fixtures.fake_player import OBJECTS, SCENES, wire_image
from unirender import Controller, MultiAgentEvent
from unirender.errors import ActionError, PlayerCrashedError, PlayerError, PlayerTimeoutError, RestartError
from unirender.protocol import MultipartError, UnknownFieldTypeError
from unirender.transport import PlayerHub

ALL_MODALITIES = dict(renderDepthImage=True, renderInstanceSegmentation=True, renderSemanticSegmentation=True,
                      renderNormalsImage=True, renderFlowImage=True)  # fmt: skip


@pytest.fixture(autouse=True)
def _clean(no_leaks):  # noqa: F811
    yield


@pytest.fixture
def make(fake_player_exe, tmp_path, monkeypatch):  # noqa: F811
    """``make(server, flavour=, legacy=, misbehave=, once=, **controller_kwargs)`` -> started Controller.
    ``server="wsgi-hub"``: WSGI on a private waitress PlayerHub instead of the fast path (``wsgi``)."""
    started: list[Controller] = []

    def factory(server="fifo", *, flavour="Linux64", legacy=False, misbehave="", once=None, **kwargs):
        monkeypatch.setenv("FAKE_PLAYER_FLAVOUR", flavour)
        monkeypatch.setenv("FAKE_PLAYER_LEGACY", "1" if legacy else "0")
        monkeypatch.setenv("FAKE_PLAYER_MISBEHAVE", misbehave)
        if once:
            monkeypatch.setenv("FAKE_PLAYER_MISBEHAVE_ONCE", str(tmp_path / "misbehaved"))
        kwargs.setdefault("width", 32)
        kwargs.setdefault("height", 24)
        kwargs.setdefault("platform", "CloudRendering")
        kwargs.setdefault("server_start_timeout", 60)
        kwargs.setdefault("server_timeout", 30)
        if server == "wsgi-hub":
            server, kwargs["wsgi_fast_path"] = "wsgi", False
        controller = Controller(fake_player_exe, server=server, log_dir=tmp_path, **kwargs)
        started.append(controller)
        return controller

    yield factory
    for controller in started:
        controller.stop()


def sent(kind: str, event, index: int, *, flavour: str, legacy: bool, third_party: bool = False) -> np.ndarray:
    """What the fake put on the wire for this event, decoded independently: (H, W, bytes per pixel), top-down."""
    meta = event.metadata
    w, h = meta["screenWidth"], meta["screenHeight"]
    raw = wire_image(kind, w, h, frame=meta["fakePlayer"]["frame"], index=index, flavour=flavour, legacy=legacy,
                     third_party=third_party)  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(h, w, -1)[::-1]


def expected_depth(raw: np.ndarray, legacy: bool, target: str, near: float, far: float) -> np.ndarray:
    if legacy:  # 3 bytes/px, normalised: (r + g/256 + b/65536) / 256 (protocol.md 4.2)
        r, g, b = (raw[..., i].astype(np.float64) for i in range(3))
        value, source = (r + g / 256 + b / 65536) / 256, "Normalized"
    else:  # little-endian float32 metres
        value, source = np.ascontiguousarray(raw).view("<f4")[..., 0].astype(np.float64), "Meters"
    units = {"Normalized": 1.0, "Meters": far - near, "Millimeters": (far - near) * 1000.0}
    return value * units[target] / units[source]


# -- decoding: every modality, both depth encodings, all DepthFormats, RGB24 and RGBA32 ---------------------------
@pytest.mark.parametrize(
    "server,flavour,legacy,depth_format",
    [
        ("fifo", "Linux64", False, "Meters"),
        ("wsgi", "CloudRendering", False, "Millimeters"),
        ("fifo", "CloudRendering", True, "Normalized"),
        ("wsgi", "Linux64", True, "Meters"),
    ],
)
def test_decoded_arrays_equal_what_the_player_sent(make, server, flavour, legacy, depth_format):
    c = make(server, flavour=flavour, legacy=legacy, depth_format=depth_format, scene="FloorPlan1", agentCount=2,
             cameraNearPlane=0.2, cameraFarPlane=12.0, **ALL_MODALITIES)  # fmt: skip
    assert c.camera_near_plane == pytest.approx(0.2) and c.camera_far_plane == pytest.approx(12.0)
    c.step("AddThirdPartyCamera", position={"x": 0, "y": 1.5, "z": 0}, rotation={"x": 30, "y": 0, "z": 0})
    event = c.step("MoveAhead", agentId=1)
    assert isinstance(event, MultiAgentEvent) and len(event.events) == 2
    assert event.metadata["agentId"] == 1 and event.metadata["lastAction"] == "MoveAhead"
    opts = dict(flavour=flavour, legacy=legacy)
    for i, ev in enumerate(event.events):
        rgb = sent("rgb", ev, i, **opts)
        assert rgb.shape[2] == (4 if flavour == "CloudRendering" else 3)
        assert ev.frame.shape == (24, 32, 3)
        np.testing.assert_array_equal(ev.frame, rgb[..., :3])
        np.testing.assert_allclose(
            ev.depth_frame,
            expected_depth(sent("depth", ev, i, **opts), legacy, depth_format, c.camera_near_plane,
                           c.camera_far_plane),  # fmt: skip
            rtol=1e-5,
        )
        np.testing.assert_array_equal(ev.normals_frame, sent("normals", ev, i, **opts))
        np.testing.assert_array_equal(ev.flow_frame, sent("flow", ev, i, **opts))
        ids = sent("ids", ev, i, **opts)
        np.testing.assert_array_equal(ev.instance_segmentation_frame, ids[..., :3])
        np.testing.assert_array_equal(ev.semantic_segmentation_frame, sent("classes", ev, i, **opts)[..., :3])
        for object_id, _type, color, _class_color in OBJECTS:
            mask = np.all(ids[..., :3] == np.array(color, np.uint8), axis=-1)
            np.testing.assert_array_equal(ev.instance_masks[object_id], mask)
        # third-party camera 0, attached to every agent's event
        np.testing.assert_array_equal(
            ev.third_party_camera_frames[0], sent("rgb", ev, 0, third_party=True, **opts)[..., :3]
        )
        np.testing.assert_allclose(
            ev.third_party_depth_frames[0],
            expected_depth(sent("depth", ev, 0, third_party=True, **opts), legacy, depth_format,
                           c.camera_near_plane, c.camera_far_plane),  # fmt: skip
            rtol=1e-5,
        )
        np.testing.assert_array_equal(
            ev.third_party_instance_segmentation_frames[0], sent("ids", ev, 0, third_party=True, **opts)[..., :3]
        )
    a0, a1 = event.events
    assert not np.array_equal(a0.frame, a1.frame)  # per-agent buffers were not mixed up


@pytest.mark.parametrize("server", ["fifo", "wsgi"])
def test_metadata_patch_on_fifo_full_event_on_wsgi(make, server):
    c = make(server, renderDepthImage=True)
    before = c.step("Pass")
    event = c.step("GetReachablePositions")
    assert event.metadata["lastAction"] == "GetReachablePositions"
    assert [p["x"] for p in event.metadata["actionReturn"]] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert event.metadata["sceneName"] == before.metadata["sceneName"]
    if server == "fifo":  # fastActionEmit: a METADATA_PATCH; images are the previous ones (protocol.md 3.6)
        assert event.metadata["fakePlayer"]["frame"] == before.metadata["fakePlayer"]["frame"]
        np.testing.assert_array_equal(event.frame, before.frame)
    else:
        assert event.metadata["fakePlayer"]["frame"] == before.metadata["fakePlayer"]["frame"] + 1
    assert c.step("Pass").metadata["lastAction"] == "Pass"  # sequence ids still in step after the patch


# -- launch contract and start sequence --------------------------------------------------------------------------
@pytest.mark.parametrize(("server", "platform"), [("fifo", "CloudRendering"), ("wsgi", "CloudRendering"),
                                                  ("fifo", "LinuxHeadlessSimulation")])
def test_launch_contract_and_start_sequence(make, server, platform):
    """LinuxHeadlessSimulation (Unity 2022+'s name for CloudRendering) is launched and started the same way."""
    c = make(server, flavour="CloudRendering", width=64, height=48, quality="High", platform=platform)
    assert c.resolution.name == platform
    meta = c.last_event.metadata
    fake = meta["fakePlayer"]
    # CloudRendering ignores -screen-*: it started at 300x300 and the controller fixed size and quality.
    assert (meta["screenWidth"], meta["screenHeight"]) == (64, 48)
    assert c.last_event.frame.shape == (48, 64, 3)
    assert fake["quality"] == "High"
    assert fake["argv"] == ["-screen-fullscreen", "0", "-screen-quality", "5", "-screen-width", "64",
                            "-screen-height", "48", *c.resolution.args]  # fmt: skip
    env = fake["env"]
    assert env["AI2THOR_SERVER_TYPE"] == c.server_type == server.upper()
    assert env["AI2THOR_CLIENT_TOKEN"] == c.transport.client_token
    assert env["AI2THOR_SERVER_SIDE_SCREENSHOT"] == "True"
    if server == "fifo":
        assert os.path.dirname(env["AI2THOR_FIFO_SERVER_PIPE_PATH"]) == c.transport.tmp_dir
    else:
        assert (env["AI2THOR_HOST"], int(env["AI2THOR_PORT"])) == c.transport.address
        assert env["AI2THOR_HOST"] == "127.0.0.1"
    log = open(c.log_path).read()
    assert "action 1: 'ChangeResolution'" in log and "action 2: 'ChangeQuality'" in log
    assert fake["pid"] == c.process.pid


def test_headless_sends_no_images_and_uses_batchmode(make):
    c = make("wsgi", headless=True)  # no image part at all: Unity's urlencoded branch
    fake = c.last_event.metadata["fakePlayer"]
    assert fake["argv"][:2] == ["-batchmode", "-nographics"]
    assert fake["env"]["AI2THOR_SERVER_SIDE_SCREENSHOT"] == "False"
    event = c.step("MoveAhead")
    assert event.frame is None and event.metadata["lastActionSuccess"]
    assert c.last_action["renderImage"] is False


def test_scene_reset_and_keep_alive_over_100_steps_on_one_socket(make):
    c = make("wsgi", scene="FloorPlan2", renderDepthImage=True)
    assert c.last_event.metadata["sceneName"] == "FloorPlan2_physics"
    assert c.last_event.depth_frame is not None
    connections = c.last_event.metadata["fakePlayer"]["connections"]
    for _ in range(100):
        event = c.step("MoveAhead")
    fake = event.metadata["fakePlayer"]
    assert fake["connections"] == connections  # every one of the 100 steps on the same socket
    assert fake["requestsOnSocket"] >= 101
    event = c.reset("FloorPlan10")
    assert event.metadata["sceneName"] == "FloorPlan10_physics"
    assert event.metadata["fakePlayer"]["connections"] == connections + 1  # Reset reconnects (protocol.md 2.8)
    assert event.depth_frame is not None  # Initialize parameters re-sent after Reset
    with pytest.raises(ValueError, match="not in the build"):
        c.reset("NoSuchScene")
    assert c.step("Pass").metadata["sceneName"] == "FloorPlan10_physics"  # still usable
    assert sorted(SCENES)[0] != "FloorPlan1_physics"  # (sanity of the fake's list ordering quirk)


@pytest.mark.parametrize("server", ["fifo", "wsgi"])
def test_procthor_house_scene_resets_to_procedural_then_creates_the_house(make, server):
    house = {"id": "house-7", "rooms": [{"id": "room|1"}], "objects": []}
    c = make(server, scene=house, renderDepthImage=True)
    event = c.last_event
    assert event.metadata["lastAction"] == "CreateHouse" and event
    assert event.metadata["sceneName"] == "Procedural"
    assert event.metadata["fakePlayer"]["house"] == "house-7"
    assert event.depth_frame is not None  # Initialize came before CreateHouse
    assert c.step("MoveAhead").metadata["fakePlayer"]["house"] == "house-7"
    event = c.reset()  # the same house again, built anew after the Reset cleared it
    assert event.metadata["lastAction"] == "CreateHouse" and event.metadata["fakePlayer"]["house"] == "house-7"
    event = c.reset({"rooms": [{}, {}]})
    assert event.metadata["fakePlayer"]["house"] == "house-2-rooms"
    with pytest.raises(ActionError, match="'rooms' list") as info:
        c.reset({"id": "no-rooms"})
    assert info.value.error_code == "InvalidArgument"
    assert c.scene == "Procedural"  # not the house that failed to build
    with pytest.raises(TypeError, match="house dict"):
        c.reset(42)
    event = c.reset("FloorPlan1")
    assert event.metadata["sceneName"] == "FloorPlan1_physics" and event.metadata["fakePlayer"]["house"] is None


def test_start_unity_false_drives_a_player_started_elsewhere(fake_player_exe, tmp_path):  # noqa: F811
    # Like AI2-THOR's Controller(start_unity=False) for the Unity Editor: we only listen; someone else starts the
    # player with no AI2THOR_* variables but the port, so it speaks WSGI and sends an empty token.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI2THOR_")}
    env.update(AI2THOR_PORT=str(port), FAKE_PLAYER_FLAVOUR="Linux64", FAKE_PLAYER_MISBEHAVE="")
    result: dict = {}

    def connect():
        try:
            result["controller"] = Controller(start_unity=False, port=port, width=32, height=24, scene="FloorPlan2",
                                              server="wsgi", server_start_timeout=30, log_dir=tmp_path)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result["error"] = exc

    thread = threading.Thread(target=connect)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the controller listens, as a user starts the Editor's play mode
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    with open(tmp_path / "player.log", "wb") as log:
        player = subprocess.Popen([fake_player_exe], env=env, stdout=log, stderr=log)
    try:
        thread.join(60)
        assert "error" not in result, result.get("error")
        c = result["controller"]
        assert c.process is None and c.resolution is None
        event = c.step("MoveAhead")
        assert event.metadata["sceneName"] == "FloorPlan2_physics"
        assert (event.metadata["screenWidth"], event.metadata["screenHeight"]) == (32, 24)  # ChangeResolution sent
        assert "AI2THOR_CLIENT_TOKEN" not in event.metadata["fakePlayer"]["env"]
        c.stop()  # releases the player's pending request with an empty action (as 5.0.0's stop()), kills nothing
        deadline = time.monotonic() + 10
        while b"empty action" not in (tmp_path / "player.log").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b"empty action" in (tmp_path / "player.log").read_bytes()
        assert player.poll() is None  # still running: it is the user's to stop, like the Editor's play mode
    finally:
        if player.poll() is None:
            player.kill()
            player.wait()
    with pytest.raises(ValueError, match="needs server='wsgi'"):
        Controller(start_unity=False, server="fifo")


@pytest.mark.parametrize("server", ["fifo", "wsgi"])
def test_action_errors(make, server):
    c = make(server)
    with pytest.raises(ValueError, match="needs an action name"):
        c.step(moveMagnitude=0.5)
    with pytest.raises(ActionError, match="Invalid action") as info:
        c.step("Fly")
    assert info.value.error_code == "InvalidAction"
    with pytest.raises(ActionError) as info:
        c.step("MoveAhead", speed=3)
    assert info.value.error_code == "InvalidArgument"
    event = c.step({"action": "OpenObject"})  # failure without an error code: an event, not an exception
    assert not event and "nothing to open" in event.metadata["errorMessage"]
    with pytest.raises(ActionError, match="nothing to open"):
        c.step("OpenObject", raise_for_failure=True)
    event = c.step({"action": "RotateRight"}, rotation=90)
    assert c.last_action == {"action": "RotateRight", "rotation": {"y": 90}, "sequenceId": c.last_action["sequenceId"]}
    assert event.metadata["agent"]["rotation"]["y"] == 90.0


# -- failures ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("server,kind", [("fifo", "segv"), ("wsgi", "segv"), ("wsgi-hub", "segv"), ("fifo", "exit"),
                                         ("wsgi", "exit"), ("wsgi-hub", "exit")])  # fmt: skip
def test_crash_is_reported_at_once_with_exit_status_last_action_and_log(make, server, kind):
    c = make(server, misbehave=f"{kind}@3", max_restarts=0, server_timeout=30)  # action 1 is ChangeQuality
    c.step("MoveAhead")
    started = time.monotonic()
    with pytest.raises(PlayerCrashedError) as info:
        c.step("RotateRight")
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"crash took {elapsed:.1f} s to detect; it must be far below server_timeout=30 s"
    err = info.value
    assert err.returncode == (-11 if kind == "segv" else 3)
    assert err.signal_name == ("SIGSEGV" if kind == "segv" else None)
    assert err.last_action["action"] == "RotateRight"
    assert err.log_path == c.log_path and "misbehaving now" in err.log_tail
    assert "RotateRight" in str(err) and c.log_path in str(err)
    assert c.process.poll() is not None
    with pytest.raises(PlayerError, match="stopped"):
        c.step("Pass")


@pytest.mark.parametrize("server", ["fifo", "wsgi", "wsgi-hub"])
def test_begin_step_sends_now_and_receives_later(make, server):
    """Two players sent their actions before either is waited for (the service's batched steps): each event is
    its own action's; a crash between the halves comes out of the second half as a restart, as step() raises."""
    a, b = make(server), make(server, misbehave="segv@3", once=True)
    a.step("MoveAhead")  # action 2 of each (1 is ChangeQuality)
    b.step("MoveAhead")
    receive_a, receive_b = a.begin_step("RotateRight"), b.begin_step({"action": "RotateLeft"})
    with pytest.raises(RestartError):
        receive_b()  # b crashed on its action 3
    event = receive_a()
    assert event.metadata["lastAction"] == "RotateRight" and a.last_event is event
    assert b.begin_step("Pass")().metadata["lastAction"] == "Pass"  # b's new player
    with pytest.raises(ValueError, match="action name"):
        a.begin_step(42)  # bad input: at once, nothing sent
    assert a.step("Pass").metadata["lastAction"] == "Pass"
    a.stop()
    with pytest.raises(PlayerError, match="stopped"):
        a.begin_step("Pass")()


def test_crash_before_connecting_is_reported_without_waiting_for_the_start_timeout(make):
    started = time.monotonic()
    with pytest.raises(PlayerCrashedError, match="exited before connecting") as info:
        make("fifo", misbehave="segv@0", server_start_timeout=60)
    assert time.monotonic() - started < 20
    assert info.value.signal_name == "SIGSEGV"


def test_restart_policy_relaunches_restores_and_is_bounded(make):
    # Start-up: ChangeQuality, GetScenesInBuild, Reset, ChangeQuality, Initialize = actions 1-5.
    c = make("fifo", misbehave="segv@7", max_restarts=1, scene="FloorPlan2", renderDepthImage=True)
    first_pid = c.process.pid
    c.step("MoveAhead")  # action 6
    with pytest.raises(RestartError, match="episode is lost") as info:
        c.step("MoveAhead")  # action 7: crash, relaunch, restore
    assert isinstance(info.value.__cause__, PlayerCrashedError)
    assert c.process.pid != first_pid and c.process.alive()
    restored = c.last_event
    assert restored.metadata["sceneName"] == "FloorPlan2_physics"
    assert restored.metadata["lastAction"] == "Initialize" and restored.depth_frame is not None
    assert c.step("Pass")  # action 6 of the new player
    with pytest.raises(PlayerCrashedError) as info:  # second crash within the window: max_restarts=1 reached
        c.step("Pass")
    assert any("not restarted" in note for note in info.value.__notes__)
    with pytest.raises(PlayerError, match="stopped"):
        c.step("Pass")


def test_restart_window_forgets_old_restarts(make):
    c = make("wsgi", misbehave="exit@3", max_restarts=1)
    c.restart_window_s = 0.0  # every earlier restart is outside the window
    for _ in range(2):
        c.step("Pass")
        with pytest.raises(RestartError):
            c.step("Pass")
    assert c.step("Pass")


def test_restart_then_continue_when_the_crash_does_not_repeat(make):
    c = make("wsgi", misbehave="segv@2", once=True)
    with pytest.raises(RestartError):
        c.step("MoveAhead")
    for _ in range(3):
        assert c.step("MoveAhead")


@pytest.mark.parametrize("server", ["fifo", "wsgi", "wsgi-hub"])
def test_never_connecting_player_times_out_naming_executable_transport_and_log(make, server, fake_player_exe):  # noqa: F811
    with pytest.raises(PlayerTimeoutError) as info:
        make(server, misbehave="never-connect", server_start_timeout=2.0)
    message = str(info.value)
    assert fake_player_exe in message and server.split("-")[0].upper() in message and "did not connect" in message
    assert "never connecting" in info.value.log_tail


@pytest.mark.parametrize("server", ["fifo", "wsgi", "wsgi-hub"])
def test_hung_player_times_out_after_server_timeout(make, server):
    c = make(server, misbehave="hang@3")
    c.step("Pass")
    c.server_timeout = 1.0  # only now: a loaded CI machine may take a while for the first steps
    with pytest.raises(PlayerTimeoutError, match="did not answer within 1 s"):
        c.step("Pass")
    assert c.process.poll() is not None  # stopped and reaped


@pytest.mark.parametrize("server,error", [("fifo", UnknownFieldTypeError), ("wsgi", MultipartError),
                                          ("wsgi-hub", MultipartError)])  # fmt: skip
def test_garbage_on_the_wire_is_a_protocol_error(make, server, error):
    c = make(server, misbehave="garbage@3")
    c.step("Pass")
    with pytest.raises(error) as info:
        c.step("Pass")
    assert c.process.poll() is not None
    assert any(c.log_path in note for note in info.value.__notes__)


@pytest.mark.parametrize("server", ["wsgi", "wsgi-hub"])
def test_wrong_token_player_is_rejected(make, server):
    with pytest.raises(PlayerError, match="wrong client token"):
        make(server, misbehave="wrong-token")


def test_two_controllers_share_one_player_hub(make):
    with PlayerHub(max_players=2) as hub:
        a = make("wsgi", player_hub=hub, width=32, height=24)
        b = make("wsgi", player_hub=hub, width=16, height=8)
        assert a.transport.address == b.transport.address == hub.address
        for _ in range(3):
            ea, eb = a.step("MoveAhead"), b.step("RotateRight")
        assert ea.frame.shape == (24, 32, 3) and eb.frame.shape == (8, 16, 3)
        assert ea.metadata["agent"]["position"]["z"] == pytest.approx(1.25)
        assert eb.metadata["agent"]["rotation"]["y"] == 270.0
        a.stop()
        b.stop()


def test_bad_arguments_fail_before_launching(fake_player_exe, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="quality"):
        Controller(fake_player_exe, quality="Fantastic", log_dir=tmp_path)
    with pytest.raises(ValueError, match="server"):
        Controller(fake_player_exe, server="carrier-pigeon", log_dir=tmp_path)
    with pytest.raises(FileNotFoundError):
        Controller(str(tmp_path / "missing"), log_dir=tmp_path)


@pytest.mark.parametrize("server", ["fifo", "wsgi"])
def test_builtin_reference_player_launch(server, tmp_path):
    """``executable="builtin"``: ``python -m unirender.player`` with the back-end of the resolved platform."""
    with Controller("builtin", width=64, height=48, server=server, log_dir=tmp_path, renderDepthImage=True) as c:
        pid = c.process.pid
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
        environ = dict(e.split(b"=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if e)
        assert [a.decode() for a in cmdline[1:]] == ["-m", "unirender.player", *c.unity_args()]
        assert environ[b"UNIRENDER_PLAYER_BACKEND"].decode() == c.resolution.backend
        assert environ[b"AI2THOR_SERVER_TYPE"].decode() == c.server_type
        event = c.step("RotateRight")
        assert event.frame.shape == (48, 64, 3) and event.depth_frame.shape == (48, 64)
        assert event.metadata["agent"]["rotation"]["y"] == pytest.approx(90.0)


def test_linux64_gets_its_display_and_no_change_quality(make):
    """Linux64 (here on a virtual display the resolution starts): DISPLAY in the player's environment (protocol.md 6.3);
    -screen-quality is honoured, so no ChangeQuality. ``no_leaks`` also checks the Xvfb is gone afterwards."""
    c = make("fifo", platform="Linux64")
    env = c.last_event.metadata["fakePlayer"]["env"]
    assert env["DISPLAY"] == c.resolution.env["DISPLAY"]
    c.step("Pass")
    log = open(c.log_path).read()
    assert "ChangeQuality" not in log and "action 1: 'Pass'" in log
    c.stop()
