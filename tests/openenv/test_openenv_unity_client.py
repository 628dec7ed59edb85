"""OpenEnv's own Unity environment client (``UnityEnv``, vendored from OpenEnv's repository into
tests/fixtures/openenv_unity_env.py) against ``unirender openenv serve`` on the reference ML-Agents game, as a user
of that client would point it at unirender: it breaks on openenv-core 0.3 by itself (a synchronous ``connect``
that 0.3's asynchronous client awaits); with that one method set back to ``EnvClient.connect``, its
``reset(include_visual=True)``, ``step(UnityAction(...))`` and ``state()`` work unchanged. The spec's
``environment_parameters`` are applied at launch (the reference game's ``light_intensity`` darkens its frames)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

pytest.importorskip("openenv.core")  # the openenv extra

from openenv.core.env_client import EnvClient  # noqa: E402
from PIL import Image  # noqa: E402

from fixtures.openenv_server import OpenEnvServer, token_file  # noqa: E402
from fixtures.openenv_unity_env import UnityAction, UnityEnv, UnityObservation, UnityState  # noqa: E402

pytestmark = pytest.mark.timeout(240)

SPEC = """\
environment:
  protocol: mlagents
  executable: builtin
  width: 32
  height: 32
  time_scale: 100
  environment_parameters:
    light_intensity: 0.1
"""


class FixedUnityEnv(UnityEnv):
    connect = EnvClient.connect  # the one fix: 0.3's EnvClient awaits connect, UnityEnv's is synchronous


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openenv-unity-client")
    spec = tmp / "reach.yaml"
    spec.write_text(SPEC)
    # two: the broken client's socket may still count as a session when the next test connects
    served = OpenEnvServer(spec, token_file(tmp), max_sessions=2)
    yield served
    served.stop()


def brightness(observation: UnityObservation) -> float:
    (image,) = observation.visual_observations
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(image))))
    assert pixels.shape[:2] == (32, 32)
    return float(pixels.mean())


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")  # the vendored client's ws_connect
def test_the_vendored_client_as_it_stands_does_not_run_on_openenv_core_0_3(server):
    client = UnityEnv(base_url=server.url_with_token())
    try:
        with pytest.raises(TypeError, match="await|coroutine"):  # its connect ran and returned no awaitable
            client.sync().connect()
    finally:
        if client._ws is not None:
            client._ws.close()  # the synchronous WebSocket its own connect opened


def test_openenv_unity_client_drives_the_reference_game(server):
    with FixedUnityEnv(base_url=server.url_with_token(), message_timeout_s=120).sync() as env:
        result = env.reset(include_visual=True)
        obs = result.observation
        assert isinstance(obs, UnityObservation) and obs.behavior_name
        assert len(obs.vector_observations) > 0 and not result.done
        spec = obs.action_spec_info
        dark = brightness(obs)

        action = UnityAction(
            continuous_actions=[0.5] * spec["continuous_size"],
            discrete_actions=[branch - 1 for branch in spec["discrete_branches"]],
        )
        result = env.step(action)
        assert isinstance(result.reward, float) and len(result.observation.vector_observations) > 0

        state = env.state()
        assert isinstance(state, UnityState)
        assert state.step_count == 1 and state.env_id == "reach" and state.behavior_name == obs.behavior_name
        assert state.action_spec["continuous_size"] == spec["continuous_size"]

        # the spec's light_intensity (0.1) was applied at launch: a reset back to the default light is brighter
        lit = brightness(env.reset(include_visual=True, environment_parameters={"light_intensity": 1.0}).observation)
        assert lit > dark + 10, (dark, lit)
