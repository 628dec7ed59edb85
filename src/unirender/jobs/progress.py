"""Progress of a job: a rich live display on a terminal, plain log lines elsewhere (CI logs, pipes).

Workers call the reporter from their own threads; both reporters are thread-safe.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

MIN_FRAMES_FOR_ETA = 5  # fewer frames give a rate dominated by noise (a scene load, a slow first frame)


def _rate(frames: int, seconds: float) -> float:
    return frames / seconds if seconds > 0 else 0.0


class Reporter:
    """Silent base: the interface the job runner calls."""

    def start(self, *, total: int | None, done: int, workers: int) -> None: ...

    def add_total(self, frames: int) -> None:
        """The job's frame count grew (a grid's size is known only once its scene is loaded)."""

    def advance(self, frames: int = 1) -> None: ...

    def worker(self, worker: int, state: str) -> None: ...

    def log(self, message: str) -> None: ...

    def committed(self, unit_id: str, chunk: int, frames: int) -> None:
        """A chunk was committed (its commit-log line is written); the service records progress here."""

    def stop(self) -> None: ...


class _Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.total: int | None = None
        self.done = 0
        self.new = 0
        self.started = time.monotonic()
        self.first_frame: float | None = None  # when this run's first frame arrived
        self.workers: dict[int, str] = {}

    def count(self, frames: int) -> None:
        self.done += frames
        self.new += frames
        if self.first_frame is None and frames > 0:
            self.first_frame = time.monotonic()

    def eta(self) -> float | None:
        """Seconds left at the rate since the first frame: the players' start and scene loads before it would
        make the first estimates several times too long. None until a few frames have been timed."""
        if self.total is None or self.first_frame is None or self.new < MIN_FRAMES_FOR_ETA:
            return None
        rate = _rate(self.new - 1, time.monotonic() - self.first_frame)
        return max(0, self.total - self.done) / rate if rate > 0 else None


def _format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else (f"{seconds // 60}:{seconds % 60:02d}")
    )


class PlainReporter(Reporter):
    """One line per ``interval`` seconds (and at the end): frames, frames/s, ETA, per-worker state."""

    def __init__(self, stream: TextIO | None = None, interval: float = 5.0):
        self.stream = stream or sys.stderr
        self.interval = interval
        self.c = _Counts()
        self._last = 0.0

    def start(self, *, total, done, workers):
        with self.c.lock:
            self.c.total, self.c.done = total, done
            self.c.started = time.monotonic()
        self._write(f"render: {workers} worker(s), {done} frame(s) already done, {total or '?'} in all")

    def add_total(self, frames):
        with self.c.lock:
            self.c.total = (self.c.total or 0) + frames

    def advance(self, frames=1):
        with self.c.lock:
            self.c.count(frames)
            due = time.monotonic() - self._last >= self.interval
        if due:
            self._status()

    def worker(self, worker, state):
        with self.c.lock:
            self.c.workers[worker] = state

    def log(self, message):
        self._write(message)

    def stop(self):
        self._status()

    def _status(self):
        with self.c.lock:
            self._last = time.monotonic()
            elapsed = self._last - self.c.started
            eta = self.c.eta()
            workers = "; ".join(f"w{w}: {s}" for w, s in sorted(self.c.workers.items()))
            line = (
                f"render: {self.c.done}/{self.c.total if self.c.total is not None else '?'} frames, "
                f"{_rate(self.c.new, elapsed):.1f} frames/s, ETA {_format_eta(eta)}"
                + (f" | {workers}" if workers else "")
            )
        self._write(line)

    def _write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


class RichReporter(Reporter):
    """A bar with frames, frames/s and ETA, and a table with one row per worker."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.c = _Counts()
        self.progress = Progress(
            TextColumn("[bold]render"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("frames"),
            TextColumn("{task.fields[rate]:.1f} frames/s"),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
        )
        self.task = self.progress.add_task("render", total=None, rate=0.0, eta="?")
        self.live: Live | None = None

    def _renderable(self):
        table = Table(show_header=False, box=None, padding=(0, 1))
        with self.c.lock:
            rows = sorted(self.c.workers.items())
        for worker, state in rows:
            table.add_row(f"[cyan]worker {worker}", state)
        return Group(self.progress, table)

    def start(self, *, total, done, workers):
        with self.c.lock:
            self.c.total, self.c.done = total, done
            self.c.started = time.monotonic()
        self.progress.update(self.task, total=total, completed=done)
        self.live = Live(get_renderable=self._renderable, console=self.console, refresh_per_second=4)
        self.live.start()

    def add_total(self, frames):
        with self.c.lock:
            self.c.total = (self.c.total or 0) + frames
            total = self.c.total
        self.progress.update(self.task, total=total)

    def advance(self, frames=1):
        with self.c.lock:
            self.c.count(frames)
            rate = _rate(self.c.new, time.monotonic() - self.c.started)
            eta = _format_eta(self.c.eta())
        self.progress.update(self.task, advance=frames, rate=rate, eta=eta)

    def worker(self, worker, state):
        with self.c.lock:
            self.c.workers[worker] = state

    def log(self, message):
        self.console.print(message)

    def stop(self):
        if self.live is not None:
            self.live.refresh()
            self.live.stop()
            self.live = None


def reporter_for(stream: TextIO | None = None, *, quiet: bool = False) -> Reporter:
    """Rich on a terminal, plain lines otherwise, nothing when ``quiet``."""
    if quiet:
        return Reporter()
    stream = stream or sys.stderr
    if stream.isatty():
        return RichReporter(Console(file=stream))
    return PlainReporter(stream)
