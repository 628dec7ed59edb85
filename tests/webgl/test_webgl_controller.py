"""The webgl family's controller on the test game in real headless Chromium (SwiftShader): boot, declared
actions, frames, emitted JSON, determinism, each readback path, and every failure a player can have (a bad
build, a build that never calls back, a crashed tab, a hung tab, a killed browser), each a clear error within a
bounded time with nothing left running."""

from __future__ import annotations

import gzip
import os
import signal

import numpy as np
import pytest

from fixtures.webgl import ACTIONS, GAME
from unirender.errors import ActionError, PlayerCrashedError, PlayerError, PlayerTimeoutError, RestartError
from unirender.simulator import Simulator
from unirender.webgl import WebGLController, camera_frames
from unirender.webgl.browser import group_members

BACKGROUND = (26, 51, 102)  # the game's clear colour, 0.1/0.2/0.4
SQUARE = (255, 204, 0)


def _left_edge(frame: np.ndarray) -> int:
    """The square's left edge in the frame (its first yellow column)."""
    columns = np.where((frame == SQUARE).all(axis=2).any(axis=0))[0]
    return int(columns[0])


def _game(log_dir):
    controller = WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=log_dir)
    try:
        yield controller
    finally:
        pgid = controller.process.pid if controller.process else None
        controller.stop()
        if pgid is not None:
            assert group_members(pgid) == []


@pytest.fixture(scope="module")
def game(browser_binary, tmp_path_factory):
    """One browser for the tests that only step and read: each begins with ``reset()``, which reloads the page
    (``test_reset_reloads_the_page_or_sends_the_declared_message``), so none sees another's state; a browser
    boot less per test."""
    yield from _game(tmp_path_factory.mktemp("webgl-game"))


@pytest.fixture
def own_game(browser_binary, tmp_path):
    """A browser of the test's own (its tab is crashed)."""
    yield from _game(tmp_path)


def test_steps_return_the_frame_after_the_action(game):
    assert isinstance(game, Simulator)
    first = game.reset()
    assert first.frame.shape == (100, 120, 3) and first.frame.dtype == np.uint8
    assert tuple(first.frame[0, 60]) == BACKGROUND and tuple(first.frame[50, 60]) == SQUARE
    start = _left_edge(first.frame)
    moved = game.step("right")
    assert _left_edge(moved.frame) == start + 3  # one frame per step, 3 px per frame while the key is held
    assert game.step().frame is not moved.frame and _left_edge(game.last_event.frame) == start + 3  # released
    assert moved.metadata["position"][0] == start + 3 and moved.messages[-1]["frame"] == 2
    assert camera_frames(moved)["frame"] is moved.frame


def test_rewards_sendmessage_and_clicks(game):
    game.reset()
    rewards = [game.step("right").reward for _ in range(8)]
    assert rewards == [0.0] * 6 + [1.0] * 2  # the square (x from 40, 3 px a frame) is past x=60 from step 7
    red = game.step("red").frame
    assert (red == (255, 0, 0)).all(axis=2).sum() == 40 * 40  # the whole square, nothing else
    clicked = game.step("click")
    assert tuple(clicked.frame[0, 0]) == (255, 0, 0) and clicked.metadata["position"] == [0, 60]
    raw = game.step({"keys": ["ArrowUp", "ArrowRight"]})
    assert raw.metadata["position"] == [3, 60]  # clamped at the top, moved right


def test_describe_declares_the_action_space_and_the_camera(game):
    game.reset()
    description = game.describe()
    assert description.family == "webgl" and description.platform == "WebGL"
    assert description.actions.kind == "named"
    assert description.actions.names == ("noop", "left", "right", "up", "red", "click")
    (camera,) = description.cameras()
    assert camera.key == "frame" and camera.shape == (100, 120, 3)
    assert "SwiftShader" in description.device and description.software_device is True
    assert description.pid == game.process.pid


def test_bad_actions_are_refused_before_anything_is_sent(game):
    game.reset()
    for action, message in [("jump", "unknown action 'jump'"), ({"key": "NoSuchKey"}, "unknown key"),
                            ({"click": [500, 5]}, "outside the 120x100 canvas"), ({"fly": 1}, "unknown webgl"),
                            (99, "out of range"), ({"send_message": ["Game"]}, "send_message is")]:
        with pytest.raises(ActionError, match=message):
            game.step(action)
    assert game.step().messages[-1]["frame"] == 2  # nothing ran for the refused ones


