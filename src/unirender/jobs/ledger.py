"""The commit and accounting part of a job: which chunks are committed, the frame and unit counts, progress, and
the time the workers spent stepping and writing.

On a resume the ledger starts from the commit log (:class:`~unirender.jobs.state.JobState`): what is committed is
kept, every chunk that is not is a pending run for the planner, and the files an interrupted run left half written
are swept. A chunk is committed on its write-behind thread once its files are in place: its metadata file, then
its line in the commit log (:mod:`unirender.jobs.chunks`).
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unirender.jobs.atomic import write_atomic
from unirender.jobs.chunks import Commit, digest, encode_records, meta_path
from unirender.jobs.progress import Reporter
from unirender.jobs.state import JobState
from unirender.jobs.tasks import Run
from unirender.jobs.writers import FRAMES_DIR


def _contiguous(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted ints as half-open runs: [0, 1, 2, 5, 6] -> [(0, 3), (5, 7)]."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n:
            runs[-1] = (runs[-1][0], n + 1)
        else:
            runs.append((n, n + 1))
    return runs


class Ledger:
    """Commits, counts and timings of one job run (thread-safe)."""

    def __init__(
        self,
        root: Path,
        state: JobState,
        units: list[Any],
        frames_per_chunk: int,
        reporter: Reporter,
        progress: Callable[[dict], None] | None = None,
    ):
        self.root, self.state, self.units, self.chunk = root, state, units, frames_per_chunk
        self.reporter, self.progress = reporter, progress
        self.lock = threading.Lock()
        self.committed: dict[str, dict[int, Commit]] = defaultdict(dict)
        self.unit_totals: dict[str, int] = {}  # learnt while rendering (a grid's size)
        self._sized: set[str] = set()  # units whose frames are counted in frames_total
        self.frames_done = self.frames_total = 0
        self.units_done = 0
        self.step_s = self.write_s = self.encode_s = 0.0

    # -- resume ---------------------------------------------------------------------------------------
    def resume(self) -> tuple[list[Run], int]:
        """Start from the commit log: ``(pending runs, frames kept)``; sweeps what an interrupted run left."""
        commits = self.state.commits()
        for (unit_id, k), commit in commits.items():
            self.committed[unit_id][k] = commit
        kept = sum(c.frames for c in commits.values())
        runs: list[Run] = []
        open_dirs: list[Path] = []
        for unit in self.units:
            done = self.committed.get(unit.id, {})
            total = self.unit_total(unit)
            missing: list[int] = []
            if total is not None:
                self._sized.add(unit.id)  # counted here, not again when the grid is loaded
                missing = [k for k in range(math.ceil(total / self.chunk)) if k not in done]
                runs += [(unit, lo, hi) for lo, hi in _contiguous(missing)]
                self.frames_total += sum(min(self.chunk, total - k * self.chunk) for k in missing)
            else:
                runs.append((unit, 0, None))
            unit_dir = self.root / FRAMES_DIR / unit.id
            if (total is None or missing) and unit_dir.is_dir():
                open_dirs += [
                    d for d in unit_dir.iterdir() if not d.name.isdigit() or int(d.name) not in done
                ]
        self.state.sweep(open_dirs)
        pending = {u.id for u, _, _ in runs}
        self.units_done = len(self.units) - len(pending)
        self.frames_done = kept
        self.frames_total += kept
        if commits:
            self.reporter.log(
                f"{self.root}: {kept:,} frames kept, {len(pending)} unit{'s' if len(pending) != 1 else ''} left"
            )
        return runs, kept

    # -- counts ---------------------------------------------------------------------------------------
    def unit_total(self, unit: Any) -> int | None:
        if unit.known_frame_count is not None:
            return unit.known_frame_count
        if unit.id in self.unit_totals:
            return self.unit_totals[unit.id]
        return next((c.unit_frames for c in self.committed.get(unit.id, {}).values()), None)

    def size_known(self, unit: Any, total: int) -> None:
        """A unit's frame count became known while rendering (a grid): count it once."""
        with self.lock:
            self.unit_totals[unit.id] = total
            if unit.known_frame_count is not None or unit.id in self._sized:
                return
            self._sized.add(unit.id)
            self.frames_total += total
        self.reporter.add_total(total)

    def kept(self) -> tuple[int, int]:
        """(frames committed, units not finished) right now."""
        with self.lock:
            kept = sum(c.frames for done in self.committed.values() for c in done.values())
            left = 0
            for unit in self.units:
                total = self.unit_total(unit)
                if total is None or len(self.committed.get(unit.id, {})) < math.ceil(total / self.chunk):
                    left += 1
        return kept, left

    def frames_committed(self) -> int:
        with self.lock:
            return sum(c.frames for done in self.committed.values() for c in done.values())

    def advance(self, frames: int) -> None:
        with self.lock:
            self.frames_done += frames
            snapshot = {
                "frames_done": self.frames_done,
                "frames_total": self.frames_total,
                "episodes_done": self.units_done,
                "episodes_total": len(self.units),
            }
        self.reporter.advance(frames)
        if self.progress:
            self.progress(snapshot)

    def add_times(self, step_s: float, write_s: float, encode_s: float) -> None:
        with self.lock:
            self.step_s += step_s
            self.write_s += write_s
            self.encode_s += encode_s

    # -- commits --------------------------------------------------------------------------------------
    def first_pending(self, unit: Any, start: int, end: int | None) -> int:
        """The first frame at or after ``start`` whose chunk is not committed (a redo starts there)."""
        with self.lock:
            done = self.committed.get(unit.id, {})
            while start // self.chunk in done and (end is None or start < end):
                start += self.chunk
        return start

    def commit(self, unit: Any, chunk: int, records: list[dict[str, Any]]) -> None:
        """On the write-behind thread, once the chunk's files are in place: its metadata, then the log line."""
        data = encode_records(records)
        write_atomic(meta_path(self.root, unit.id, chunk), data)
        total = self.unit_totals[unit.id]
        commit = Commit(unit.id, chunk, len(records), total, digest(data))
        self.state.log.append(commit)
        with self.lock:
            self.committed[unit.id][chunk] = commit
            if len(self.committed[unit.id]) == math.ceil(total / self.chunk):
                self.units_done += 1
        self.reporter.committed(unit.id, chunk, len(records))
