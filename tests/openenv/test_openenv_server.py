"""``unirender openenv serve`` driven by openenv-core's own ``EnvClient`` (a small subclass, as OpenEnv users write
one) over its WebSocket, for the AI2-THOR reference player, the reference ML-Agents game and the WebGL test game
(in headless Chromium): reset, steps with images in each format, state, two concurrent sessions, the session
limit, a bad action, a killed player, tokens. The server is a real subprocess on 127.0.0.1 (port 0: it announces
the port it bound before it accepts). Every WebGL session boots a browser: the family-independent cases (the
session limit, tokens) run for the other two families only."""

from __future__ import annotations

import base64
import io
import json
import os
import signal

import numpy as np
import pytest

pytest.importorskip("openenv.core")  # the openenv extra

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from PIL import Image  # noqa: E402

from fixtures.dependency_skips import require_chromium
from fixtures.openenv_server import TOKEN, OpenEnvServer, token_file  # noqa: E402
from fixtures.webgl import ACTIONS as WEBGL_ACTIONS  # noqa: E402
from fixtures.webgl import GAME as WEBGL_GAME  # noqa: E402
from unirender.openenv import UnirenderAction, UnirenderObservation, UnirenderState  # noqa: E402
from unirender.openenv.images import decode_array, decode_image  # noqa: E402

pytestmark = pytest.mark.timeout(240)

MAX_SESSIONS = 2
SPECS = {
    "ai2thor": "environment:\n  executable: builtin\n  width: 64\n  height: 48\n"
    "render:\n  modalities: [rgb, depth]\n",
    "mlagents": "environment:\n  protocol: mlagents\n  executable: builtin\n  width: 32\n  height: 32\n"
    "  time_scale: 100\n",
    # the WebGL test game as tests/matrix declares it (JSON is YAML)
    "webgl": "environment: " + json.dumps({"protocol": "webgl", "executable": str(WEBGL_GAME), "width": 48,
                                          "height": 40, "actions": WEBGL_ACTIONS}) + "\n",
}
# The cases whose subject is the server, not the family: WebGL (a browser per session) is left out of them
SERVER_CASES = pytest.mark.parametrize("server", ["ai2thor", "mlagents"], indirect=True)


class UnirenderClient(EnvClient[UnirenderAction, UnirenderObservation, UnirenderState]):
    """What an OpenEnv user writes for an environment: the three conversions."""

    def _step_payload(self, action: UnirenderAction) -> dict:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict) -> StepResult[UnirenderObservation]:
        observation = UnirenderObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict) -> UnirenderState:
        return UnirenderState(**payload)

    async def step_raw(self, data: dict):
        """A step message whose data is not a UnirenderAction (what a buggy client might send)."""
        return await self._send_and_receive({"type": "step", "data": data})


class Server(OpenEnvServer):
    def client(self, token: str | None = TOKEN) -> UnirenderClient:
        return UnirenderClient(base_url=self.url_with_token(token), message_timeout_s=120).sync()


@pytest.fixture(scope="module", params=sorted(SPECS))
def server(request, tmp_path_factory):
    if request.param == "webgl":
        require_chromium()
    tmp = tmp_path_factory.mktemp(f"openenv-{request.param}")
    spec = tmp / "env.yaml"
    spec.write_text(SPECS[request.param])
    served = Server(spec, token_file(tmp), max_sessions=MAX_SESSIONS)
    served.family = request.param
    yield served
    served.stop()


def first_action(state: UnirenderState) -> UnirenderAction:
    if state.family == "ai2thor":
        return UnirenderAction(action={"action": "RotateLeft"})
    if state.family == "webgl":
        return UnirenderAction(action="right")
    spec = state.action_spec
    return UnirenderAction(
        continuous_actions=[0.5] * spec["continuous_size"],
        discrete_actions=[b - 1 for b in spec["discrete_branches"]],
    )


def png_pixels(b64: str) -> np.ndarray:
    """As docs/openenv.md's client reads an image (decode_image: libspng), checked against Pillow's reading."""
    pixels = decode_image(b64)
    assert np.array_equal(pixels, np.asarray(Image.open(io.BytesIO(base64.b64decode(b64)))))
    return pixels


