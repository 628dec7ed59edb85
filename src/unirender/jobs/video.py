"""Streaming video: frames go to the encoder as they arrive, so memory does not grow with an episode's length.

PyAV (``unirender[video]``; its wheels bundle FFmpeg with libx264) encodes H.264 in an mp4 by default, yuv420p
(what browsers play), at a named quality (x264's constant rate factor). A :class:`VideoWriter` writes one file; it
appears under its final name only when closed (a temporary name before, swept like every job temporary), and with
``background=True`` colour mapping and encoding run on a thread of its own behind a short queue, so the caller
(a job's writer, a Gymnasium step, a session) never waits for the encoder unless the queue is full.

Modalities are drawn with the contact sheet's colour maps (:mod:`unirender.jobs.contact_sheet`): depth through
turbo, flow as a colour wheel, normals from [-1, 1], ids hashed to colours. A tiled video is the contact sheet's
layout, one sheet per frame.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from unirender.errors import SpecError

DEFAULT_FPS = 30
# Named qualities -> x264's (and x265's, SVT-AV1's, VP9's) constant rate factor: lower is better and larger.
# "high", the default, keeps rendered frames above 35 dB PSNR (tests/jobs/test_video.py).
QUALITY_CRF: dict[str, int] = {"low": 28, "medium": 23, "high": 18, "best": 12}
DEFAULT_QUALITY = "high"
# Short names for the encoders that FFmpeg builds usually carry; any other FFmpeg encoder name works too.
CODEC_ALIASES: dict[str, str] = {"h264": "libx264", "hevc": "libx265", "h265": "libx265", "av1": "libsvtav1",
                                 "vp9": "libvpx-vp9"}  # fmt: skip
_CRF_ENCODERS = {"libx264", "libx265", "libsvtav1", "libvpx-vp9"}
# x264's "veryfast": about 4x x264's default speed at 1024x1024 for ~15 % more bytes, so that encoding keeps up
# with a player on the same cores (benchmarks/video.py).
X264_PRESET = "veryfast"
QUEUE_DEPTH = 8  # frames waiting for a background encoder: bounds memory, throttles a producer that outruns it


def _av():
    try:
        import av
    except ImportError as exc:  # pragma: no cover - the test venv has it
        raise SpecError(
            "video needs PyAV: pip install 'unirender[video]'", [("video", "PyAV (av) is not installed")]
        ) from exc
    return av


def video_encoders() -> list[str]:
    """The video encoders this PyAV's FFmpeg has (for error messages)."""
    av = _av()
    names = []
    for name in sorted(av.codecs_available):
        try:
            if av.codec.Codec(name, "w").type == "video":
                names.append(name)
        except Exception:  # a decoder only
            continue
    return names


def check_video_options(*, fps: Any = DEFAULT_FPS, codec: str = "h264", quality: str = DEFAULT_QUALITY,
                        key: str = "video") -> str:  # fmt: skip
    """Validate ``fps``, ``codec`` and ``quality``; returns the FFmpeg encoder name. Raises ``SpecError`` naming
    the option (``key`` prefixes it: ``output.video.fps``) and what is allowed."""
    problems: list[tuple[str, str]] = []
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0 or not np.isfinite(fps):
        problems.append((f"{key}.fps", f"must be a number above 0 (frames per second), got {fps!r}"))
    if quality not in QUALITY_CRF:
        problems.append((f"{key}.quality", f"must be one of {', '.join(QUALITY_CRF)}, got {quality!r}"))
    encoder = CODEC_ALIASES.get(codec, codec) if isinstance(codec, str) else repr(codec)
    av = _av()
    try:
        ok = av.codec.Codec(encoder, "w").type == "video"
    except Exception:
        ok = False
    if not ok:
        known = ", ".join(n for n in video_encoders() if n.startswith("lib"))
        problems.append(
            (f"{key}.codec", f"{codec!r} is not a video encoder of this PyAV/FFmpeg build "
                             f"(short names: {', '.join(CODEC_ALIASES)}; encoders here include {known})")
        )  # fmt: skip
    if problems:
        raise SpecError(
            f"invalid video options ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n"
            + "\n".join(f"  {k}: {m}" for k, m in problems),
            problems,
        )
    return encoder


