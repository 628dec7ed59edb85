"""Per-agent metadata in AI2-THOR's shape (protocol.md 5.4), including the null-but-present keys the Python side
expects. Static parts (object entries, colour lists) are built once per world; a step only fills in what
changed (agent pose, visibility, distances, action result)."""

from __future__ import annotations

import copy

import numpy as np

from unirender.player import geometry
from unirender.player.world import World, WorldObject

# Object fields AI2-THOR reports that the reference player has no physics or state for.
_STATIC_OBJECT_FIELDS = {
    "isInteractable": False, "receptacle": False, "toggleable": False, "isToggled": False, "breakable": False,
    "isBroken": False, "canFillWithLiquid": False, "isFilledWithLiquid": False, "fillLiquid": None,
    "dirtyable": False, "isDirty": False, "canBeUsedUp": False, "isUsedUp": False, "cookable": False,
    "isCooked": False, "temperature": "RoomTemp", "isHeatSource": False, "isColdSource": False,
    "sliceable": False, "isSliced": False, "openable": False, "isOpen": False, "openness": 0.0,
    "pickupable": False, "isPickedUp": False, "moveable": False, "mass": 0.0, "salientMaterials": [],
    "receptacleObjectIds": [], "parentReceptacles": [], "controlledObjects": [], "isMoving": False,
    "objectOrientedBoundingBox": None, "assetId": "",
}  # fmt: skip


def bounds_dict(lo: np.ndarray, hi: np.ndarray) -> dict:
    return {
        "cornerPoints": [[float(c) for c in p] for p in geometry.box_corners(lo, hi)],
        "center": geometry.vec3((lo + hi) / 2),
        "size": geometry.vec3(hi - lo),
    }


def object_entry(obj: WorldObject) -> dict:
    spec = obj.spec
    entry = {
        "name": spec.object_id.replace("|", "_"),
        "objectId": spec.object_id,
        "objectType": spec.object_type,
        "position": geometry.vec3(spec.position),
        "rotation": geometry.vec3(spec.rotation),
        "visible": False,
        "distance": 0.0,
        "axisAlignedBoundingBox": bounds_dict(obj.lo, obj.hi),
    }
    entry.update(copy.deepcopy(_STATIC_OBJECT_FIELDS))
    return entry


class WorldMetadata:
    """Metadata pieces that are fixed for one world."""

    def __init__(self, world: World):
        self.world = world
        self.objects = [object_entry(o) for o in world.objects]
        self.colors = [{"color": list(o.id_color), "name": o.object_id} for o in world.objects] + [
            {"color": list(color), "name": name} for name, color in world.class_colors.items()
        ]
        self.scene_bounds = bounds_dict(*world.bounds)

    def objects_for(self, visible: np.ndarray, distance: np.ndarray) -> list[dict]:
        out = []
        for entry, vis, dist in zip(self.objects, visible.tolist(), distance.tolist(), strict=True):
            item = dict(entry)
            item["visible"] = vis
            item["distance"] = round(dist, 4)
            out.append(item)
        return out


def third_party_entries(world: World) -> list[dict]:
    return [
        {
            "thirdPartyCameraId": cam.camera_id,
            "position": geometry.vec3(cam.position),
            "rotation": geometry.vec3(cam.rotation),
            "fieldOfView": float(cam.field_of_view),
        }
        for cam in world.cameras
    ]


def agent_metadata(
    static: WorldMetadata,
    agent,
    result: dict,
    *,
    screen: tuple[int, int],
    fov: float,
    near: float,
    visibility_distance: float,
    images_sent: bool,
    colors_sent: bool,
    current_time: float,
) -> dict:
    """One agent's ``MetadataWrapper`` dict. ``result`` holds the agent's last action outcome."""
    world = static.world
    width, height = screen
    cam_pos = agent.camera_position()
    visible, distance = world.visibility(
        cam_pos, agent.camera_rotation(), fov, width / height, near, visibility_distance
    )
    return {
        "objects": static.objects_for(visible, distance),
        "isSceneAtRest": True,
        "agent": {
            "name": f"agent{agent.agent_id}" if agent.agent_id else "agent",
            "position": geometry.vec3(agent.position),
            "rotation": {"x": 0.0, "y": float(agent.rotation), "z": 0.0},
            "cameraHorizon": float(agent.horizon),
            "isStanding": bool(agent.standing),
            "inHighFrictionArea": False,
        },
        "heldObjectPose": None,
        "arm": None,
        "fov": float(fov),
        "cameraPosition": geometry.vec3(cam_pos),
        "cameraOrthSize": 0.0,
        "thirdPartyCameras": third_party_entries(world) if images_sent else None,
        "collided": bool(result["collidedObjects"]),
        "collidedObjects": list(result["collidedObjects"]),
        "inventoryObjects": [],
        "sceneName": world.scene.name,
        "lastAction": result["lastAction"],
        "errorMessage": result["errorMessage"],
        "errorCode": result["errorCode"],
        "lastActionSuccess": result["lastActionSuccess"],
        "screenWidth": width,
        "screenHeight": height,
        "agentId": agent.agent_id,
        "depthFormat": "Meters",
        "colors": static.colors if colors_sent else None,
        "flatSurfacesOnGrid": [],
        "distances": [],
        "normals": [],
        "isOpenableGrid": [],
        "segmentedObjectIds": [],
        "objectIdsInBox": [],
        "actionIntReturn": 0,
        "actionFloatReturn": 0.0,
        "actionStringsReturn": [],
        "actionFloatsReturn": [],
        "actionVector3sReturn": [],
        "visibleRange": [],
        "currentTime": current_time,
        "sceneBounds": static.scene_bounds,
        "actionReturn": result["actionReturn"],
    }
