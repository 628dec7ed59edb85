"""Sessions as video: a session records one of its views (``record.video`` when it is created, or
``POST /v1/sessions/{id}/video/start`` and ``.../stop`` while it runs); ``GET /v1/sessions/{id}/video`` downloads
the last finished recording.

A recording listens to the session's :class:`~unirender.service.frame_slot.FrameSlot` (every event the session
gets: its first, each step and reset, from the API, ``/v1/steps`` or the console) and hands the view's image to a
:class:`unirender.jobs.video.VideoWriter` encoding on its own thread, so memory stays flat however long the
session runs; a step waits only if the encoder falls ``QUEUE_DEPTH`` frames behind. The file lives in the data
root, ``.session-videos/<owner>/<session>-<n>.mp4`` (apart from the owners' job outputs), until the session ends:
the video goes with it (download it before deleting the session). Sessions do not outlive the service, so a
service that starts removes what a previous one left there.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unirender.errors import SpecError
from unirender.service.errors import ApiError
from unirender.service.paths import owner_dir

SESSION_VIDEOS_DIR = ".session-videos"
log = logging.getLogger(__name__)


class VideoOptions(BaseModel):
    """``record.video`` / the body of ``POST /v1/sessions/{id}/video/start`` (every field optional)."""

    model_config = ConfigDict(extra="forbid")

    fps: float = Field(30, gt=0, le=240, description="frames per second of the video (one frame per event)")
    quality: Literal["low", "medium", "high", "best"] = "high"
    codec: str = Field("h264", min_length=1, max_length=40)
    view: str | None = Field(None, min_length=1, max_length=200,
                             description="the console's view name (default: the first: the agent's colour image)")


class RecordOptions(BaseModel):
    """``record`` in ``POST /v1/sessions``."""

    model_config = ConfigDict(extra="forbid")

    video: VideoOptions | bool = Field(False, description="true or options: record from the first frame")


def parse_options(data: Any, model: type[BaseModel], where: str) -> Any:
    """A body part as ``model`` (422 naming the field on a bad one), codec checked against this PyAV's FFmpeg."""
    from unirender.service.models import validate_body

    options = validate_body(model, {} if data is None else data)
    video = options if isinstance(options, VideoOptions) else options.video
    if isinstance(video, VideoOptions):
        from unirender.jobs.video import check_video_options

        try:
            check_video_options(fps=video.fps, codec=video.codec, quality=video.quality, key=where)
        except SpecError as exc:
            raise ApiError(422, "invalid_spec", str(exc), errors=exc.errors) from None
    return options


@dataclass
class _Recording:
    path: Path
    writer: Any
    view: str
    fps: float
    frames: int = 0
    error: str | None = None


