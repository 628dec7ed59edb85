"""Local placement: which GPU a new player gets, and whether there is room for it at all.

Pure bookkeeping under one condition variable (no processes): a request for :class:`Resources` is admitted when
every budget it touches has room — players in total, players needing a display, CPU share, and one GPU's slots —
or waits up to ``wait_timeout`` for a release, then fails with :class:`CapacityError` naming what was full.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from unirender.cluster.base import CapacityError, Resources
from unirender.simulator import describe_placement

_DEFAULT = object()


@dataclass(frozen=True)
class Slot:
    """An admitted request: the GPU chosen (``None``: let the platform choose) and what it holds."""

    gpu: int | None
    display: bool
    cpu: float


class LocalPlacement:
    """Budgets for players on this machine.

    ``max_sessions``: players at once (``None``: unlimited). ``gpus``: GPU indices to hand out (round-robin, least
    loaded first); ``None`` or empty: sessions get no ``gpu_device`` unless they ask for one. ``sessions_per_gpu``:
    players per GPU. ``max_display_sessions``: players needing an X display. ``cpu_budget``: sum of CPU shares.
    ``wait_timeout``: seconds to wait for room (0: fail at once; ``None``: wait forever).
    """

    def __init__(
        self,
        *,
        max_sessions: int | None = None,
        gpus: Sequence[int] | None = None,
        sessions_per_gpu: int | None = None,
        max_display_sessions: int | None = None,
        cpu_budget: float | None = None,
        wait_timeout: float | None = 0.0,
    ):
        for name, value in (
            ("max_sessions", max_sessions),
            ("sessions_per_gpu", sessions_per_gpu),
            ("max_display_sessions", max_display_sessions),
            ("cpu_budget", cpu_budget),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 or None, not {value!r}")
        self.max_sessions = max_sessions
        self.gpus = list(dict.fromkeys(gpus or ()))  # de-duplicated, order kept
        self.sessions_per_gpu = sessions_per_gpu
        self.max_display_sessions = max_display_sessions
        self.cpu_budget = cpu_budget
        self.wait_timeout = wait_timeout
        self._cond = threading.Condition()
        self._sessions = 0
        self._display = 0
        self._cpu = 0.0
        self._per_gpu: dict[int, int] = {g: 0 for g in self.gpus}
        self._rr = itertools.count()

    # -- admission ---------------------------------------------------------------------------------------
    def acquire(self, resources: Resources, timeout: float | None | object = _DEFAULT) -> Slot:
        """Admit ``resources`` or raise :class:`CapacityError` after the timeout (default ``wait_timeout``)."""
        timeout = self.wait_timeout if timeout is _DEFAULT else timeout
        self._check_satisfiable(resources)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                shortage, gpu = self._try_admit(resources)
                if shortage is None:
                    return Slot(gpu=gpu, display=resources.display, cpu=resources.cpu)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    waited = f" after waiting {timeout:g} s" if timeout else ""
                    raise CapacityError(f"no room for another session{waited}: {shortage}")
                self._cond.wait(remaining)

    def release(self, slot: Slot) -> None:
        with self._cond:
            self._sessions -= 1
            self._display -= int(slot.display)
            self._cpu -= slot.cpu
            if slot.gpu is not None and slot.gpu in self._per_gpu:
                self._per_gpu[slot.gpu] -= 1
            self._cond.notify_all()

    def usage(self) -> dict:
        with self._cond:
            return {
                "sessions": self._sessions,
                "max_sessions": self.max_sessions,
                "display_sessions": self._display,
                "max_display_sessions": self.max_display_sessions,
                "cpu": self._cpu,
                "cpu_budget": self.cpu_budget,
                "sessions_per_gpu": dict(self._per_gpu),
                "max_sessions_per_gpu": self.sessions_per_gpu,
            }

    # -- internals (called with the lock held) ------------------------------------------------------------
    def _check_satisfiable(self, r: Resources) -> None:
        """Requests that no amount of waiting can admit fail at once, whatever the timeout."""
        if r.gpu is not None and self.gpus and r.gpu not in self.gpus:
            raise CapacityError(f"GPU {r.gpu} is not one of this backend's GPUs {self.gpus}")
        if r.display and self.max_display_sessions == 0:
            raise CapacityError("this backend has no display slots (max_display_sessions=0)")
        if self.cpu_budget is not None and r.cpu > self.cpu_budget:
            raise CapacityError(f"the session asks for {r.cpu:g} CPUs, the budget is {self.cpu_budget:g}")
        if self.max_sessions == 0 or (self.gpus and self.sessions_per_gpu == 0):
            raise CapacityError("this backend admits no sessions (a budget is 0)")

    def _try_admit(self, r: Resources) -> tuple[str | None, int | None]:
        if self.max_sessions is not None and self._sessions >= self.max_sessions:
            return f"all {self.max_sessions} player slots are taken (max_sessions)", None
        if r.display and self.max_display_sessions is not None and self._display >= self.max_display_sessions:
            return f"all {self.max_display_sessions} display slots are taken (max_display_sessions)", None
        if self.cpu_budget is not None and self._cpu + r.cpu > self.cpu_budget + 1e-9:
            return f"{self._cpu:g} of {self.cpu_budget:g} CPUs are taken (cpu_budget)", None
        gpu = r.gpu
        if self.gpus:
            gpu = self._choose_gpu(r.gpu)
            if gpu is None:
                which = f"GPU {r.gpu}" if r.gpu is not None else "every GPU"
                return f"{which} has {self.sessions_per_gpu} sessions already (sessions_per_gpu)", None
            self._per_gpu[gpu] += 1
        self._sessions += 1
        self._display += int(r.display)
        self._cpu += r.cpu
        return None, gpu

    def _choose_gpu(self, wanted: int | None) -> int | None:
        def has_room(g: int) -> bool:
            return self.sessions_per_gpu is None or self._per_gpu[g] < self.sessions_per_gpu

        if wanted is not None:
            return wanted if has_room(wanted) else None
        # Least loaded first; among equals, rotate so that a fresh backend spreads 0, 1, 2, ...
        start = next(self._rr) % len(self.gpus)
        order = self.gpus[start:] + self.gpus[:start]
        free = [g for g in order if has_room(g)]
        return min(free, key=lambda g: self._per_gpu[g]) if free else None


def placement_info(controller: Any) -> dict:
    """platform, device, pid, log and transport of a session's simulator (cheap: no event is read)."""
    return {**describe_placement(controller), "server_type": getattr(controller, "server_type", None)}
