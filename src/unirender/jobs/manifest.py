"""``manifest.json``: what a finished dataset holds (spec, hash, platform, versions, its units and chunks, counts,
timings), and the annotation files assembled from the committed chunks."""

from __future__ import annotations

import json
import platform as _platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirender.jobs.chunks import META_DIR, META_SUFFIX, Commit, read_chunk_records
from unirender.jobs.state import MANIFEST
from unirender.jobs.writers import depth16_scale

CommitsByUnit = dict[str, dict[int, Commit]]


def unit_entries(units: list[Any], committed: CommitsByUnit) -> list[dict[str, Any]]:
    """The dataset's units in episode order: what a reader needs to find every chunk's metadata file."""
    out = []
    for unit in units:
        done = committed.get(unit.id, {})
        out.append(
            {
                "id": unit.id,
                "episode": unit.episode_index,
                "repeat": unit.repeat,
                "scene": unit.episode.scene,
                "frames": sum(c.frames for c in done.values()),
                "chunks": len(done),
                "sha256": [done[k].sha256 for k in sorted(done)],  # of each chunk's metadata file
            }
        )
    return out


def dataset_records(root: Path, units: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every frame record in dataset order, with its unit's fields (``unit``, ``episode``, ``repeat``,
    ``scene``) added; reads one chunk's metadata file at a time."""
    for unit in units:
        for k in range(unit["chunks"]):
            for record in read_chunk_records(root, unit["id"], k):
                yield {"unit": unit["id"], "episode": unit["episode"], "repeat": unit["repeat"],
                       "scene": unit["scene"], **record}  # fmt: skip


def write_annotations(root: Path, spec, render, units: list[Any], committed: CommitsByUnit) -> None:
    """The annotation files ``render.annotations`` asks for (``render``: the family's render section)."""
    if not render.annotations:
        return
    from unirender.jobs.annotations import write_annotation_files

    write_annotation_files(root, spec, dataset_records(root, unit_entries(units, committed)))


def build_manifest(
    spec,
    family,
    render,
    root: Path,
    units: list[Any],
    committed: CommitsByUnit,
    result,
    player_info: dict[str, Any],
    build_digest: str | None = None,
) -> dict[str, Any]:
    from unirender import __version__

    entries = unit_entries(units, committed)
    frames = sum(e["frames"] for e in entries)
    keys = set()
    for entry in entries:  # one record per unit is enough to know its frame keys
        if entry["chunks"]:
            keys |= set(read_chunk_records(root, entry["id"], 0)[0]["files"])
    step_s, write_s = result.step_s, result.write_s
    protocol = family.manifest_protocol  # only ML-Agents datasets say so (jobs.families)
    return {
        **({"protocol": protocol} if protocol else {}),
        "name": spec.name,
        "spec_hash": spec.content_hash(build_digest),
        "spec": spec.model_dump(mode="json"),
        **({"build": {"name": spec.environment.build_name, "digest": build_digest}} if build_digest else {}),
        "directory": str(Path(root).resolve()),  # where this run wrote it (--out or output.directory)
        "unirender_version": __version__,
        "player_version": player_info.get("player_version"),
        "platform": player_info.get("platform"),
        "device": player_info.get("device"),
        "software_rendering": player_info.get("software"),
        "host": {"python": _platform.python_version(), "system": _platform.system()},
        "output": {
            "format": spec.output.format,
            "depth_encoding": spec.output.depth_encoding,
            "depth16_scale": depth16_scale(spec.output, render.depth_format),
            "depth_format": render.depth_format,
            "frame_keys": sorted(keys),
            "frames_per_shard": spec.output.frames_per_shard,
            "metadata": {
                "keep": spec.output.metadata,
                "files": f"{META_DIR}/<unit>-<chunk>{META_SUFFIX}",
                "encoding": "msgpack list of frame records, zstd-compressed",
            },  # fmt: skip
            "annotations": list(render.annotations),
        },
        "units": entries,
        "counts": {
            "episodes": len(spec.episodes),
            "units": len(units),
            "chunks": sum(e["chunks"] for e in entries),
            "frames": frames,
        },
        "timings": {  # of the last run
            "step_s": round(step_s, 3),
            "write_s": round(write_s, 3),  # workers blocked on writing
            "encode_s": round(result.encode_s, 3),  # write-behind threads busy (overlaps stepping)
            "write_share": round(write_s / (step_s + write_s), 4) if step_s + write_s else 0.0,
            "elapsed_s": round(result.elapsed_s, 3),
            "workers": result.workers,
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    from unirender.jobs.atomic import write_atomic

    write_atomic(Path(root) / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
