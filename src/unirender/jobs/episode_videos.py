"""A job's videos (``output.video``): per-chunk segments encoded while the job renders, joined per episode.

Each chunk of a unit gets one video *segment* per stream (a camera and modality, or the tiled sheet),
``videos/<unit>/segments/<chunk>.<stream>.mp4``, encoded on its own thread as the chunk's frames are written and
made final before the chunk's commit line: a committed chunk always has its segments. When the job ends, every
finished unit's segments are joined without re-encoding (each starts with a key frame) into
``videos/<unit>/<stream>.mp4`` and removed. So a job killed anywhere and resumed redoes only its open chunks'
segments, as it redoes their frames, and still ends with complete videos; the manifest lists them.

:func:`write_dataset_videos` (``unirender video DATASET``) makes the same files from a finished dataset's frames
instead, for a dataset written without ``output.video`` or with other options.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from unirender.errors import SpecError
from unirender.jobs.atomic import sweep_temp_files
from unirender.jobs.state import VIDEOS_DIR
from unirender.jobs.units import EpisodeFailed
from unirender.jobs.video import VideoWriter, check_video_options, modality_image, tiled_image, video_info
from unirender.jobs.writers import safe_name
from unirender.spec.models import VideoSpec

SEGMENTS_DIR = "segments"
TILED = "tiled"


def stream_name(camera: str, modality: str) -> str:
    return f"{safe_name(camera)}.{modality}"


def check_video_spec(video: VideoSpec) -> None:
    """Fail before anything starts on options that only PyAV can judge (the codec)."""
    check_video_options(fps=video.fps, codec=video.codec, quality=video.quality, key="output.video")


def select_streams(keys: Iterable[str], video: VideoSpec,
                   stream_of: Callable[[str], tuple[str, str]]) -> dict[str, str]:  # fmt: skip
    """``{stream name: frame key}`` of the frame keys ``video`` picks (its modalities and cameras; a camera named
    ``CameraSensor`` picks ``CameraSensor.0``, ``CameraSensor.1``, ...)."""
    streams: dict[str, str] = {}
    for key in keys:
        camera, modality = stream_of(key)
        if video.modalities is not None and modality not in video.modalities:
            continue
        if video.cameras is not None and not any(camera == c or camera.startswith(c + ".") for c in video.cameras):
            continue
        streams[stream_name(camera, modality)] = key
    return streams


def _writer_for(path: Path, video: VideoSpec, streams: dict[str, str], stream: str,
                stream_of: Callable[[str], tuple[str, str]]) -> VideoWriter:  # fmt: skip
    if stream == TILED:
        image = tiled_image(list(streams.values()), value_range=video.depth_range)
    else:
        image = modality_image(stream_of(streams[stream])[1], value_range=video.depth_range)
    return VideoWriter(path, fps=video.fps, codec=video.codec, quality=video.quality, image=image,
                       background=True, faststart=False)  # fmt: skip


class VideoEpisodeWriter:
    """An episode writer (``add``/``seal``/``discard``) that also streams each chunk's frames into its video
    segments; the chunk's frames and metadata go to ``inner`` as before."""

    def __init__(self, inner, root: Path, unit_id: str, video: VideoSpec,
                 stream_of: Callable[[str], tuple[str, str]]):  # fmt: skip
        self.inner, self.video, self.stream_of = inner, video, stream_of
        self.dir = Path(root) / VIDEOS_DIR / unit_id / SEGMENTS_DIR
        self.streams: dict[str, str] | None = None  # stream -> frame key, from the first frame
        self.writers: dict[str, VideoWriter] = {}

    @property
    def chunk(self):
        return self.inner.chunk

    def add(self, index: int, frames: dict[str, Any], metadata: Any) -> dict[str, Any]:
        record = self.inner.add(index, frames, metadata)
        if self.streams is None:
            self.streams = select_streams(frames, self.video, self.stream_of)
            if not self.streams:
                raise EpisodeFailed(
                    f"output.video picks none of the frame's images ({', '.join(frames)}); check its "
                    f"modalities {self.video.modalities} and cameras {self.video.cameras}"
                )
        if not self.writers:
            names = [TILED] if self.video.tile else list(self.streams)
            self.writers = {
                name: _writer_for(self.dir / f"{self.inner.chunk:04d}.{name}.mp4", self.video, self.streams, name,
                                  self.stream_of)
                for name in names
            }  # fmt: skip
        for name, writer in self.writers.items():
            keys = list(self.streams.values()) if name == TILED else [self.streams[name]]
            missing = [k for k in keys if k not in frames]
            if missing:
                raise EpisodeFailed(f"frame {index} has no {missing} for its video (the first frame had them)")
            writer.add([frames[k] for k in keys] if name == TILED else frames[keys[0]])
        return record

    def seal(self):
        """The segments are final before the chunk is (its commit line follows this)."""
        writers, self.writers = self.writers, {}
        try:
            for writer in writers.values():
                writer.close()
        except BaseException:
            for writer in writers.values():
                writer.abort()
            raise
        return self.inner.seal()

    def discard(self) -> None:
        writers, self.writers = self.writers, {}
        for writer in writers.values():
            writer.abort()
        self.inner.discard()


