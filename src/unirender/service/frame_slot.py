"""A session's latest event, for viewers (the web console's live view): publish never waits on a viewer.

The session's owner publishes each event it gets (a reference swap and a notify under a lock held for
microseconds); viewers wait for a sequence number newer than the one they showed and take whatever is latest.
A slow viewer therefore skips frames: nothing is ever queued for it. Encoded images are memoised per event,
so N viewers of one view cost one encode per frame, done on the viewers' threads, never the owner's.

Listeners (a session's video recording, ``service.session_video``) are called with every published event, in
order, on the publishing thread; they must be quick (a recording only queues the image for its encoder).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class FrameSlot:
    def __init__(self, max_viewers: int = 4):
        self.max_viewers = max_viewers
        self._cond = threading.Condition()
        self._encode_lock = threading.Lock()
        self.seq = 0
        self.event: Any = None
        self.published_at = 0.0  # time.time() of the newest event: the start of a viewer's latency
        self.closed = False
        self.viewers = 0
        self._memo: dict[tuple[int, str], Any] = {}
        self._listen_lock = threading.Lock()  # publishes reach listeners one at a time, in order
        self._listeners: list[Callable[[Any], None]] = []
        self._on_close: list[Callable[[], None]] = []

    def publish(self, event: Any) -> None:
        with self._listen_lock:
            with self._cond:
                self.seq += 1
                self.event = event
                self.published_at = time.time()
                self._memo = {}  # the previous event's encodings are stale (viewers hold what they took)
                self._cond.notify_all()
            for listener in self._listeners:
                listener(event)

    def subscribe(self, listener: Callable[[Any], None], *, replay: bool = False) -> None:
        """Call ``listener(event)`` for every event published from now on (``replay``: the latest one first)."""
        with self._listen_lock:
            if replay and self.event is not None:
                listener(self.event)
            self._listeners = [*self._listeners, listener]

    def unsubscribe(self, listener: Callable[[Any], None]) -> None:
        with self._listen_lock:
            self._listeners = [f for f in self._listeners if f is not listener]

    def on_close(self, callback: Callable[[], None]) -> None:
        """``callback()`` once the slot closes (its session ended); at once if it has."""
        with self._cond:
            if not self.closed:
                self._on_close.append(callback)
                return
        callback()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self.event = None
            self._memo = {}
            self._cond.notify_all()
            callbacks, self._on_close = self._on_close, []
        with self._listen_lock:
            self._listeners = []
        for callback in callbacks:
            callback()

    def latest(self) -> tuple[int, Any, float]:
        with self._cond:
            return self.seq, self.event, self.published_at

    def wait_newer(self, seq: int, timeout: float) -> tuple[int, Any, float] | None:
        """The latest ``(seq, event, published_at)`` once newer than ``seq``; None on timeout or close."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.seq <= seq and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            if self.closed:
                return None
            return self.seq, self.event, self.published_at

    def encoded(self, seq: int, key: str, encode: Callable[..., Any], *args: Any) -> Any:
        """``encode(*args)`` once per (event, key) for all viewers; a stale ``seq`` is encoded but not memoised."""
        with self._encode_lock:
            with self._cond:
                hit = self._memo.get((seq, key))
            if hit is not None:
                return hit
            value = encode(*args)
            with self._cond:
                if seq == self.seq:
                    self._memo[(seq, key)] = value
            return value

    def attach_viewer(self) -> bool:
        with self._cond:
            if self.closed or self.viewers >= self.max_viewers:
                return False
            self.viewers += 1
            return True

    def detach_viewer(self) -> None:
        with self._cond:
            self.viewers = max(0, self.viewers - 1)
