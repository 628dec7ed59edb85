"""BufferPool: a buffer is reused only once nothing references it; at most ``limit`` are kept."""

import pytest

from unirender.protocol.pool import UNUSED_REFS, BufferPool


@pytest.mark.skipif(UNUSED_REFS < 0, reason="no recycling on free-threaded builds")
@pytest.mark.parametrize("factory", [bytearray, None])
def test_buffers_are_reused_only_when_free(factory):
    pool = BufferPool(3, factory) if factory else BufferPool(3)
    first = pool.take(100)
    first_id = id(first)
    view = memoryview(first)[10:20]  # a view keeps it
    del first
    second = pool.take(100)
    assert id(second) != first_id
    del view, second
    third = pool.take(100)
    assert id(third) == first_id  # the oldest free one
    assert len(pool.take(7)) == 7  # another size: a new buffer


def test_at_most_limit_buffers_are_kept():
    pool = BufferPool(2, bytearray)
    held = [pool.take(10) for _ in range(4)]  # all held: four new buffers, the pool remembers the last two
    assert len({id(b) for b in held}) == 4
    assert len(pool._buffers) == 2
    kept = [id(b) for b in pool._buffers]
    del held
    assert id(pool.take(10)) in kept
