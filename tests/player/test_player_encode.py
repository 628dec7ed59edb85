"""Wire encodings of the player's modalities and its launch contract parsing (no rendering)."""

import numpy as np
import pytest

from unirender.player import encode
from unirender.player.launch import LaunchError, parse_launch
from unirender.player.session import CLOUD_RENDERING_DEFAULT_SIZE


def test_flow_roundtrip_in_every_direction():
    h, w = 64, 80
    angles = np.linspace(-np.pi, np.pi, w, endpoint=False)
    mags = np.linspace(2.0, 30.0, h)[:, None]
    flow = np.stack([np.cos(angles)[None] * mags, np.sin(angles)[None] * mags], axis=-1).astype(np.float32)
    rgba = np.frombuffer(encode.encode_flow(flow), np.uint8).reshape(h, w, 4)
    assert (rgba[..., 3] == 255).all()
    back = encode.decode_flow(rgba)
    # 8-bit value: magnitude resolution ~ w/255 px; direction is exact to a few degrees
    err = np.linalg.norm(back - flow, axis=-1)
    assert err.max() < 1.5, err.max()
    assert (
        np.sign(back[..., 0][np.abs(flow[..., 0]) > 2]).tolist()
        == np.sign(flow[..., 0][np.abs(flow[..., 0]) > 2]).tolist()
    )


def test_flow_hue_follows_unity_shader_for_a_rightward_motion():
    # motion +x: angle = atan2(-0, -m) = pi -> hue 1.0 -> Hue() = red; value = |m|/w
    flow = np.zeros((2, 10, 2), np.float32)
    flow[..., 0] = 5.0  # half the width
    rgba = np.frombuffer(encode.encode_flow(flow), np.uint8).reshape(2, 10, 4)
    assert rgba[0, 0].tolist() == [128, 0, 0, 255]
    zero = np.frombuffer(encode.encode_flow(np.zeros((2, 2, 2), np.float32)), np.uint8).reshape(2, 2, 4)
    assert (zero[..., :3] == 0).all() and (encode.decode_flow(zero) == 0).all()


def test_normals_ids_and_depth_bytes():
    n = np.array([[[0, 1, 0], [1, 0, 0], [0, 0, -1]]], np.float32)
    out = np.frombuffer(encode.encode_normals(n), np.uint8).reshape(1, 3, 4)
    assert out.tolist() == [[[128, 255, 128, 255], [255, 128, 128, 255], [128, 128, 0, 255]]]
    lut = encode.color_lut([(10, 20, 30), (1, 2, 3)])
    ids = np.array([[0, 1, 2]], np.uint32)
    raw = np.frombuffer(encode.encode_ids(ids, lut), np.uint8).reshape(1, 3, 4)
    assert raw.tolist() == [[[0, 0, 0, 255], [10, 20, 30, 255], [1, 2, 3, 255]]]
    depth = np.array([[1.5, 2.25]], np.float32)
    assert encode.encode_depth(depth) == b"\x00\x00\xc0?\x00\x00\x10@"  # little-endian float32


def test_launch_contract_linux64_flavour():
    env = {"AI2THOR_SERVER_TYPE": "FIFO", "AI2THOR_FIFO_SERVER_PIPE_PATH": "/s", "AI2THOR_FIFO_CLIENT_PIPE_PATH": "/c",
           "AI2THOR_CLIENT_TOKEN": "tok", "AI2THOR_SERVER_SIDE_SCREENSHOT": "True", "UNIRENDER_PLAYER_BACKEND": "glx"}  # fmt: skip
    argv = ["-screen-fullscreen", "0", "-screen-quality", "5", "-screen-width", "640", "-screen-height", "480",
            "-force-device-index", "1"]  # fmt: skip
    c = parse_launch(argv, env)
    assert (c.backend, c.width, c.height, c.quality, c.device_index) == ("glx", 640, 480, "High", 1)
    assert (c.server_type, c.server_pipe, c.client_pipe, c.token, c.screenshots) == (
        "FIFO",
        "/s",
        "/c",
        "tok",
        True,
    )


def test_launch_contract_cloudrendering_ignores_screen_flags_and_wsgi_defaults():
    c = parse_launch(
        ["-screen-width", "640", "-screen-height", "480"], {"UNIRENDER_PLAYER_BACKEND": "vulkan"}
    )
    assert (c.width, c.height) == CLOUD_RENDERING_DEFAULT_SIZE
    assert (c.server_type, c.host, c.port) == ("WSGI", "127.0.0.1", 8200)  # Unity's defaults (protocol.md 9.13)
    headless = parse_launch(["-batchmode", "-nographics"], {"AI2THOR_SERVER_SIDE_SCREENSHOT": "false"})
    assert headless.backend is None and headless.screenshots is False


@pytest.mark.parametrize(
    ("argv", "env", "text"),
    [
        (["-screen-width", "wide"], {}, "integer"),
        (["-screen-width"], {}, "needs a value"),
        (["-screen-quality", "0"], {}, "-screen-quality"),
        ([], {"UNIRENDER_PLAYER_BACKEND": "metal"}, "UNIRENDER_PLAYER_BACKEND"),
        ([], {"AI2THOR_SERVER_TYPE": "GRPC"}, "FIFO or WSGI"),
        ([], {"AI2THOR_SERVER_TYPE": "FIFO"}, "PIPE_PATH"),
        ([], {"AI2THOR_SERVER_SIDE_SCREENSHOT": "yes"}, "True or False"),
        ([], {"AI2THOR_PORT": "99999"}, "AI2THOR_PORT"),
    ],
)
def test_launch_errors(argv, env, text):
    with pytest.raises(LaunchError, match=text):
        parse_launch(argv, env)
