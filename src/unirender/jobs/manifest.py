"""The two index files a finished dataset carries: ``metadata.jsonl`` (one line per frame, in episode order,
whatever order the workers finished in) and ``manifest.json`` (spec, hash, platform, versions, counts,
timings)."""

from __future__ import annotations

import json
import platform as _platform
import time
from pathlib import Path
from typing import Any

from unirender.jobs.atomic import atomic_file, write_atomic
from unirender.jobs.encoding import dumps_json
from unirender.jobs.episodes import WorkUnit
from unirender.jobs.state import MANIFEST, METADATA
from unirender.jobs.writers import depth16_scale
from unirender.spec import JobSpec


def write_metadata(root: Path, units: list[WorkUnit], finished: dict[str, dict[str, Any]]) -> int:
    """Assemble ``metadata.jsonl`` from the finished units' records; returns the frame count."""
    count = 0
    with atomic_file(Path(root) / METADATA) as f:
        for unit in units:
            for frame in finished[unit.id]["frames"]:
                line = {
                    "unit": unit.id,
                    "episode": unit.episode_index,
                    "repeat": unit.repeat,
                    "scene": unit.episode.scene,
                    **frame,
                }
                f.write(dumps_json(line).encode() + b"\n")
                count += 1
    return count


def build_manifest(
    spec: JobSpec,
    units: list[WorkUnit],
    finished: dict[str, dict[str, Any]],
    result,
    player_info: dict[str, Any],
) -> dict[str, Any]:
    from unirender import __version__

    frames = sum(len(finished[u.id]["frames"]) for u in units)
    step_s = sum(finished[u.id]["timings"]["step_s"] for u in units)
    write_s = sum(finished[u.id]["timings"]["write_s"] for u in units)
    encode_s = sum(finished[u.id]["timings"].get("encode_s", 0.0) for u in units)
    modality_keys = sorted({k for u in units for fr in finished[u.id]["frames"] for k in fr["files"]})
    return {
        "name": spec.name,
        "spec_hash": spec.content_hash(),
        "spec": spec.model_dump(mode="json"),
        "unirender_version": __version__,
        "player_version": player_info.get("player_version"),
        "platform": player_info.get("platform"),
        "device": player_info.get("device"),
        "software_rendering": player_info.get("software"),
        "host": {"python": _platform.python_version(), "system": _platform.system()},
        "output": {
            "format": spec.output.format,
            "depth_encoding": spec.output.depth_encoding,
            "depth16_scale": depth16_scale(spec.output, spec.render.depth_format),
            "depth_format": spec.render.depth_format,
            "frame_keys": modality_keys,
        },
        "counts": {"episodes": len(spec.episodes), "units": len(units), "frames": frames},
        "timings": {
            "step_s": round(step_s, 3),
            "write_s": round(write_s, 3),  # workers blocked on writing
            "encode_s": round(encode_s, 3),  # write-behind threads busy (overlaps stepping)
            "write_share": round(write_s / (step_s + write_s), 4) if step_s + write_s else 0.0,
            "last_run_elapsed_s": round(result.elapsed_s, 3),
            "last_run_workers": result.workers,
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    write_atomic(Path(root) / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
