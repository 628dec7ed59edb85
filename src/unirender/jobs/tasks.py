"""The task planner: a job's pending work units -> tasks (chunk ranges) for the workers, and the splitting of an
open-ended task once its unit's size is known.

A task is a range of chunks of one unit. Pose and generator episodes are split into about one share per player, so
one big episode keeps every player busy; a grid's size is known only once its scene is loaded, so its task starts
open-ended and hands the rest out when ``size_known`` is called. An action sequence (``unit.sequential``) stays one
task: each of its frames depends on the ones before.
"""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (unit, first pending chunk, end chunk or None: the unit's size is not known yet)
Run = tuple[Any, int, int | None]
MAX_AUTO_WORKERS = 8


@dataclass
class Task:
    """Frames ``start .. end-1`` of a unit (chunk-aligned); ``end`` None: to the unit's end, which a grid learns
    only once its scene is loaded (the task then shrinks and hands the rest out)."""

    unit: Any
    start: int
    end: int | None


def capacity(runs: list[Run]) -> int:
    """How many players the runs can keep busy: every chunk of a pose/generator episode can run on its own player,
    an action sequence only on one, a grid of unknown size on as many as there are CPUs."""
    total = 0
    for unit, lo, hi in runs:
        if hi is None:
            total += os.cpu_count() or 1
        else:
            total += 1 if unit.sequential else hi - lo
    return total


def auto_workers(capacity: int, software: bool) -> int:
    """As many players as the machine sensibly runs: a software rasteriser wants about two cores each."""
    cpus = os.cpu_count() or 1
    per_machine = max(1, cpus // 2) if software else max(1, min(cpus // 2, 4))
    return max(1, min(capacity, per_machine, MAX_AUTO_WORKERS))


def worker_count(runs: list[Run], requested: int | str | None, software: bool) -> int:
    """The players for ``runs``: ``requested`` (an int, or ``auto``/None: :func:`auto_workers`), never more
    than the work can keep busy."""
    room = max(1, capacity(runs))
    n = auto_workers(room, software) if requested in (None, "auto") else int(requested)
    return max(1, min(n, room))


class TaskPlanner:
    """The shared queue of tasks that the workers take from (thread-safe)."""

    def __init__(self, frames_per_chunk: int, workers: int):
        self.chunk = frames_per_chunk
        self.workers = workers
        self._changed = threading.Condition()
        self._queue: deque[Task] = deque()
        self._open_ended = 0

    def plan(self, runs: list[Run], unit_total: Callable[[Any], int]) -> None:
        """Queue the runs as tasks: about one share of the pending chunks per worker."""
        chunk = self.chunk
        pending_chunks = sum(hi - lo for _, lo, hi in runs if hi is not None)
        span = max(1, math.ceil(pending_chunks / self.workers))
        with self._changed:
            for unit, lo, hi in runs:
                if hi is None:
                    self._open_ended += 1
                    self._queue.append(Task(unit, 0, None))
                    continue
                total = unit_total(unit)
                step = hi - lo if unit.sequential else span
                for k in range(lo, hi, step):
                    self._queue.append(Task(unit, k * chunk, min(min(k + step, hi) * chunk, total)))

    def next_task(self, stopping: Callable[[], bool]) -> Task | None:
        """The next task; while a grid is still learning its size, idle workers wait for its share."""
        with self._changed:
            while True:
                if stopping():
                    return None
                if self._queue:
                    return self._queue.popleft()
                if self._open_ended == 0:
                    return None
                self._changed.wait(0.25)

    def size_known(self, task: Task, total: int) -> int:
        """The task's unit has ``total`` frames: an open-ended task keeps its share and queues the rest; returns
        the task's end."""
        with self._changed:
            if task.end is None:
                chunks = math.ceil(total / self.chunk)
                span = chunks if task.unit.sequential else max(1, math.ceil(chunks / self.workers))
                for k in range(span, chunks, span):
                    self._queue.append(Task(task.unit, k * self.chunk, min((k + span) * self.chunk, total)))
                task.end = min(span * self.chunk, total)
                self._open_ended -= 1
                self._changed.notify_all()
            return task.end

    def wake(self) -> None:
        """Let waiting workers look again (a worker ended: the job may be over)."""
        with self._changed:
            self._changed.notify_all()