def test_steps_are_deterministic_across_browsers(browser_binary, tmp_path):
    """Two browsers, the same actions: the same frames, bit for bit, including the clock-driven bar (the page's
    virtual clock advances 1000/fps ms per frame whatever the machine's load)."""
    runs = []
    for _ in range(2):
        with WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=tmp_path, frames_per_step=3) as c:
            frames = [c.reset().frame]
            frames += [c.step(a).frame for a in ("right", "right", "up", "noop", "left", "click", "noop")]
            runs.append(np.stack(frames))
    assert np.array_equal(runs[0], runs[1])
    assert (runs[0][-1][-4:] == 255).all(axis=2).any()  # the bar (bottom rows) is drawn


@pytest.mark.parametrize("readback", ["png", "screenshot"])
def test_every_readback_path_gives_the_same_frame(browser_binary, tmp_path, readback):
    with WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=tmp_path, readback="pixels") as pixels, \
            WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=tmp_path, readback=readback) as other:
        for action in (None, "right", "red", "click", "noop"):  # a click focuses the canvas: no focus ring
            expected = pixels.step(action).frame
            assert np.array_equal(other.step(action).frame, expected)


def test_a_browser_boots_under_a_long_tmpdir_and_leaves_nothing_there(browser_binary, tmp_path, monkeypatch):
    """Chromium's singleton socket lives in its TMPDIR and a socket's path has 107 bytes at most: under a long
    temp folder (here 150 characters) the browser used to die at start. Its TMPDIR is now its profile, made where
    the socket fits; closing removes both."""
    import tempfile

    long = tmp_path / ("t" * (150 - len(str(tmp_path)) - 1))
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    with WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=tmp_path) as controller:
        profile = controller.browser.profile
        assert not profile.startswith(str(long))
        assert controller.step("right").frame.shape == (100, 120, 3)
    assert not os.path.exists(profile) and list(long.iterdir()) == []


def test_a_gzip_build_boots(browser_binary, game_copy, tmp_path):
    for part in ("framework.js", "wasm", "data"):
        path = game_copy / "Build" / f"game.{part}"
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    with WebGLController(game_copy, 120, 100, log_dir=tmp_path) as c:
        assert tuple(c.reset().frame[50, 60]) == SQUARE


def test_a_brotli_build_boots(browser_binary, game_copy, tmp_path):
    # Unity's default compression for a release build: the server sends "Content-Encoding: br" and Chromium
    # decodes it (it offers br to http://127.0.0.1, a potentially trustworthy origin, without HTTPS).
    brotli = pytest.importorskip("brotli")
    for part in ("framework.js", "wasm", "data"):
        path = game_copy / "Build" / f"game.{part}"
        path.with_name(path.name + ".br").write_bytes(brotli.compress(path.read_bytes()))
        path.unlink()
    with WebGLController(game_copy, 120, 100, actions=ACTIONS, log_dir=tmp_path) as c:
        assert c.build.code == "Build/game.wasm.br" and c.build.compression == "br"
        first = c.reset().frame
        assert tuple(first[50, 60]) == SQUARE
        assert _left_edge(c.step("right").frame) == _left_edge(first) + 3  # stepped: the held key moved it


def test_a_wrongly_encoded_build_fails_with_the_browsers_reason(browser_binary, game_copy, tmp_path):
    # A ".br" wasm that is not brotli: nothing to check on disk (brotli has no magic number); the browser
    # refuses to decode it and the loader rejects.
    wasm = game_copy / "Build" / "game.wasm"
    wasm.rename(wasm.with_name("game.wasm.br"))
    with pytest.raises(PlayerError, match="failed to start") as info:
        WebGLController(game_copy, 120, 100, log_dir=tmp_path, boot_timeout=60)
    assert "net::ERR_CONTENT_DECODING_FAILED" in str(info.value) and "game.wasm.br" in str(info.value)


def test_a_corrupt_data_file_fails(browser_binary, game_copy, tmp_path):
    (game_copy / "Build" / "game.data").write_bytes(b"not json")
    with pytest.raises(PlayerError, match="failed to start.*JSON"):
        WebGLController(game_copy, 120, 100, log_dir=tmp_path, boot_timeout=60)