def as_video_rgb(image: np.ndarray) -> np.ndarray:
    """A frame as the encoder takes it: uint8 RGB ``(H, W, 3)`` (grey and RGBA are converted; anything else
    through the contact sheet's ``as_rgb``)."""
    from unirender.jobs.contact_sheet import as_rgb

    array = np.asarray(image)
    if array.dtype == np.uint8 and array.ndim == 3 and array.shape[2] == 3:
        return array
    return as_rgb(array)


def modality_image(modality: str, value_range: tuple[float, float] | None = None) -> Callable[[Any], np.ndarray]:
    """``array -> uint8 RGB`` for frames of ``modality`` with the contact sheet's colour maps. ``value_range``
    fixes depth's colour scale (near, far) for a whole video; without it each frame is scaled to its own range,
    as the contact sheet does."""
    from unirender.jobs.contact_sheet import visualize

    def render(array: Any) -> np.ndarray:
        return visualize(modality, np.asarray(array), value_range=value_range)[0]

    return render


def tiled_image(labels: Sequence[str], *, tile: int = 256, columns: int = 4,
                value_range: tuple[float, float] | None = None) -> Callable[[Sequence[Any]], np.ndarray]:  # fmt: skip
    """``[array per label] -> uint8 RGB``: the contact sheet of one frame (its layout and captions)."""
    from unirender.jobs.contact_sheet import contact_sheet

    def render(arrays: Sequence[Any]) -> np.ndarray:
        panels = list(zip(labels, (np.asarray(a) for a in arrays), strict=True))
        return np.asarray(contact_sheet(panels, tile=tile, columns=columns, value_range=value_range))

    return render


class VideoWriter:
    """One video file, encoded as frames arrive.

    ``add(frame)`` takes whatever ``image`` turns into uint8 RGB (default: RGB or grey uint8 as they are); the
    first frame sets the size (odd sizes are padded by one black row/column: yuv420p needs even ones); every
    later frame must have it. ``close()`` flushes the encoder and renames the file into place; ``abort()``
    drops it. ``background=True`` renders and encodes on a thread of its own (at most ``QUEUE_DEPTH`` frames
    wait; an encoder error is raised by the next ``add`` or by ``close``); the frames handed over must not be
    changed afterwards.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        fps: float = DEFAULT_FPS,
        codec: str = "h264",
        quality: str = DEFAULT_QUALITY,
        image: Callable[[Any], np.ndarray] = as_video_rgb,
        background: bool = False,
        faststart: bool = True,
    ):
        from unirender.jobs.atomic import temp_path_for

        self.encoder = check_video_options(fps=fps, codec=codec, quality=quality)
        self.path = Path(path)
        self.fps, self.quality, self.image, self.faststart = fps, quality, image, faststart
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (width, height) as encoded
        self._tmp = temp_path_for(self.path)
        self._container = self._stream = None
        self._closed = False
        self._error: BaseException | None = None
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._queue = queue.Queue(maxsize=QUEUE_DEPTH)
            self._thread = threading.Thread(target=self._drain, name="unirender-video", daemon=True)
            self._thread.start()

    # -- the caller's side ---------------------------------------------------------------------------
    def add(self, frame: Any) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: add() after close()")
        self._raise_error()
        if self._queue is None:
            self._encode(frame)
        else:
            self._queue.put(frame)

    def close(self) -> Path:
        """Flush, close and move the file into place; returns its path. Raises what went wrong (and drops the
        file) if encoding failed."""
        if self._closed:
            return self.path
        self._stop_thread()
        try:
            self._raise_error()
            if self._container is None:
                raise ValueError(f"{self.path}: no frames were added")
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            self._container = None
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Drop the file (its temporary); safe to call at any time and more than once."""
        self._closed = True
        if self._error is None:
            self._error = ValueError(f"{self.path}: aborted")  # the encoder thread skips what is still queued
        self._stop_thread()
        if self._container is not None:
            try:
                self._container.close()
            except Exception:
                pass  # the temporary goes anyway
            self._container = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- the encoder's side --------------------------------------------------------------------------
    def _stop_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(_DONE)
            self._thread.join()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _drain(self) -> None:
        while (frame := self._queue.get()) is not _DONE:
            if self._error is not None:
                continue  # keep draining: the producer must never block on a full queue
            try:
                self._encode(frame)
            except BaseException as exc:
                self._error = exc

    def _open(self, width: int, height: int) -> None:
        av = _av()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        options = {"movflags": "+faststart"} if self.faststart else {}
        self._container = av.open(str(self._tmp), "w", format="mp4", options=options)
        codec_options = {}
        if self.encoder in _CRF_ENCODERS:
            codec_options["crf"] = str(QUALITY_CRF[self.quality])
        if self.encoder == "libx264":
            codec_options["preset"] = X264_PRESET
        if self.encoder == "libvpx-vp9":
            codec_options["b"] = "0"  # constant quality
        rate = Fraction(self.fps).limit_denominator(1001)
        stream = self._container.add_stream(self.encoder, rate=rate, options=codec_options)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = 1 / rate
        self._stream = stream

    def _encode(self, frame: Any) -> None:
        av = _av()
        rgb = np.asarray(self.image(frame))
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            rgb = as_video_rgb(rgb)
        h, w = rgb.shape[:2]
        padded = (w + w % 2, h + h % 2)
        if self.size is None:
            self._open(*padded)
            self.size = padded
        elif padded != self.size:
            raise ValueError(f"{self.path}: frame {self.frames} is {w}x{h}, the video's frames are "
                             f"{self.size[0]}x{self.size[1]} (one size per video)")  # fmt: skip
        if padded != (w, h):
            rgb = np.pad(rgb, ((0, padded[1] - h), (0, padded[0] - w), (0, 0)))
        video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        video_frame.pts = self.frames
        for packet in self._stream.encode(video_frame):
            self._container.mux(packet)
        self.frames += 1


