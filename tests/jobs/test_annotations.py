"""COCO instance annotations and camera parameters written by a job, read back with pycocotools."""

from __future__ import annotations

import json

import numpy as np
import pytest

from unirender.jobs import load_dataset, render

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    out = tmp_path_factory.mktemp("coco") / "data"
    spec = {
        "environment": {"executable": "builtin", "platform": "EGL", "width": 64, "height": 48},
        "render": {
            "modalities": ["rgb", "depth", "instance_segmentation"],
            "cameras": [
                {
                    "name": "corner",
                    "position": {"x": 2.3, "y": 2.3, "z": -1.8},
                    "rotation": {"x": 35, "y": -52},
                }
            ],
            "annotations": ["coco", "cameras"],
        },
        "episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead", "RotateRight"]}],
        "output": {"directory": str(out), "format": "npz", "frames_per_shard": 2},
    }
    render(spec)
    return out


def test_coco_files_load_and_masks_round_trip_exactly(annotated):
    events = list(load_dataset(annotated))
    assert len(events) == 3
    for name in ("agent", "corner"):
        coco = COCO(str(annotated / "annotations" / f"coco_{name}.json"))
        assert sorted(coco.getImgIds()) == [1, 2, 3]
        types = {c["name"] for c in coco.loadCats(coco.getCatIds())}
        for image_id, event in enumerate(events, start=1):
            object_types = {o["objectId"]: o["objectType"] for o in event.metadata["objects"]}
            if name == "agent":
                expected = {k: np.asarray(v) for k, v in event.instance_masks.items()}
            else:
                seg = event.third_party_instance_segmentation_frames[0]
                expected = {}
                for c in event.metadata["colors"]:
                    mask = (seg[..., :3] == np.array(c["color"][:3], np.uint8)).all(-1)
                    if mask.any():
                        expected[c["name"]] = mask
            anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
            got = {a["object_id"]: a for a in anns}
            assert sorted(got) == sorted(expected) and expected, (name, image_id)
            for object_id, ann in got.items():
                mask = coco.annToMask(ann).astype(bool)
                assert np.array_equal(mask, expected[object_id]), (name, image_id, object_id)
                assert ann["area"] == int(mask.sum()) and ann["iscrowd"] == 0
                ys, xs = np.nonzero(mask)
                assert ann["bbox"] == [xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1]
                category = coco.loadCats(ann["category_id"])[0]["name"]
                assert category == object_types.get(object_id, object_id.split("|")[0]) and category in types
        image = coco.loadImgs(1)[0]
        assert (image["height"], image["width"]) == (48, 64) and image["file_name"].startswith("shards/")


def test_cameras_json_has_intrinsics_pose_and_depth_per_frame(annotated):
    doc = json.loads((annotated / "annotations" / "cameras.json").read_text())
    assert len(doc["frames"]) == 3 and "left-handed" in doc["convention"]
    first = doc["frames"][0]["cameras"]
    agent, corner = first["agent"], first["corner"]
    assert agent["intrinsics"]["cx"] == 32 and agent["intrinsics"]["cy"] == 24
    # 90 degrees vertical: the focal length in pixels is half the image height.
    assert agent["intrinsics"]["fy"] == pytest.approx(24.0)
    pose = np.array(corner["camera_to_world"])
    assert pose[:3, 3].tolist() == pytest.approx([2.3, 2.3, -1.8])
    assert np.allclose(pose[:3, :3] @ pose[:3, :3].T, np.eye(3))
    assert agent["depth"].endswith("depth_frame") and corner["depth"].endswith(
        "third_party_depth_frames-corner"
    )
