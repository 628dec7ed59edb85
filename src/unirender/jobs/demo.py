"""``unirender demo``: a short tour of a built-in kitchen on the reference player, every modality and one
third-party camera, written as a dataset plus ``contact_sheet.png`` (one frame in every modality)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirender.jobs.contact_sheet import write_contact_sheet
from unirender.jobs.dataset import load_dataset
from unirender.jobs.episodes import modality_of
from unirender.jobs.state import CONTACT_SHEET
from unirender.simulator import AI2THOR, MLAGENTS
from unirender.spec import MODALITIES

DEMO_SCENE = "FloorPlan1_physics"
# Walk from the middle of the kitchen towards the counters, look around and down at the stove.
DEMO_TOUR: list[Any] = [
    "MoveAhead",
    {"action": "RotateRight", "degrees": 30},
    "MoveAhead",
    {"action": "LookDown", "degrees": 20},
    {"action": "RotateLeft", "degrees": 60},
    "MoveAhead",
    {"action": "LookUp", "degrees": 20},
    {"action": "RotateLeft", "degrees": 90},
    "MoveAhead",
]
DEMO_SHEET_FRAME = 3  # after the second MoveAhead: flow shows the forward motion


def demo_spec(out: str | os.PathLike, *, size: int = 256, transport: str = "fifo") -> dict[str, Any]:
    return {
        "name": "demo",
        "environment": {"executable": "builtin", "width": size, "height": size, "transport": transport},
        "render": {
            "modalities": ["rgb", "depth", "instance_segmentation", "semantic_segmentation", "normals", "flow"],
            "flow_policy": "previous_step",
            "cameras": [
                # A corner of the room, looking down across it at the agent.
                {"name": "corner", "position": {"x": 2.3, "y": 2.3, "z": -1.8},
                 "rotation": {"x": 35, "y": -52, "z": 0}, "field_of_view": 75},
            ],
        },
        "episodes": [{"scene": DEMO_SCENE, "name": "kitchen-tour", "actions": DEMO_TOUR}],
        "output": {"directory": os.fspath(out), "format": "png"},
        "workers": 1,
    }  # fmt: skip


def mlagents_demo_spec(out: str | os.PathLike, *, size: int = 96) -> dict[str, Any]:
    """The reference player's ML-Agents game: 2 agents driving with seeded random actions towards the target,
    light and target colour drawn per episode (``examples/mlagents_reach.yaml`` is the long form)."""
    sampler = {"sampler_type": "uniform", "sampler_parameters": {"min_value": 0.5, "max_value": 1.5}}
    return {
        "name": "demo-mlagents",
        "environment": {"protocol": "mlagents", "executable": "builtin", "width": size, "height": size,
                        "time_scale": 100, "environment_parameters": {"light_intensity": sampler}},
        "episodes": [{"name": "reach", "steps": 30, "seed": 1, "repeat": 2, "policy": {"kind": "random"}}],
        "output": {"directory": os.fspath(out), "format": "png", "frames_per_shard": 16},
        "workers": 1,
    }  # fmt: skip


@dataclass(frozen=True)
class Demo:
    """One family's demo: ``spec(out, size, transport)`` and the frame its contact sheet shows (None: the
    middle one)."""

    spec: Callable[[str | os.PathLike, int, str], dict[str, Any]]
    sheet_frame: int | None


# family -> its demo (``unirender demo --family NAME``; a third family adds its line; docs/jobs.md)
DEMOS: dict[str, Demo] = {
    AI2THOR: Demo(lambda out, size, transport: demo_spec(out, size=size, transport=transport), DEMO_SHEET_FRAME),
    MLAGENTS: Demo(lambda out, size, transport: mlagents_demo_spec(out, size=min(size, 128)), None),
}


def contact_sheet_for(directory: str | os.PathLike, frame: int | None = None) -> Path:
    """Write ``contact_sheet.png`` for one frame of a finished dataset (default: the middle one)."""
    directory = Path(directory)
    with load_dataset(directory) as dataset:
        index = len(dataset) // 2 if frame is None else frame
        frames = dataset.images(index)
        title = sheet_title(directory.name, index, len(dataset), dataset.records[index])
    path = directory / CONTACT_SHEET
    ordered = sorted(frames.items(), key=lambda kv: _panel_order(kv[0]))
    write_contact_sheet(path, [(panel_label(key), array) for key, array in ordered], title=title)
    return path


def sheet_title(name: str, index: int, count: int, record: dict) -> str:
    """The sheet's title row: which frame it shows, by the file the frame's first image is in (its RGB frame where
    it has one), e.g. ``demo: frame 5 of 10 (0-based), frames/e0000-kitchen-tour-r000/0000/000005.frame.png``.
    A sharded format's location is the shard: the member follows it."""
    files = record["files"]
    first = files.get("frame") or next(iter(files.values()), "")
    return f"{name}: frame {index} of {count} (0-based), {record['location']}/{first}"


def panel_label(key: str) -> str:
    """``third_party_depth_frames.corner`` -> ``depth (corner)``; ``frame`` -> ``rgb``; an ML-Agents camera
    ``CameraSensor.1`` -> ``CameraSensor (agent 1)``."""
    base, dot, camera = key.partition(".")
    if dot and not base.startswith("third_party_"):
        return f"{base} (agent {camera})"
    return modality_of(key) + (f" ({camera})" if dot else "")


def _panel_order(key: str) -> tuple[int, str]:
    return (("third_party" in key) * 10 + MODALITIES.index(modality_of(key)), key)
