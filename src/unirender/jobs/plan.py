"""What a job will do before it does it: units, frame count, players, platform (``unirender spec check``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from unirender.jobs.families import job_family
from unirender.spec.families import spec_family

MAX_AUTO_WORKERS = 8


def auto_workers(pending_units: int, software: bool) -> int:
    """As many players as the machine sensibly runs: a software rasteriser wants about two cores each."""
    cpus = os.cpu_count() or 1
    per_machine = max(1, cpus // 2) if software else max(1, min(cpus // 2, 4))
    return max(1, min(pending_units, per_machine, MAX_AUTO_WORKERS))


def work_capacity(units, chunk: int) -> int:
    """How many players the units can keep busy at once: every chunk of a pose or generator episode can run on
    a player of its own (a grid's size is unknown before its scene is loaded: counted as one per CPU), an action
    sequence on one only (each action depends on the ones before)."""
    capacity = 0
    for unit in units:
        if unit.sequential:
            capacity += 1
        elif unit.known_frame_count is None:
            capacity += os.cpu_count() or 1
        else:
            capacity += math.ceil(unit.known_frame_count / chunk)
    return max(1, capacity)


def resolve_platform(spec):
    """Resolve once for the whole job (starting a virtual display once if one is needed); caller releases."""
    from unirender.platforms import PlatformRequest, resolve

    request = PlatformRequest(**spec_family(spec).platform_request(spec))
    return resolve(request, platform=spec.environment.platform)


@dataclass
class JobPlan:
    units: int
    frames: int  # known in advance
    grid_units: int  # their frame count is known only once the scene is loaded
    workers: int
    platform: str | None
    device: str | None
    software: bool

    def describe(self, spec) -> str:
        return job_family(spec.family).describe_plan(spec, self)


def plan_job(spec, *, workers: int | None = None, resolve: bool = True) -> JobPlan:
    """The plan; with ``resolve`` the platform is probed (raises PlatformError if nothing can run it)."""
    units = job_family(spec.family).units(spec)
    platform = device = None
    software = True
    if resolve:
        resolution = resolve_platform(spec)
        try:
            platform = resolution.platform.name
            device = getattr(resolution.device, "name", None)
            software = bool(getattr(resolution.device, "software", True))
        finally:
            resolution.release()
    requested = workers if workers is not None else spec.workers
    capacity = work_capacity(units, spec.output.frames_per_shard)
    n = auto_workers(capacity, software) if requested in (None, "auto") else min(int(requested), capacity)
    return JobPlan(
        units=len(units),
        frames=sum(u.known_frame_count or 0 for u in units),
        grid_units=sum(1 for u in units if u.known_frame_count is None),
        workers=n,
        platform=platform,
        device=device,
        software=software,
    )