class SessionVideo:
    """One session's recordings: at most one running, the last finished one kept for download."""

    def __init__(self, entry, directory: Path):
        self.entry = entry
        self.directory = directory
        self._lock = threading.Lock()
        self._running: _Recording | None = None
        self._finished: dict[str, Any] | None = None
        self._count = 0

    def start(self, options: VideoOptions) -> dict:
        from unirender.jobs.episodes import modality_of
        from unirender.jobs.video import VideoWriter, modality_image
        from unirender.service.ui.families import UnknownView, console_family

        family = console_family(self.entry.session.family)
        event = self.entry.frames.latest()[1] or self.entry.session.last_event
        try:
            view = family.check_view(options.view) if options.view else family.views(event)[0][0]
        except UnknownView as exc:
            raise ApiError(422, "invalid_spec", str(exc), path="view") from None
        with self._lock:
            if self._running is not None:
                raise ApiError(409, "already_recording", f"session {self.entry.id} is recording already "
                               f"({self._running.frames} frames); POST .../video/stop first")
            self._count += 1
            path = self.directory / f"{self.entry.id}-{self._count}.mp4"
            writer = VideoWriter(path, fps=options.fps, codec=options.codec, quality=options.quality,
                                 image=modality_image(modality_of(view.split("/", 1)[-1])), background=True)
            self._running = _Recording(path, writer, view, options.fps)
        self.entry.frames.subscribe(self._on_event, replay=True)  # from the frame the session shows now
        return self.describe()

    def stop(self) -> dict:
        """Finish the running recording; its file becomes the one ``GET .../video`` serves."""
        self.entry.frames.unsubscribe(self._on_event)
        with self._lock:
            recording, self._running = self._running, None
        if recording is None:
            raise ApiError(409, "not_recording", f"session {self.entry.id} is not recording; POST "
                           ".../video/start first")
        if recording.frames == 0 or recording.error:
            recording.writer.abort()
            raise ApiError(422, "recording_failed", recording.error or "no frame was recorded")
        try:
            recording.writer.close()
        except Exception as exc:  # noqa: BLE001 - the encoder's error, said as such
            raise ApiError(422, "recording_failed", f"the video could not be finished: {exc}") from None
        previous = self._finished
        self._finished = {"path": recording.path, "frames": recording.frames, "fps": recording.fps,
                          "view": recording.view, "bytes": recording.path.stat().st_size}  # fmt: skip
        if previous is not None:
            previous["path"].unlink(missing_ok=True)
        return self.describe()

    def _on_event(self, event) -> None:
        """On the publishing thread: the view's image to the encoder; a failure stops this recording only."""
        from unirender.service.ui.families import console_family

        recording = self._running
        if recording is None or recording.error or event is None:
            return
        try:
            array = console_family(self.entry.session.family).view_array(event, recording.view)
            if array is None:
                return  # e.g. an ML-Agents agent between episodes: no image this step
            recording.writer.add(array)
            recording.frames += 1
        except Exception as exc:  # noqa: BLE001 - never fail the step that published the event
            recording.error = f"frame {recording.frames}: {exc}"
            log.warning("session %s: recording stopped: %s", self.entry.id, exc)

    def finished(self) -> dict:
        with self._lock:
            running, finished = self._running, self._finished
        if finished is None:
            if running is not None:
                raise ApiError(409, "recording", f"session {self.entry.id} is recording ({running.frames} frames "
                               "so far) and has no finished video yet; POST .../video/stop first")
            raise ApiError(404, "no_video", f"session {self.entry.id} has not recorded a video; POST "
                           ".../video/start, step, then .../video/stop")
        return finished

    def describe(self) -> dict:
        running, finished = self._running, self._finished
        return {
            "recording": running is not None,
            "frames": running.frames if running else 0,
            "view": running.view if running else None,
            "error": running.error if running else None,
            "finished": None if finished is None else {k: v for k, v in finished.items() if k != "path"},
        }

    def close(self) -> None:
        """The session has ended: its recordings go with it."""
        self.entry.frames.unsubscribe(self._on_event)
        with self._lock:
            recording, self._running = self._running, None
            finished, self._finished = self._finished, None
        if recording is not None:
            recording.writer.abort()
        if finished is not None:
            finished["path"].unlink(missing_ok=True)


class SessionVideos:
    """The service's session recordings, by session id (made on first use; gone when the session ends)."""

    def __init__(self, data_root: Path):
        import shutil

        self.root = Path(data_root) / SESSION_VIDEOS_DIR
        shutil.rmtree(self.root, ignore_errors=True)  # a previous service's: its sessions are gone
        self._lock = threading.Lock()
        self._videos: dict[str, SessionVideo] = {}

    def of(self, entry) -> SessionVideo:
        with self._lock:
            video = self._videos.get(entry.id)
            if video is None:
                video = self._videos[entry.id] = SessionVideo(entry, owner_dir(self.root, entry.owner))
                entry.frames.on_close(lambda: self.forget(entry.id))
            return video

    def get(self, session_id: str) -> SessionVideo | None:
        with self._lock:
            return self._videos.get(session_id)

    def forget(self, session_id: str) -> None:
        with self._lock:
            video = self._videos.pop(session_id, None)
        if video is not None:
            video.close()


__all__ = ["RecordOptions", "SessionVideo", "SessionVideos", "VideoOptions", "parse_options"]
