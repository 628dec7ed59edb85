"""The jobs layer's family registry: a spec's family (``spec.family``) -> that family's job adapter.

An adapter (:class:`JobFamily`) is everything a job does differently per family: how a spec expands into work
units, a worker's *seat* (AI2-THOR: one player kept for every unit; ML-Agents: a fresh seeded game per unit), how
a unit drives its simulator (``frames``), what the writer stores of a frame (``frame_parts``), what a dataset
reads back (``dataset_frame``, picked by the manifest's ``protocol``) and how ``unirender spec check`` describes
the plan. The runner, planner, manifest, dataset and CLI look the adapter up once, here, and never ask which family
a spec, unit or frame is. A third family adds its adapter module and one line to :data:`JOB_FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, load_registered

# family -> "module:attribute" of its adapter (imported on first use: a job of one family loads only its modules)
JOB_FAMILIES: dict[str, str] = {
    AI2THOR: "unirender.jobs.episodes:AI2THOR_JOBS",
    MLAGENTS: "unirender.jobs.mlagents_episodes:MLAGENTS_JOBS",
    WEBGL: "unirender.jobs.webgl_episodes:WEBGL_JOBS",
}


class Seat(Protocol):
    """A worker's place for simulators; ``simulator`` is the one it drives now (None before or after)."""

    simulator: Any

    def stop(self) -> None: ...


class JobFamily(Protocol):
    name: str
    manifest_protocol: str | None  # manifest.json's "protocol" (None: no such key, as AI2-THOR datasets have)
    frame_parts: (
        Callable[[Any, Any], tuple[dict, dict]] | None
    )  # the writer's select (None: the render section's)
    allow_flat_cameras_key: str  # the spec key that lets a job go on with a flat first frame

    def units(self, spec: Any) -> list[Any]: ...

    def video_stream(self, key: str) -> tuple[str, str]: ...  # a frame key's (camera, modality)

    def render_section(self, spec: Any) -> Any: ...

    def allows_flat_cameras(self, spec: Any) -> bool: ...

    def seat(self, open_simulator: Callable[[dict], Any], kwargs: dict[str, Any]) -> Seat: ...

    def frames(self, seat: Any, unit: Any, spec: Any, **kwargs: Any) -> Iterator[tuple[int, Any]]: ...

    def check_first_frame(self, frame: Any, spec: Any) -> None: ...

    def player_version(self, seat: Any, spec: Any, frame: Any) -> str | None: ...

    def dataset_frame(self, metadata: dict[str, Any], frames: dict[str, Any]) -> Any: ...

    def describe_plan(self, spec: Any, plan: Any) -> str: ...


def job_family(family: str) -> JobFamily:
    """The adapter of ``family`` (a spec's ``family``), imported under a lock (worker threads may ask at once)."""
    return load_registered(JOB_FAMILIES, family, lambda: ValueError(
        f"no jobs adapter for protocol {family!r}; known: {', '.join(JOB_FAMILIES)}"))


def family_of_manifest(manifest: dict[str, Any]) -> JobFamily:
    """The adapter that wrote a dataset (its manifest's ``protocol``; AI2-THOR when absent)."""
    return job_family(manifest.get("protocol") or AI2THOR)
