"""Annotations written beside the images (``render.annotations``).

* ``coco``: COCO instance annotations, one file per camera (``annotations/coco_agent.json``,
  ``annotations/coco_<camera>.json``): categories are object types, one annotation per object visible in a
  frame with its ``bbox`` (x, y, w, h), RLE ``segmentation`` (``pycocotools.mask.encode``, the format
  ``pycocotools.coco.COCO`` decodes), ``area`` (mask pixels) and ``iscrowd: 0``.
* ``cameras``: ``annotations/cameras.json``: per frame and camera the pinhole intrinsics, the camera-to-world
  pose and the depth image's file.

Per-frame parts are computed on the write-behind thread while the frame is written (stored in the chunk's
metadata file under ``annotations``), and assembled into the files above when the job finishes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

AGENT = "agent"


def _object_types(metadata: dict[str, Any]) -> dict[str, str]:
    return {
        o["objectId"]: o.get("objectType") or o["objectId"].split("|")[0]
        for o in metadata.get("objects") or []
    }


def instance_masks(segmentation: np.ndarray, colors: dict[tuple, str]) -> dict[str, np.ndarray]:
    """Object id -> boolean mask, from an instance segmentation image and the metadata's colour list."""
    seg = np.ascontiguousarray(segmentation[..., :3], dtype=np.uint8)
    packed = (seg[..., 0].astype(np.uint32) << 16) | (seg[..., 1].astype(np.uint32) << 8) | seg[..., 2]
    masks = {}
    for value in np.unique(packed):
        color = (int(value) >> 16, (int(value) >> 8) & 255, int(value) & 255)
        object_id = colors.get(color)
        if object_id is not None:
            masks[object_id] = packed == value
    return masks


