"""Each job file under examples/ validates and runs (shrunk to 64x64 and a few frames to stay fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unirender.jobs import load_dataset, render
from unirender.jobs.episodes import modality_of
from unirender.spec import load_spec, read_document

# AI2-THOR job examples; examples/mlagents_*.yaml run in tests/mlagents/test_mlagents_jobs.py, and
# examples/webgl_*.yaml (they boot headless Chromium, so they are slow tests) in tests/webgl/test_webgl_jobs.py
EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples").glob("*.*") if not p.name.startswith(("mlagents_", "webgl_"))
)


def shrunk(path: Path, out: Path) -> dict:
    doc = read_document(path)
    doc["environment"].update(width=64, height=64, platform="EGL")
    doc["output"]["directory"] = str(out)
    for episode in doc["episodes"]:
        if "actions" in episode:
            episode["actions"] = episode["actions"][:2]
        generator = episode.get("generator") or {}
        if generator.get("kind") == "grid":
            generator["max_positions"] = 2
        if generator.get("kind") == "random":
            generator["count"] = 2
    return doc


def test_there_are_three_examples_of_different_kinds():
    specs = [load_spec(p) for p in EXAMPLES]
    assert len(specs) == 3 and {p.suffix for p in EXAMPLES} >= {".yaml", ".toml"}
    kinds = {
        ("actions" if e.actions else "poses" if e.poses else e.generator.kind)
        for s in specs
        for e in s.episodes
    }
    assert kinds >= {"actions", "grid", "random"}
    assert {s.output.format for s in specs} == {"png", "npz", "webdataset"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(tmp_path, path):
    doc = shrunk(path, tmp_path / "out")
    spec = load_spec(doc)
    result = render(spec)
    expected = 0
    for episode in spec.episodes:
        g = episode.generator
        per_repeat = episode.known_frame_count or (2 * len(g.rotations) * len(g.horizons))
        expected += per_repeat * episode.repeat
    assert result.frames == expected
    dataset = load_dataset(tmp_path / "out")
    event = next(iter(dataset))
    assert {modality_of(k) for k in event.frames()} == set(spec.render.modalities)
    assert event.frame.shape == (64, 64, 3)
    if "coco" in spec.render.annotations:
        from pycocotools.coco import COCO

        for camera in ["agent", *(c.name for c in spec.render.cameras)]:
            coco = COCO(str(tmp_path / "out" / "annotations" / f"coco_{camera}.json"))
            assert len(coco.getImgIds()) == expected and coco.getAnnIds()
