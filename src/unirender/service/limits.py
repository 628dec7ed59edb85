"""Small thread-safe limiters: a token bucket (steps per second) and a counted pool (player slots)."""

from __future__ import annotations

import threading
import time

from unirender.service.errors import ApiError


class TokenBucket:
    """``rate`` actions per second with bursts up to ``rate`` (one second's worth)."""

    def __init__(self, rate: float, clock=time.monotonic):
        self.rate = float(rate)
        self.capacity = max(1.0, float(rate))
        self._tokens = self.capacity
        self._clock = clock
        self._stamp = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Take one token; returns 0.0, or the seconds to wait when the bucket is empty (nothing taken)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            return (1.0 - self._tokens) / self.rate


class PlayerSlots:
    """Counts player processes (sessions and running jobs) against ``Limits.total_players``."""

    def __init__(self, total: int):
        self.total = total
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def acquire(self, n: int = 1) -> None:
        with self._lock:
            if self._used + n > self.total:
                raise ApiError(
                    503,
                    "capacity_exhausted",
                    f"all {self.total} player slots are in use; stop a session or retry later",
                    headers={"Retry-After": "5"},
                )
            self._used += n

    def release(self, n: int = 1) -> None:
        with self._lock:
            self._used = max(0, self._used - n)
