"""What a job will do before it does it: units, frame count, players, platform (``unirender spec check``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from unirender.jobs.families import job_family
from unirender.jobs.tasks import worker_count
from unirender.spec.families import spec_family


def resolve_platform(spec):
    """Resolve once for the whole job (starting a virtual display once if one is needed); caller releases."""
    from unirender.platforms import resolve

    family = spec_family(spec)
    return resolve(family.platform_request(spec), platform=family.platform_name(spec))


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
    chunk = spec.output.frames_per_shard
    runs = [(u, 0, None if u.known_frame_count is None else math.ceil(u.known_frame_count / chunk)) for u in units]
    n = worker_count(runs, workers if workers is not None else spec.workers, software)
    return JobPlan(
        units=len(units),
        frames=sum(u.known_frame_count or 0 for u in units),
        grid_units=sum(1 for u in units if u.known_frame_count is None),
        workers=n,
        platform=platform,
        device=device,
        software=software,
    )
