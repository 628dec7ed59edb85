"""Episodes as video from Gymnasium envs: every env's real ``render_fps``, unirender's streaming recorders (one env,
a vector env) decoded frame for frame against the env's renders, and Gymnasium's own ``RecordVideo`` on
``UnityEnv`` and its vector ``RecordVideo`` on ``UnityVectorEnv``."""

from __future__ import annotations

import numpy as np
import pytest
from gym_helpers import PLAYER, view_of

av = pytest.importorskip("av")

from unirender.gym import UnityEnv, UnityVectorEnv, VectorVideoRecorder, VideoRecorder, game_fps  # noqa: E402

TURN = ["RotateRight"]


def decode(path) -> tuple[list[np.ndarray], float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [f.to_ndarray(format="rgb24") for f in container.decode(stream)], float(stream.average_rate)


def psnr(a, b) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def nearest_view(frame, views) -> int:
    return max(views, key=lambda angle: psnr(frame, views[angle]))


def test_every_env_declares_the_games_fps(backend):
    env = UnityEnv(PLAYER, actions=TURN, backend=backend)
    vec = UnityVectorEnv(2, PLAYER, actions=TURN, backend=backend)
    try:
        assert env.metadata["render_fps"] == 50  # one 0.02 s physics step per action
        assert vec.metadata["render_fps"] == 50 and vec.metadata["autoreset_mode"] is not None
    finally:
        env.close()
        vec.close()
    assert game_fps({**PLAYER, "fixedDeltaTime": 0.05}) == 20
    assert game_fps({"protocol": "mlagents", "executable": "builtin"}) == 50
    assert game_fps({"protocol": "mlagents", "executable": "/games/Reach.x86_64"}) == 10
    # a WebGL build: its page's virtual clock per step (tests/webgl/test_webgl_gym.py: on the env, in a browser)
    assert game_fps({"protocol": "webgl", "fps": 30, "frames_per_step": 3}) == 10
    assert game_fps({"protocol": "webgl"}) == 60


def test_the_recorder_streams_each_triggered_episode(tmp_path, backend, views):
    env = VideoRecorder(
        UnityEnv(PLAYER, actions=TURN, backend=backend, render_mode="rgb_array", max_episode_steps=5),
        tmp_path, episode_trigger=lambda e: e in (0, 2), name_prefix="turn",
    )  # fmt: skip
    seen: dict[int, list[int]] = {}
    try:
        for episode in range(3):
            env.reset()
            seen[episode] = [view_of(env.render(), views)]
            truncated = False
            while not truncated:
                _, _, _, truncated, _ = env.step(0)
                seen[episode].append(view_of(env.render(), views))
    finally:
        env.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["turn-episode-0.mp4", "turn-episode-2.mp4"]
    for episode in (0, 2):
        frames, fps = decode(tmp_path / f"turn-episode-{episode}.mp4")
        assert fps == 50 and len(frames) == 6  # the reset's frame and 5 steps
        assert [nearest_view(f, views) for f in frames] == seen[episode]
        # 64x64: 4:2:0 chroma caps it near 35 dB (tests/jobs/test_job_videos.py checks 35 dB at 300x300)
        assert min(psnr(f, views[a]) for f, a in zip(frames, seen[episode], strict=True)) >= 30
    assert env.videos == [str(tmp_path / "turn-episode-0.mp4"), str(tmp_path / "turn-episode-2.mp4")]


def test_a_step_trigger_and_a_length_cut_clips(tmp_path, backend):
    env = VideoRecorder(UnityEnv(PLAYER, actions=TURN, backend=backend, render_mode="rgb_array"), tmp_path,
                        step_trigger=lambda s: s % 4 == 0, video_length=3, fps=12)  # fmt: skip
    try:
        env.reset()
        for _ in range(9):
            env.step(0)
    finally:
        env.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"rl-video-step-{s}.mp4" for s in (0, 4, 8)]
    lengths = [len(decode(tmp_path / f"rl-video-step-{s}.mp4")[0]) for s in (0, 4, 8)]
    assert lengths == [3, 3, 1] and decode(tmp_path / "rl-video-step-0.mp4")[1] == 12