def test_reset_steps_with_images_and_state(server):
    with server.client() as env:
        result = env.reset(include_visual=True, image_format="png", episode_id="ep-1")
        obs = result.observation
        assert obs.visual_observations and len(obs.visual_observations) == len(obs.visual_observation_names)
        state = env.state()
        assert state.family == server.family and state.episode_id == "ep-1" and state.step_count == 0
        assert state.declaration["executable"] in ("builtin", str(WEBGL_GAME)) and state.player["pid"] > 0
        assert state.action_spec and state.observation_spec
        if server.family == "ai2thor":
            assert obs.visual_observation_names == ["rgb", "depth"]
            rgb, depth = (png_pixels(b) for b in obs.visual_observations)
            assert rgb.shape == (48, 64, 3) and depth.shape == (48, 64) and depth.dtype == np.uint16
            assert rgb.std() > 0  # a rendered scene, not a flat colour
            assert state.action_spec["kind"] == "named" and "RotateLeft" in state.action_spec["actions"]
        elif server.family == "webgl":
            assert obs.visual_observation_names == ["rgb"]
            assert png_pixels(obs.visual_observations[0]).shape == (40, 48, 3)  # the canvas
            assert state.action_spec["actions"][:3] == ["noop", "left", "right"]
            start = obs.info["emitted"]["position"][0]  # what the game emits is the metadata
        else:
            assert obs.behavior_name and len(obs.vector_observations) > 0
            frame = png_pixels(obs.visual_observations[0])
            assert frame.shape[:2] == (32, 32)
            # the field names and keys of OpenEnv's Unity environment
            assert {"is_discrete", "is_continuous", "discrete_branches", "continuous_size"} <= set(
                obs.action_spec_info
            )

        before = obs.visual_observations[0]
        for _ in range(3):
            result = env.step(first_action(state))
            assert result.observation.visual_observations, "images come with every step once asked for"
        assert env.state().step_count == 3
        if server.family == "ai2thor":
            assert result.observation.info["lastActionSuccess"] is True
            assert result.observation.visual_observations[0] != before  # the view turned
        if server.family == "webgl":
            assert result.observation.info["emitted"]["position"][0] > start  # the square moved right
            assert result.observation.info["messages"] and result.observation.visual_observations[0] != before

        # raw arrays: the exact pixels, with dtype and shape
        result = env.reset(include_visual=True, image_format="array")
        arrays = result.observation.arrays
        assert (
            result.observation.visual_observations is None
            and list(arrays) == result.observation.visual_observation_names
        )
        first = decode_array(arrays[result.observation.visual_observation_names[0]])
        assert first.dtype == np.uint8 and first.ndim == 3
        if server.family == "ai2thor":
            depth = decode_array(arrays["depth"])
            assert depth.dtype == np.float32 and depth.shape == (48, 64) and depth.max() > 0

        # JPEG for vision-language agents (depth has no JPEG form: AI2-THOR's env is asked for rgb only there)
        if server.family == "mlagents":
            result = env.reset(include_visual=True, image_format="jpeg")
            assert base64.b64decode(result.observation.visual_observations[0])[:2] == b"\xff\xd8"

        # without include_visual, no images travel
        result = env.reset()
        assert result.observation.visual_observations is None and result.observation.arrays is None


def test_a_bad_action_is_a_clear_error_and_the_session_stays_usable(server):
    with server.client() as env:
        env.reset()
        state = env.state()
        if server.family == "ai2thor":
            bad = UnirenderAction(action={"action": "Fly"})
            expected = "unknown action 'Fly'"
        elif server.family == "webgl":
            bad = UnirenderAction(action="rigth")
            expected = "did you mean 'right'"
        else:
            bad = UnirenderAction(continuous_actions=[0.0] * (state.action_spec["continuous_size"] + 3))
            expected = "continuous_actions"
        with pytest.raises(RuntimeError, match=expected):
            env.step(bad)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # not an action at all: the model says so
            env.step_raw({"teleport": True})
        result = env.step(first_action(state))
        assert env.state().step_count == 1 and result.observation is not None


def test_two_sessions_run_side_by_side_and_a_killed_player_fails_only_its_own(server):
    with server.client() as one, server.client() as two:
        one.reset()
        two.reset()
        pid_one, pid_two = one.state().player["pid"], two.state().player["pid"]
        assert pid_one != pid_two  # a player each
        action = first_action(one.state())
        one.step(action)
        two.step(action)

        os.kill(pid_one, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="player of this session"):
            one.step(action)
        assert two.step(action).observation is not None  # the other session is unaffected
        assert two.state().step_count == 2

        one.reset()  # a new player for the session that lost its own
        assert one.state().player["pid"] not in (pid_one, pid_two)
        one.step(action)


@SERVER_CASES
def test_sessions_past_the_limit_are_refused_clearly(server):
    clients = [server.client() for _ in range(MAX_SESSIONS)]
    try:
        for c in clients:
            c.connect()
            c.reset()
        # One more session: OpenEnv accepts the WebSocket, sends the refusal at once and closes. Read off the
        # socket, not through EnvClient.reset(): whether the stock client's first send meets the refusal or the
        # close depends on which comes first (docs/openenv.md, "Sessions and limits").
        from websockets.sync.client import connect as ws_connect

        ws_url = server.url.replace("http://", "ws://") + "/ws"
        with ws_connect(ws_url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=60) as extra:
            refusal = json.loads(extra.recv(timeout=60))
        assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED", refusal
        assert refusal["data"]["max_sessions"] == MAX_SESSIONS
    finally:
        for c in clients:
            c.close()
    # the slots come back when sessions close: a new session gets a player (its reset waits, bounded, for the
    # closed sessions' players to stop: OpenEnv counts a session gone before its player has stopped)
    with server.client() as again:
        again.reset()


@SERVER_CASES
def test_a_request_without_the_token_is_refused(server):
    import requests

    assert requests.get(f"{server.url}/health", timeout=10).status_code == 200  # the probe is open
    refused = requests.get(f"{server.url}/state", timeout=10)
    assert refused.status_code == 401 and "token" in refused.json()["detail"]
    allowed = requests.get(f"{server.url}/schema", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert allowed.status_code == 200 and "action" in allowed.json()
    # OpenEnv's one-shot HTTP reset: a player for the call, stopped after it (its slot comes back)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(MAX_SESSIONS + 1):
        reset = requests.post(
            f"{server.url}/reset", json={"include_visual": True}, headers=bearer, timeout=120
        )
        assert reset.status_code == 200, reset.text
        assert reset.json()["observation"]["visual_observations"]
    step = requests.post(f"{server.url}/step", json={"action": {}}, headers=bearer, timeout=60)
    assert step.status_code == 409 and "reset() first" in step.json()["detail"]  # one-shot: no player to step
    bad = requests.post(f"{server.url}/reset", json={"image_format": "gif"}, headers=bearer, timeout=60)
    assert bad.status_code == 400 and "image_format" in bad.json()["detail"]
    metadata = requests.get(f"{server.url}/metadata", headers=bearer, timeout=10).json()
    assert metadata["name"].startswith("unirender:")
    for token in (None, "wrong-token-wrong-token"):
        env = server.client(token)
        try:
            with pytest.raises(ConnectionError):
                env.connect()
        finally:
            env.close()
