"""Write-behind: a unit's frames are selected, encoded and written on a helper thread while the worker waits
for the player's next frame, so writing overlaps rendering instead of adding to it.

Safe because each Event owns its image buffers (the transports allocate a fresh buffer per message) and the
helper thread is the only one touching the episode writer. The queue is short, so memory stays bounded and a
slow disk throttles the worker instead of piling frames up. An error on the helper thread is raised on the
worker's next call.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from unirender.jobs.chunks import PackedMap, select_metadata
from unirender.jobs.episodes import frames_to_record
from unirender.jobs.writers import EpisodeWriter
from unirender.spec import OutputSpec, RenderSpec

_DONE = object()
_SEAL = object()

# (chunk number, its frame records) -> None: writes the chunk's metadata and commits it.
CommitFn = Callable[[int, list[dict[str, Any]]], None]


class WriteBehind:
    def __init__(
        self,
        writer: EpisodeWriter,
        render: RenderSpec,
        output: OutputSpec,
        commit: CommitFn,
        annotate: Callable[[Any, dict[str, Any]], None] | None = None,
        depth: int = 3,
        select: Callable[[Any, Any], tuple[dict[str, Any], dict[str, Any]]] | None = None,
    ):
        self.writer = writer
        self.render = render
        self.output = output
        self.commit = commit
        self.annotate = annotate  # (event, frame record) -> None: adds annotations to the record
        self.select = select  # (event, output) -> (frames, metadata); default: an AI2-THOR Event's
        self.busy_s = 0.0  # helper thread time spent selecting, encoding and writing
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="unirender-write-behind", daemon=True)
        self._thread.start()

    def add(self, index: int, event: Any) -> None:
        self._raise_error()
        self._queue.put((index, event))

    def seal(self) -> None:
        """Commit the open chunk once its queued frames are written (on the helper thread, in order)."""
        self._raise_error()
        self._queue.put(_SEAL)

    def finish(self) -> None:
        """Wait for every queued frame and commit; raises what went wrong on the helper thread."""
        self._stop()
        self._raise_error()

    def discard(self) -> None:
        self._stop()
        self.writer.discard()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_DONE)
            self._thread.join()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (item := self._queue.get()) is not _DONE:
            if self._error is not None:
                continue  # keep draining so that the worker never blocks on a full queue
            start = time.perf_counter()
            try:
                if item is _SEAL:
                    self.commit(*self.writer.seal())
                else:
                    index, event = item
                    if self.select is not None:
                        frames, metadata = self.select(event, self.output)
                    else:
                        frames = frames_to_record(event, self.render)
                        metadata = frame_metadata(event, self.output.metadata)
                    record = self.writer.add(index, frames, metadata)
                    if self.annotate is not None:
                        self.annotate(event, record)
            except BaseException as exc:
                self._error = exc
            self.busy_s += time.perf_counter() - start


def frame_metadata(event: Any, keep: str | list[str]) -> dict[str, Any] | PackedMap:
    """What a frame record stores of an AI2-THOR event's metadata under ``output.metadata``: with ``all``, the
    player's own msgpack bytes when the event still has them (nothing decoded or re-encoded; a WSGI player's JSON is
    converted once), else the decoded dict with the keys ``keep`` selects."""
    if keep == "all":
        packed = event.metadata_msgpack() if hasattr(event, "metadata_msgpack") else None
        if packed is not None:
            return PackedMap(packed)
    return select_metadata(dict(event.metadata), keep)
