"""Episodes of a Gymnasium env as video files, streamed to disk: :class:`VideoRecorder` (one env) and
:class:`VectorVideoRecorder` (a vector env, its envs side by side), with Gymnasium ``RecordVideo``'s triggers.

Gymnasium's ``RecordVideo`` keeps every frame of a clip in a list and encodes it when the clip ends (memory grows
with the clip: Farama-Foundation/Gymnasium#1377). These recorders hand each frame to a
:class:`unirender.jobs.video.VideoWriter` on its own thread as it is rendered, so memory stays flat and a step
does not wait for the encoder. Same arguments and file names as ``RecordVideo`` (``episode_trigger``,
``step_trigger``, ``video_length``, ``name_prefix``, ``fps``), plus ``quality`` and ``codec``.

:func:`game_fps`: the frame rate of a game's own clock, each env's ``metadata["render_fps"]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

from unirender.jobs.video import DEFAULT_QUALITY, VideoWriter, check_video_options
from unirender.simulator import MLAGENTS, WEBGL

# AI2-THOR's physics step (its Initialize ``fixedDeltaTime``, 0.02 s by default): the simulated time an action
# takes (docs/jobs.md, "Reproducible bytes"). An ML-Agents decision takes ``decision period`` such steps; the
# period is not on the wire: the reference game decides every step, a Unity game's DecisionRequester every 5 by
# default.
FIXED_DELTA_TIME = 0.02
MLAGENTS_DECISION_PERIOD = 5


def game_fps(controller_kwargs: dict[str, Any]) -> float:
    """Steps per second of game time: AI2-THOR 1 / ``fixedDeltaTime`` (50); the reference ML-Agents game 50; a
    Unity ML-Agents game 1 / (0.02 s x 5) = 10 (a recorder's ``fps`` says otherwise for another period); a WebGL
    build its page's virtual clock, ``fps / frames_per_step`` (a step advances that many frames)."""
    kwargs = controller_kwargs or {}
    if kwargs.get("protocol") == WEBGL:
        # what a webgl environment leaves out is the spec's default (the WebGLController's too)
        from unirender.spec.webgl import WebGLEnvironmentSpec

        fields = WebGLEnvironmentSpec.model_fields
        fps = float(kwargs.get("fps") or fields["fps"].default)
        return fps / int(kwargs.get("frames_per_step") or fields["frames_per_step"].default)
    if kwargs.get("protocol") == MLAGENTS:
        period = 1 if kwargs.get("executable") == "builtin" else MLAGENTS_DECISION_PERIOD
        return 1.0 / (FIXED_DELTA_TIME * period)
    return 1.0 / float(kwargs.get("fixedDeltaTime") or FIXED_DELTA_TIME)


def _capped_cubic(episode_id: int) -> bool:
    from gymnasium.utils.save_video import capped_cubic_video_schedule

    return capped_cubic_video_schedule(episode_id)


class _Recording:
    """What both recorders share: the folder, triggers, the open writer and its frame count."""

    def _setup(self, env, video_folder, episode_trigger, step_trigger, video_length, name_prefix, fps, quality,
               codec) -> None:  # fmt: skip
        if env.render_mode != "rgb_array":
            raise ValueError(f"render_mode is {env.render_mode!r}: recording needs render_mode='rgb_array'")
        if video_length < 0:
            raise ValueError(f"video_length must be 0 (whole episodes) or more, not {video_length!r}")
        self.fps = fps if fps is not None else env.metadata.get("render_fps", 30)
        check_video_options(fps=self.fps, codec=codec, quality=quality)
        self.quality, self.codec = quality, codec
        self.episode_trigger = episode_trigger if episode_trigger or step_trigger else _capped_cubic
        self.step_trigger = step_trigger
        self.video_length = video_length or float("inf")
        self.name_prefix = name_prefix
        self.video_folder = os.path.abspath(video_folder)
        os.makedirs(self.video_folder, exist_ok=True)
        self.writer: VideoWriter | None = None
        self.recorded_frames = 0  # in the open video
        self.videos: list[str] = []  # the files written, in order
        self.step_id = self.episode_id = -1

    @property
    def recording(self) -> bool:
        return self.writer is not None

    def start_recording(self, video_name: str) -> None:
        if self.writer is not None:
            self.stop_recording()
        path = os.path.join(self.video_folder, f"{video_name}.mp4")
        self.writer = VideoWriter(path, fps=self.fps, codec=self.codec, quality=self.quality, background=True)
        self.recorded_frames = 0

    def stop_recording(self) -> None:
        writer, self.writer = self.writer, None
        if writer is None:
            return
        if self.recorded_frames:
            self.videos.append(str(writer.close()))
        else:
            writer.abort()

    def _capture(self, frame: Any, owned: bool = False) -> None:
        if frame is None:
            self.stop_recording()
            raise ValueError("render() gave no image: nothing to record")
        frame = np.asarray(frame)
        if frame.flags.writeable and not owned:  # a buffer its env may reuse (an event's frames are read-only)
            frame = frame.copy()
        self.writer.add(frame)
        self.recorded_frames += 1
        if self.recorded_frames >= self.video_length:
            self.stop_recording()

    def _episode_started(self) -> None:
        self.episode_id += 1
        if self.writer is not None and self.video_length == float("inf"):
            self.stop_recording()
        if self.episode_trigger and self.episode_trigger(self.episode_id):
            self.start_recording(f"{self.name_prefix}-episode-{self.episode_id}")

    def _stepped(self) -> None:
        self.step_id += 1
        if self.step_trigger and self.step_trigger(self.step_id):
            self.start_recording(f"{self.name_prefix}-step-{self.step_id}")


class VideoRecorder(gymnasium.Wrapper, _Recording):
    """``VideoRecorder(env, video_folder, episode_trigger=None, step_trigger=None, video_length=0,
    name_prefix="rl-video", fps=None, quality="high", codec="h264")``: Gymnasium ``RecordVideo``'s arguments and
    file names (``<prefix>-episode-<n>.mp4``, ``<prefix>-step-<n>.mp4``), each frame encoded as it comes.
    ``fps`` defaults to the env's ``render_fps`` (the game's clock); ``videos`` lists the files written."""

    def __init__(self, env: gymnasium.Env, video_folder: str, episode_trigger: Callable[[int], bool] | None = None,
                 step_trigger: Callable[[int], bool] | None = None, video_length: int = 0,
                 name_prefix: str = "rl-video", fps: float | None = None, quality: str = DEFAULT_QUALITY,
                 codec: str = "h264"):  # fmt: skip
        gymnasium.Wrapper.__init__(self, env)
        self._setup(env, video_folder, episode_trigger, step_trigger, video_length, name_prefix, fps, quality, codec)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode_started()
        if self.recording:
            self._capture(self.env.render())
        return obs, info

    def step(self, action):
        result = self.env.step(action)
        self._stepped()
        if self.recording:
            self._capture(self.env.render())
        return result

    def close(self):
        try:
            super().close()
        finally:
            self.stop_recording()


class VectorVideoRecorder(VectorWrapper, _Recording):
    """A vector env's recorder: every env's frame side by side in one video (a grid near ``video_aspect_ratio``;
    ``record_first_only``: env 0 alone), episodes counted on env 0, as Gymnasium's vector ``RecordVideo``; each
    frame encoded as it comes. Same-step autoreset: an episode's last frame is its successor's first."""

    def __init__(self, env: gymnasium.vector.VectorEnv, video_folder: str,
                 episode_trigger: Callable[[int], bool] | None = None,
                 step_trigger: Callable[[int], bool] | None = None, video_length: int = 0,
                 name_prefix: str = "rl-video", fps: float | None = None, quality: str = DEFAULT_QUALITY,
                 codec: str = "h264", video_aspect_ratio: tuple[int, int] = (1, 1),
                 record_first_only: bool = False):  # fmt: skip
        VectorWrapper.__init__(self, env)
        self._setup(env, video_folder, episode_trigger, step_trigger, video_length, name_prefix, fps, quality, codec)
        self.autoreset_mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.aspect = video_aspect_ratio[0] / video_aspect_ratio[1]
        self.record_first_only = record_first_only
        self._ended = False  # env 0's episode ended in the previous step (next-step autoreset resets it now)

    def reset(self, *, seed=None, options: dict | None = None):
        if options is None or "reset_mask" not in options or options["reset_mask"][0]:
            self._episode_started()
        obs, info = self.env.reset(seed=seed, options=options)
        if self.recording:
            self._capture(self._grid(self.env.render()), owned=True)
        self._ended = False
        return obs, info

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.env.step(actions)
        ended = bool(terminations[0] or truncations[0])
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            if self._ended:
                self._episode_started()
            self._ended = ended
        elif self.autoreset_mode == AutoresetMode.SAME_STEP and ended:
            self._episode_started()
        self._stepped()
        if self.recording:
            self._capture(self._grid(self.env.render()), owned=True)
        return obs, rewards, terminations, truncations, info

    def close(self, **kwargs: Any):
        try:
            super().close(**kwargs)
        finally:
            self.stop_recording()

    def _grid(self, frames: Sequence[Any]) -> np.ndarray | None:
        frames = [np.asarray(f) for f in (frames[:1] if self.record_first_only else frames) if f is not None]
        if not frames:
            return None
        n, (h, w) = len(frames), frames[0].shape[:2]
        rows = min((r for r in range(1, n + 1) if n % r == 0),
                   key=lambda r: abs((n // r) * w / (r * h) - self.aspect))  # fmt: skip
        cols = n // rows
        grid = np.zeros((rows * h, cols * w, 3), np.uint8)
        for i, frame in enumerate(frames):
            r, c = divmod(i, cols)
            grid[r * h : (r + 1) * h, c * w : (c + 1) * w] = frame[..., :3] if frame.ndim == 3 else frame[..., None]
        return grid


__all__ = ["FIXED_DELTA_TIME", "VectorVideoRecorder", "VideoRecorder", "game_fps"]