def test_a_build_that_never_calls_back_times_out(browser_binary, game_copy, tmp_path):
    (game_copy / "Build" / "game.loader.js").write_text(
        "function createUnityInstance() { console.log('loading forever'); return new Promise(() => {}); }")
    with pytest.raises(PlayerTimeoutError, match=r"did not start within 3 s \(createUnityInstance neither"
                       ) as info:
        WebGLController(game_copy, 120, 100, log_dir=tmp_path, boot_timeout=3)
    assert "loading forever" in str(info.value)


def test_a_loader_that_defines_nothing(browser_binary, game_copy, tmp_path):
    (game_copy / "Build" / "game.loader.js").write_text("var nothing = 1;")
    with pytest.raises(PlayerError, match="did not define createUnityInstance"):
        WebGLController(game_copy, 120, 100, log_dir=tmp_path, boot_timeout=30)


def test_a_killed_browser_is_a_crashed_player_restarted_within_the_budget(browser_binary, tmp_path):
    with WebGLController(GAME, 120, 100, actions=ACTIONS, log_dir=tmp_path, max_restarts=1) as c:
        c.reset()
        first = c.process.pid
        os.kill(first, signal.SIGKILL)
        with pytest.raises(RestartError, match="crashed or hung and was restarted") as info:
            c.step("right")
        assert "SIGKILL" in str(info.value.__cause__)
        assert group_members(first) == [] and c.process.pid != first
        assert c.reset().messages[-1]["frame"] == 1  # a fresh page
        os.kill(c.process.pid, signal.SIGKILL)
        with pytest.raises(PlayerCrashedError, match="SIGKILL") as info:
            c.step()
        assert "not restarted" in "\n".join(info.value.__notes__)
        with pytest.raises(PlayerError, match="stopped"):
            c.step()


def test_a_crashed_tab_is_a_crashed_player(own_game):
    own_game.reset()
    pid = own_game.process.pid
    own_game.browser.page.send_async("Page.crash")
    with pytest.raises(RestartError, match="tab crashed"):
        own_game.step()
    assert own_game.process.pid != pid and group_members(pid) == []
    assert tuple(own_game.reset().frame[50, 60]) == SQUARE


def test_a_hung_tab_times_out_and_is_restarted(browser_binary, tmp_path):
    with WebGLController(GAME, 120, 100, log_dir=tmp_path, step_timeout=3,
                         actions={"hang": {"send_message": ["Game", "Hang"]}}) as c:
        c.reset()
        with pytest.raises(RestartError, match="did not answer"):
            c.step("hang")
        assert tuple(c.reset().frame[50, 60]) == SQUARE


def test_reset_reloads_the_page_or_sends_the_declared_message(game, browser_binary, tmp_path):
    game.reset()
    game.step("right")
    assert game.reset().messages[-1]["position"][0] == 40  # a fresh page: back in the middle
    with WebGLController(GAME, 120, 100, log_dir=tmp_path, reset_message=["Game", "SetColor", "0,1,0"]) as c:
        assert tuple(c.reset().frame[50, 60]) == (0, 255, 0)
    with pytest.raises(ActionError, match="no scene"):
        game.reset("FloorPlan1")


def test_a_sigkilled_unirender_leaves_no_browser_behind(browser_binary, tmp_path):
    """The browser dies with the process that started it (PR_SET_PDEATHSIG through bash's exec), and its
    renderer, GPU and zygote processes with it."""
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from unirender.webgl import WebGLController\n"
        f"c = WebGLController({str(GAME)!r}, 64, 64, log_dir={str(tmp_path)!r})\n"
        "c.reset()\n"
        "print(c.process.pid, c.browser.profile, flush=True)\n"
        "time.sleep(600)\n"
    )
    profile = ""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        pid, profile = child.stdout.readline().split()
        browser = int(pid)
        assert group_members(browser)  # running
        child.kill()
        child.wait(30)
        deadline = time.monotonic() + 30  # watched, never helped: nothing here signals the group
        while group_members(browser) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert group_members(browser) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        # A SIGKILLed process cannot remove its browser profile (the next browser started would: docs/webgl.md);
        # the test does at once.
        import shutil

        shutil.rmtree(profile, ignore_errors=True)