_DONE = object()


def join_videos(parts: Sequence[str | os.PathLike], path: str | os.PathLike, *, fps: float) -> int:
    """Concatenate videos written by :class:`VideoWriter` with one encoder setting (a job's per-chunk segments)
    into ``path`` without re-encoding: each part starts with a key frame, so its packets are copied with their
    timestamps renumbered to follow the previous part's frames. Returns the frame count."""
    from unirender.jobs.atomic import temp_path_for

    av = _av()
    path = Path(path)
    tmp = temp_path_for(path)
    rate = Fraction(fps).limit_denominator(1001)
    # Decode timestamps must step by one frame across the joins, while parts may start with different
    # reordering delays (x264 shortens it for a short part): every packet gets the next decode slot, shifted by
    # the largest delay, which keeps each one's decode time at or before its presentation time.
    delay = max(_reorder_delay(part, rate) for part in parts)
    frames = slot = 0
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "+faststart"}) as out:
            stream = None
            for part in parts:
                with av.open(str(part)) as src:
                    source = src.streams.video[0]
                    if stream is None:
                        stream = out.add_stream_from_template(source)
                        stream.time_base = 1 / rate
                    packets = [p for p in src.demux(source) if p.size]
                    ticks = 1 / (source.time_base * rate)  # source ticks per frame
                    first = min(p.pts for p in packets)
                    for packet in packets:
                        packet.pts = frames + round((packet.pts - first) / ticks)
                        packet.dts = slot - delay
                        packet.duration = 1
                        packet.time_base = 1 / rate
                        packet.stream = stream
                        out.mux(packet)
                        slot += 1
                    frames += len(packets)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return frames


def _reorder_delay(path: str | os.PathLike, rate: Fraction) -> int:
    """Frames between a video's first decode and first presentation time (B-frame reordering): its first
    packet is its first picture, a key frame."""
    av = _av()
    with av.open(str(path)) as src:
        source = src.streams.video[0]
        for packet in src.demux(source):
            if packet.size:
                return round((packet.pts - packet.dts) * source.time_base * rate)
    return 0


def video_info(path: str | os.PathLike) -> dict[str, Any]:
    """``{"frames", "fps", "width", "height", "codec", "duration_s"}`` of a video file (counted by demuxing:
    exact, without decoding)."""
    av = _av()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for p in container.demux(stream) if p.size)
        fps = stream.average_rate or stream.guessed_rate
        return {
            "frames": frames,
            "fps": float(fps) if fps else None,
            "width": stream.codec_context.width,
            "height": stream.codec_context.height,
            "codec": stream.codec_context.name,
            "duration_s": round(frames / float(fps), 6) if fps else None,
        }


__all__ = [
    "CODEC_ALIASES",
    "DEFAULT_FPS",
    "DEFAULT_QUALITY",
    "QUALITY_CRF",
    "VideoWriter",
    "as_video_rgb",
    "check_video_options",
    "join_videos",
    "modality_image",
    "tiled_image",
    "video_encoders",
    "video_info",
]
