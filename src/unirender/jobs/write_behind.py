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
from typing import Any

from unirender.jobs.episodes import frames_to_record
from unirender.jobs.writers import EpisodeWriter
from unirender.spec import RenderSpec

_DONE = object()


class WriteBehind:
    def __init__(self, writer: EpisodeWriter, render: RenderSpec, depth: int = 3):
        self.writer = writer
        self.render = render
        self.busy_s = 0.0  # helper thread time spent selecting, encoding and writing
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="unirender-write-behind", daemon=True)
        self._thread.start()

    def add(self, index: int, event: Any) -> None:
        self._raise_error()
        self._queue.put((index, event))

    def finish(self) -> list[dict[str, Any]]:
        """Wait for every queued frame, then make the files final; the frame records."""
        self._stop()
        self._raise_error()
        return self.writer.finish()

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
            index, event = item
            start = time.perf_counter()
            try:
                self.writer.add(index, frames_to_record(event, self.render), dict(event.metadata))
            except BaseException as exc:
                self._error = exc
            self.busy_s += time.perf_counter() - start