def finish_videos(root: Path, video: VideoSpec, units: list[Any], committed: dict[str, dict[int, Any]],
                  frames_per_chunk: int) -> list[dict[str, Any]]:  # fmt: skip
    """Join the segments of every finished unit into its videos (and remove them); the manifest's ``videos``
    list: one entry per video of every finished unit, whether joined now or by an earlier run."""
    root = Path(root)
    sweep_temp_files(root / VIDEOS_DIR)  # what a killed run was encoding; its chunks are not committed
    entries: list[dict[str, Any]] = []
    for unit in units:
        done = committed.get(unit.id, {})
        if not done:
            continue
        total = next(iter(done.values())).unit_frames
        if len(done) < math.ceil(total / frames_per_chunk):
            continue  # not finished (a cancelled run): its segments wait for the resume
        unit_dir = root / VIDEOS_DIR / unit.id
        segments = unit_dir / SEGMENTS_DIR
        if segments.is_dir():
            streams = sorted({p.name.split(".", 1)[1].removesuffix(".mp4") for p in segments.glob("0000.*.mp4")})
            for stream in streams:
                parts = [segments / f"{k:04d}.{stream}.mp4" for k in sorted(done)]
                lost = [p.name for p in parts if not p.is_file()]
                if lost:
                    raise EpisodeFailed(
                        f"{unit.id}: video segments {lost} of committed chunks are gone; make the videos from "
                        f"the frames with `unirender video {root} --episode {unit.id}`"
                    )
                from unirender.jobs.video import join_videos

                join_videos(parts, unit_dir / f"{stream}.mp4", fps=video.fps)
            shutil.rmtree(segments)
        for path in sorted(unit_dir.glob("*.mp4")):
            entries.append(_entry(root, unit.id, path))
    return entries


def _entry(root: Path, unit_id: str, path: Path) -> dict[str, Any]:
    stream = path.name.removesuffix(".mp4")
    camera, _, modality = stream.rpartition(".")
    info = video_info(path)
    return {
        "unit": unit_id,
        "file": str(path.relative_to(root)),
        "camera": camera if stream != TILED else None,
        "modality": modality if stream != TILED else None,
        "tiled": stream == TILED,
        "frames": info["frames"],
        "fps": info["fps"],
        "width": info["width"],
        "height": info["height"],
        "codec": info["codec"],
        "bytes": path.stat().st_size,
    }


def write_dataset_videos(directory: str | Path, *, episodes: list[str] | None = None,
                         video: VideoSpec | None = None, out: str | Path | None = None,
                         progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Videos of a finished dataset's episodes made from its frames: ``videos/<unit>/<stream>.mp4`` under
    ``out`` (default: the dataset). ``episodes``: unit ids or episode numbers (default: all); ``video``: the
    options (default: the spec's ``output.video``, else the defaults). Frames are read and encoded one at a
    time."""
    from unirender.jobs.dataset import Dataset

    dataset = Dataset(directory)
    spec_video = (dataset.manifest.get("spec", {}).get("output") or {}).get("video")
    video = video or VideoSpec(**(spec_video or {}))
    check_video_spec(video)
    out = Path(out) if out is not None else dataset.root
    stream_of = dataset._family.video_stream
    units = dataset.manifest.get("units")
    if units is None:
        raise EpisodeFailed(f"{directory}: written before chunked commits; render it again to make videos")
    chosen = _choose_units(units, episodes)
    entries: list[dict[str, Any]] = []
    start = 0
    starts = {}
    for unit in units:
        starts[unit["id"]] = start
        start += unit["frames"]
    try:
        for unit in chosen:
            if not unit["frames"]:
                continue
            first = starts[unit["id"]]
            streams = select_streams(dataset.images(first), video, stream_of)
            if not streams:
                message = f"{unit['id']}: the options pick none of its images ({', '.join(dataset.images(first))})"
                raise SpecError(message, [("output.video", message)])
            names = [TILED] if video.tile else list(streams)
            unit_dir = out / VIDEOS_DIR / unit["id"]
            writers = {n: _writer_for(unit_dir / f"{n}.mp4", video, streams, n, stream_of) for n in names}
            try:
                for i in range(first, first + unit["frames"]):
                    images = dataset.images(i)
                    for name, writer in writers.items():
                        if name == TILED:
                            writer.add([images[k] for k in streams.values()])
                        else:
                            writer.add(images[streams[name]])
                for writer in writers.values():
                    writer.close()
            except BaseException:
                for writer in writers.values():
                    writer.abort()
                raise
            for name in names:
                entries.append(_entry(out, unit["id"], unit_dir / f"{name}.mp4"))
                if progress:
                    progress(str(unit_dir / f"{name}.mp4"))
    finally:
        dataset.close()
    return entries


def _choose_units(units: list[dict[str, Any]], episodes: list[str] | None) -> list[dict[str, Any]]:
    if not episodes:
        return units
    chosen = []
    for wanted in episodes:
        match = [u for u in units if u["id"] == wanted or (wanted.isdigit() and u["episode"] == int(wanted))]
        if not match:
            ids = ", ".join(u["id"] for u in units[:10]) + (" ..." if len(units) > 10 else "")
            message = f"no episode {wanted!r} in the dataset (units: {ids}; or an episode number)"
            raise SpecError(message, [("episodes", message)])
        chosen += [u for u in match if u not in chosen]
    return chosen


__all__ = ["VideoEpisodeWriter", "check_video_spec", "finish_videos", "select_streams", "write_dataset_videos"]
