"""Helpers for job tests on the real reference player (EGL, 64x64 to stay fast)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np

ALL_MODALITIES = ["rgb", "depth", "instance_segmentation", "semantic_segmentation", "normals", "flow"]


def small_job(out: Path | str, *, fmt: str = "png", transport: str = "fifo", **extra) -> dict:
    """10 frames in 3 units: an action sequence repeated twice and a pose list; every modality, one camera."""
    spec = {
        "name": "small",
        "environment": {
            "executable": "builtin",
            "platform": "EGL",
            "width": 64,
            "height": 64,
            "transport": transport,
        },
        "render": {
            "modalities": ALL_MODALITIES,
            "flow_policy": "previous_step",
            "cameras": [
                {
                    "name": "corner",
                    "position": {"x": 2.3, "y": 2.3, "z": -1.8},
                    "rotation": {"x": 35, "y": -52},
                }
            ],
        },
        "episodes": [
            {
                "scene": "FloorPlan1_physics",
                "actions": ["MoveAhead", {"action": "RotateRight", "degrees": 30}, "LookDown"],
                "repeat": 2,
            },
            {
                "scene": "FloorPlan201_physics",
                "poses": [
                    {"position": {"x": 0.0, "y": 0.9, "z": 0.0}, "rotation": 90},
                    {"position": {"x": 0.5, "y": 0.9, "z": 0.25}, "rotation": 180, "horizon": 20},
                ],
            },
        ],
        "output": {"directory": str(out), "format": fmt, "frames_per_shard": 3},
        "workers": 1,
    }
    spec.update(extra)
    return spec


SMALL_JOB_FRAMES = 4 * 2 + 2


def direct_frames(spec_doc: dict) -> list[dict[str, np.ndarray]]:
    """The same episodes driven straight through a Controller, without the jobs runner."""
    from unirender.controller import Controller
    from unirender.spec import load_spec

    spec = load_spec(spec_doc)
    frames = []
    with Controller(**spec.controller_kwargs()) as controller:
        for episode in spec.episodes:
            for _ in range(episode.repeat):
                event = controller.reset(episode.scene)
                for camera in spec.render.cameras:
                    event = controller.step(camera.add_action())
                if episode.actions is not None:
                    frames.append(event.frames())
                    frames.extend(controller.step(a).frames() for a in episode.action_dicts())
                else:
                    frames.extend(controller.step(p.teleport_action()).frames() for p in episode.poses)
    return frames


def assert_same_frames(dataset_frames: list[dict], reference: list[dict]) -> None:
    assert len(dataset_frames) == len(reference)
    for i, (got, want) in enumerate(zip(dataset_frames, reference, strict=True)):
        assert sorted(got) == sorted(want), f"frame {i}: keys differ"
        for key in want:
            assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, (i, key)
            assert np.array_equal(got[key], want[key]), f"frame {i}: {key} differs"


def dataset_frames(directory) -> list[dict[str, np.ndarray]]:
    from unirender.jobs import load_dataset

    return [event.frames() for event in load_dataset(directory)]


def player_pids() -> list[int]:
    """Reference players that are children of this process (found in /proc, as an operator would)."""
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"unirender.player" in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_one_player() -> int:
    pids = player_pids()
    assert pids, "no player to kill"
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def image_files(root: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("frames", "shards"):
        base = root / sub
        if base.is_dir():
            out.update(
                {str(p.relative_to(root)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}
            )
    return out


def records_without_clock(root: Path) -> list[dict]:
    """Frame records as read back; ``currentTime`` is the player's wall clock, the only key that differs."""
    from unirender.jobs import load_dataset

    records = load_dataset(root).records
    for r in records:
        r["metadata"].pop("currentTime", None)
    return records
