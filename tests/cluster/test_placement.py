"""Local placement bookkeeping: GPU choice, budgets, waiting and failing clearly (no processes needed)."""

import threading

import pytest

from unirender.cluster import CapacityError, Resources, create_backend
from unirender.cluster.placement import LocalPlacement


def test_gpus_round_robin_then_least_loaded():
    p = LocalPlacement(gpus=[0, 1, 2])
    slots = [p.acquire(Resources()) for _ in range(6)]
    assert sorted(s.gpu for s in slots) == [0, 0, 1, 1, 2, 2]
    assert [s.gpu for s in slots[:3]] == [0, 1, 2]
    p.release(next(s for s in slots if s.gpu == 1))
    assert p.acquire(Resources()).gpu == 1  # the only GPU with one session left


def test_gpu_by_request_and_per_gpu_cap():
    p = LocalPlacement(gpus=[0, 1], sessions_per_gpu=1)
    assert p.acquire(Resources(gpu=1)).gpu == 1
    with pytest.raises(CapacityError, match="GPU 1 has 1 sessions"):
        p.acquire(Resources(gpu=1))
    assert p.acquire(Resources()).gpu == 0  # the free one
    with pytest.raises(CapacityError, match="every GPU"):
        p.acquire(Resources())


def test_unknown_gpu_fails_at_once_even_with_a_long_wait():
    p = LocalPlacement(gpus=[0], wait_timeout=60)
    with pytest.raises(CapacityError, match="GPU 3 is not one of"):
        p.acquire(Resources(gpu=3))


def test_no_gpus_configured_passes_requests_through():
    p = LocalPlacement()
    assert p.acquire(Resources()).gpu is None
    assert p.acquire(Resources(gpu=2)).gpu == 2


def test_display_budget_counts_only_display_sessions():
    p = LocalPlacement(max_display_sessions=1)
    p.acquire(Resources(display=True))
    p.acquire(Resources())  # no display needed: admitted
    with pytest.raises(CapacityError, match="display slots"):
        p.acquire(Resources(display=True))
    assert p.usage()["display_sessions"] == 1 and p.usage()["sessions"] == 2


def test_cpu_budget():
    p = LocalPlacement(cpu_budget=1.0)
    p.acquire(Resources(cpu=0.5))
    p.acquire(Resources(cpu=0.5))
    with pytest.raises(CapacityError, match="cpu_budget"):
        p.acquire(Resources(cpu=0.25))
    with pytest.raises(CapacityError, match="asks for 2 CPUs"):
        p.acquire(Resources(cpu=2))


def test_beyond_capacity_waits_for_a_release():
    p = LocalPlacement(max_sessions=1, wait_timeout=30)
    first = p.acquire(Resources())
    got = []
    waiter = threading.Thread(target=lambda: got.append(p.acquire(Resources())))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got  # still waiting: the only slot is held
    p.release(first)
    waiter.join(10)
    assert not waiter.is_alive() and len(got) == 1
    assert p.usage()["sessions"] == 1


def test_beyond_capacity_fails_clearly_after_the_timeout():
    p = LocalPlacement(max_sessions=2, wait_timeout=0.2)
    p.acquire(Resources())
    p.acquire(Resources())
    with pytest.raises(CapacityError, match=r"after waiting 0.2 s: all 2 player slots are taken") as info:
        p.acquire(Resources())
    assert isinstance(info.value, TimeoutError)


def test_bad_resources_and_budgets_are_rejected():
    with pytest.raises(ValueError, match="GPU index"):
        Resources(gpu=-1)
    with pytest.raises(ValueError, match="cpu"):
        Resources(cpu=-1)
    with pytest.raises(ValueError, match="max_sessions"):
        LocalPlacement(max_sessions=-1)
    with pytest.raises(CapacityError, match="admits no sessions"):
        LocalPlacement(max_sessions=0).acquire(Resources())


def test_create_backend_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="unknown session backend 'k8s'"):
        create_backend("k8s")