def coco_objects(segmentation: np.ndarray, metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """One frame's COCO annotations (without ids): ``object_id``, ``category``, ``bbox``, ``area``, RLE."""
    from pycocotools import mask as mask_utils

    colors = {tuple(int(v) for v in c["color"][:3]): c["name"] for c in metadata.get("colors") or []}
    types = _object_types(metadata)
    out = []
    for object_id, mask in sorted(instance_masks(segmentation, colors).items()):
        rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        x, y, w, h = (float(v) for v in mask_utils.toBbox(rle))
        out.append(
            {
                "object_id": object_id,
                "category": types.get(object_id, object_id.split("|")[0]),
                "bbox": [x, y, w, h],
                "area": int(mask.sum()),
                "segmentation": {
                    "size": [int(v) for v in rle["size"]],
                    "counts": rle["counts"].decode("ascii"),
                },
                "iscrowd": 0,
            }
        )
    return out


def _rotation_matrix(rx: float, ry: float, rz: float) -> np.ndarray:
    """Unity's Euler angles (degrees; applied z, then x, then y) as a 3x3 rotation."""
    x, y, z = (math.radians(a) for a in (rx, ry, rz))
    rot_x = np.array([[1, 0, 0], [0, math.cos(x), -math.sin(x)], [0, math.sin(x), math.cos(x)]])
    rot_y = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    rot_z = np.array([[math.cos(z), -math.sin(z), 0], [math.sin(z), math.cos(z), 0], [0, 0, 1]])
    return rot_y @ rot_x @ rot_z


def camera_entry(position: dict, rotation: dict, fov: float, width: int, height: int) -> dict[str, Any]:
    """Pinhole intrinsics (``fov`` is vertical, as in Unity) and the 4x4 camera-to-world matrix."""
    fy = (height / 2) / math.tan(math.radians(fov) / 2)
    pose = np.eye(4)
    pose[:3, :3] = _rotation_matrix(rotation.get("x", 0.0), rotation.get("y", 0.0), rotation.get("z", 0.0))
    pose[:3, 3] = [position["x"], position["y"], position["z"]]
    return {
        "intrinsics": {
            "width": width,
            "height": height,
            "fov_y": fov,
            "fx": fy,
            "fy": fy,
            "cx": width / 2,
            "cy": height / 2,
        },
        "position": {k: position[k] for k in ("x", "y", "z")},
        "rotation": {k: rotation.get(k, 0.0) for k in ("x", "y", "z")},
        "camera_to_world": np.round(pose, 9).tolist(),
    }


def cameras_of(event, camera_names: list[str]) -> dict[str, dict[str, Any]]:
    m = event.metadata
    width, height = int(m.get("screenWidth", 0)), int(m.get("screenHeight", 0))
    agent = m.get("agent") or {}
    out = {
        AGENT: camera_entry(
            m["cameraPosition"],
            {
                "x": agent.get("cameraHorizon", 0.0),
                "y": (agent.get("rotation") or {}).get("y", 0.0),
                "z": 0.0,
            },
            float(m.get("fov", 90.0)),
            width,
            height,
        )
    }
    for name, cam in zip(camera_names, m.get("thirdPartyCameras") or [], strict=False):
        out[name] = camera_entry(cam["position"], cam["rotation"], float(cam["fieldOfView"]), width, height)
    return out


def annotator_for(render) -> Callable[[Any, dict[str, Any]], None] | None:
    """The write-behind hook that adds this spec's per-frame annotations to a frame record, or None."""
    if not render.annotations:
        return None
    names = [c.name for c in render.cameras]

    def annotate(event, record: dict[str, Any]) -> None:
        parts: dict[str, Any] = {}
        if "coco" in render.annotations:
            coco = {}
            if event.instance_segmentation_frame is not None:
                coco[AGENT] = coco_objects(event.instance_segmentation_frame, event.metadata)
            for name, seg in zip(names, event.third_party_instance_segmentation_frames or [], strict=False):
                coco[name] = coco_objects(seg, event.metadata)
            parts["coco"] = coco
        if "cameras" in render.annotations:
            parts["cameras"] = cameras_of(event, names)
        record["annotations"] = parts

    return annotate


def frame_file(record: dict[str, Any], key: str) -> str | None:
    """Where a frame's image is: ``frames/<unit>/<k>/<file>``, or ``shards/<shard>#<member>``."""
    name = record["files"].get(key)
    if name is None:
        return None
    sep = "/" if record["location"].startswith("frames/") else "#"
    return f"{record['location']}{sep}{name}"


def write_annotation_files(root: Path, spec, records: Iterator[dict[str, Any]]) -> list[Path]:
    """Assemble the per-frame parts (records in dataset order) into the files named in the module doc."""
    from unirender.jobs.atomic import write_atomic

    render = spec.render
    size = (spec.environment.height, spec.environment.width)
    names = [AGENT] + [c.name for c in render.cameras]
    images: dict[str, list] = {n: [] for n in names}
    anns: dict[str, list] = {n: [] for n in names}
    categories: dict[str, int] = {}
    cameras_frames = []
    for frame_id, record in enumerate(records, start=1):
        parts = record.get("annotations") or {}
        for name in names:
            key = "frame" if name == AGENT else f"third_party_camera_frames.{name}"
            objects = (parts.get("coco") or {}).get(name)
            if objects is None:
                continue
            h, w = size
            images[name].append(
                {"id": frame_id, "file_name": frame_file(record, key), "height": h, "width": w}
            )
            for obj in objects:
                category = categories.setdefault(obj["category"], len(categories) + 1)
                anns[name].append(
                    {**obj, "id": len(anns[name]) + 1, "image_id": frame_id, "category_id": category}
                )
        if "cameras" in parts:
            depth = {
                name: frame_file(
                    record, "depth_frame" if name == AGENT else f"third_party_depth_frames.{name}"
                )
                for name in names
            }
            cameras_frames.append(
                {
                    "frame": frame_id - 1,
                    "unit": record.get("unit"),
                    "index": record["index"],
                    "cameras": {n: {**c, "depth": depth.get(n)} for n, c in parts["cameras"].items()},
                }
            )
    written = []
    out = Path(root) / "annotations"
    if "coco" in render.annotations:
        cats = [
            {"id": i, "name": n, "supercategory": "object"}
            for n, i in sorted(categories.items(), key=lambda x: x[1])
        ]
        for name in names:
            doc = {"info": {"description": f"unirender instances, camera {name}"}, "images": images[name],
                   "annotations": anns[name], "categories": cats}  # fmt: skip
            path = out / f"coco_{name}.json"
            write_atomic(path, json.dumps(doc, separators=(",", ":")).encode())
            written.append(path)
    if "cameras" in render.annotations:
        doc = {
            "convention": "Unity: left-handed, y up, the camera looks along +z; angles in degrees (Euler, applied "
            "z, x, y); fov_y vertical; camera_to_world maps camera coordinates to world coordinates",
            "frames": cameras_frames,
        }
        path = out / "cameras.json"
        write_atomic(path, json.dumps(doc, separators=(",", ":")).encode())
        written.append(path)
    return written
