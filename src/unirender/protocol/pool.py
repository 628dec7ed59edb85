"""Recycled receive buffers: a frame body is read into a buffer that is reused once nothing references it.

Why: a fresh multi-MiB buffer per step costs a page fault per 4 KiB (measured: 70-500 per step, more system time
than the copy itself). Events hand out zero-copy views of these buffers, so a buffer is free again only when no
event, array or view of it is alive; that shows in its reference count (any live reference counts, a weak one
does not). Pure bookkeeping over memory, no I/O: the FIFO decoder and the WSGI hub's channel both use it.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Callable

import numpy as np


def _unused_refs() -> int:
    """``sys.getrefcount`` of a pooled buffer nobody else holds, read with the same code shape as
    :meth:`BufferPool.take` (the count of stack references differs between Python versions)."""
    pool = [bytearray(1)]
    for i in range(len(pool)):
        buffer = pool[i]
        return sys.getrefcount(buffer)
    raise AssertionError("unreachable")


# Free-threaded builds: reference counts are not a reliable "nobody else holds it" signal there; no recycling.
UNUSED_REFS = -1 if sysconfig.get_config_var("Py_GIL_DISABLED") else _unused_refs()


def uninitialised(size: int) -> np.ndarray:
    """Memory for a body about to be overwritten in full: zero-filling it first would be waste."""
    return np.empty(size, dtype=np.uint8)


class BufferPool:
    """At most ``limit`` buffers, handed out oldest first; ``take(size)`` reuses one of that size that nothing
    references any more, else makes one with ``factory(size)`` (and forgets the oldest beyond the limit).
    ``reuse``/``keep`` split that in two for a caller that only pools a buffer once it trusts its sender."""

    def __init__(self, limit: int, factory: Callable[[int], object] = uninitialised):
        self.limit = limit
        self.factory = factory
        self._buffers: list = []

    def take(self, size: int):
        buffer = self.reuse(size)
        return self.keep(self.factory(size)) if buffer is None else buffer

    def reuse(self, size: int):
        """A pooled buffer of ``size`` bytes that nothing references any more, or None (nothing is made)."""
        pool = self._buffers
        for i in range(len(pool)):
            buffer = pool[i]
            if len(buffer) == size and sys.getrefcount(buffer) == UNUSED_REFS:
                del pool[i]
                pool.append(buffer)
                return buffer
        return None

    def keep(self, buffer):
        """Pool ``buffer`` (made elsewhere) for later ``take``/``reuse``; the oldest beyond the limit is forgotten."""
        pool = self._buffers
        if not any(b is buffer for b in pool):
            pool.append(buffer)
            if len(pool) > self.limit:
                del pool[0]
        return buffer


__all__ = ["UNUSED_REFS", "BufferPool", "uninitialised"]