def test_the_vector_recorder_puts_the_envs_side_by_side(tmp_path, backend, views):
    vec = VectorVideoRecorder(
        UnityVectorEnv(2, PLAYER, actions=TURN, backend=backend, render_mode="rgb_array", max_episode_steps=3),
        tmp_path, episode_trigger=lambda e: e == 0, video_aspect_ratio=(2, 1),
    )  # fmt: skip
    try:
        vec.reset()
        for _ in range(5):
            vec.step(np.zeros(2, dtype=np.int64))
    finally:
        vec.close()
    frames, fps = decode(tmp_path / "rl-video-episode-0.mp4")
    assert fps == 50 and len(frames) == 4  # reset + 3 steps of env 0's first episode
    assert frames[0].shape == (64, 128, 3)
    assert [nearest_view(f[:, :64], views) for f in frames] == [0, 90, 180, 270]
    assert [nearest_view(f[:, 64:], views) for f in frames] == [0, 90, 180, 270]


def test_bad_recorder_options(tmp_path, backend):
    from unirender.errors import SpecError

    env = UnityEnv(PLAYER, actions=TURN, backend=backend)
    try:
        with pytest.raises(ValueError, match="recording needs render_mode='rgb_array'"):
            VideoRecorder(env, tmp_path)
        env.render_mode = "rgb_array"
        with pytest.raises(SpecError, match="video.fps: must be a number above 0"):
            VideoRecorder(env, tmp_path, fps=0)
        with pytest.raises(SpecError, match="'nosuchcodec' is not a video encoder"):
            VideoRecorder(env, tmp_path, codec="nosuchcodec")
    finally:
        env.close()


def test_gymnasiums_record_video_on_unity_env(tmp_path, backend, views):
    pytest.importorskip("moviepy")
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(UnityEnv(PLAYER, actions=TURN, backend=backend, render_mode="rgb_array",
                               max_episode_steps=3), str(tmp_path / "v"), episode_trigger=lambda e: e == 0)  # fmt: skip
    try:
        env.reset()
        for _ in range(3):
            env.step(0)
        env.reset()  # ends the clip
    finally:
        env.close()
    frames, fps = decode(tmp_path / "v" / "rl-video-episode-0.mp4")
    assert fps == 50 and len(frames) == 4
    assert [nearest_view(f, views) for f in frames] == [0, 90, 180, 270]


def test_gymnasiums_vector_record_video_on_the_vector_env(tmp_path, backend, views):
    pytest.importorskip("moviepy")
    from gymnasium.wrappers.vector import RecordVideo

    vec = RecordVideo(UnityVectorEnv(2, PLAYER, actions=TURN, backend=backend, render_mode="rgb_array",
                                     max_episode_steps=3), str(tmp_path / "v"), episode_trigger=lambda e: e == 0)  # fmt: skip
    try:
        vec.reset()
        for _ in range(5):
            vec.step(np.zeros(2, dtype=np.int64))
    finally:
        vec.close()
    frames, fps = decode(tmp_path / "v" / "rl-video-episode-0.mp4")
    assert fps == 50 and len(frames) == 4
    assert [nearest_view(f[:, :64], views) for f in frames] == [0, 90, 180, 270]


def test_mlagents_envs_declare_the_games_fps_and_record(tmp_path):
    pytest.importorskip("grpc")
    from unirender.gym import MLAgentsEnv, MLAgentsVectorEnv

    env = {"executable": "builtin", "platform": "EGL", "width": 32, "height": 32, "time_scale": 100,
           "env": {"UNIRENDER_MLAGENTS_AGENTS": "2"}}  # fmt: skip
    recorder = VideoRecorder(MLAgentsEnv(environment=env, render_mode="rgb_array", max_episode_steps=3), tmp_path)
    try:
        assert recorder.metadata["render_fps"] == 50  # the reference game decides every physics step
        recorder.reset(seed=1)
        for _ in range(3):
            recorder.step(recorder.action_space.sample())
    finally:
        recorder.close()
    frames, fps = decode(tmp_path / "rl-video-episode-0.mp4")
    assert fps == 50 and len(frames) == 4 and frames[0].shape == (32, 32, 3)
    vec = MLAgentsVectorEnv(environment=env, render_mode="rgb_array")
    try:
        assert vec.metadata["render_fps"] == 50 and vec.num_envs == 2
    finally:
        vec.close()
