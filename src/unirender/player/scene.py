"""Declarative scene files for the reference player: load, validate, expand rooms into structure.

A scene is YAML or JSON (see ``player/scenes/*.yaml`` for complete examples)::

    name: MyRoom                    # optional, defaults to the file name without extension
    rooms:                          # rectangular rooms, floors at y = 0
      - name: main
        center: [0, 0]              # floor centre (x, z), metres
        size: [6, 5]                # extent along x and z
        height: 2.6
        floor: {color: [0.6, 0.5, 0.4]}
        walls: {color: "#d8d2c4", thickness: 0.1, sides: [north, east, south, west],
                openings: {east: [{offset: 0.0, width: 1.0}]}}   # door gaps, offset along the wall from its centre
        ceiling: {color: [0.9, 0.9, 0.9]}                      # or false
    objects:
      - objectType: Sofa
        objectId: "Sofa|+01.00|+00.40|-02.00"   # optional; generated in AI2-THOR's Type|x|y|z form when absent
        mesh: box                   # box | sphere | cylinder | plane | {file: chair.obj} (path relative to the scene)
        position: [1.0, 0.4, -2.0]  # centre of the primitive (unit box/sphere/cylinder centred at the origin)
        rotation: [0, 90, 0]        # Unity Euler degrees, or one number = yaw
        scale: [2.0, 0.8, 0.9]
        color: [0.3, 0.3, 0.5]      # 0..1 floats or "#rrggbb"
        texture: wood.png           # optional image, relative to the scene
    lights: [{kind: directional, direction: [0.3, -1, 0.5], color: [1, 1, 1], intensity: 0.8}]
    ambient: [0.35, 0.35, 0.35]
    background: [0.55, 0.65, 0.8]
    agents: [{position: [0, 0], rotation: 0, horizon: 0}]      # start poses: (x, z) or (x, y, z)

Errors are collected with their key paths and raised together as one :class:`SceneError`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirender.errors import UnirenderError

PRIMITIVES = ("box", "sphere", "cylinder", "plane")
WALL_SIDES = ("north", "east", "south", "west")  # +z, +x, -z, -x
LIGHT_KINDS = ("directional", "point")
AGENT_HALF_HEIGHT = 0.9  # AI2-THOR's agent.position.y above the floor
BUILTIN_DIR = Path(__file__).with_name("scenes")
SCENE_SUFFIXES = (".yaml", ".yml", ".json")


class SceneError(UnirenderError, ValueError):
    """A scene file or name is invalid; ``errors`` lists (key path, message)."""

    def __init__(self, message: str, errors: list[tuple[str, str]] | None = None):
        self.errors = errors or []
        if self.errors:
            message += "\n" + "\n".join(f"  {path or '<root>'}: {msg}" for path, msg in self.errors)
        super().__init__(message)


@dataclass(frozen=True)
class ObjectSpec:
    object_id: str
    object_type: str
    mesh: str  # a primitive name, or "file:<absolute path>"
    position: tuple[float, float, float]
    rotation: tuple[float, float, float]
    scale: tuple[float, float, float]
    color: tuple[float, float, float]
    texture: str | None = None
    structural: bool = False  # floor, wall or ceiling generated from a room


@dataclass(frozen=True)
class LightSpec:
    kind: str
    vector: tuple[float, float, float]  # direction (directional) or position (point)
    color: tuple[float, float, float]
    intensity: float


@dataclass(frozen=True)
class AgentPose:
    position: tuple[float, float, float]
    rotation: float
    horizon: float = 0.0
    standing: bool = True


@dataclass(frozen=True)
class FloorArea:
    """A room's walkable rectangle (x0, z0, x1, z1)."""

    name: str
    x0: float
    z0: float
    x1: float
    z1: float
    height: float

    def contains(self, x: float, z: float) -> bool:
        return self.x0 <= x <= self.x1 and self.z0 <= z <= self.z1


@dataclass
class SceneSpec:
    name: str
    objects: list[ObjectSpec]
    floors: list[FloorArea]
    lights: list[LightSpec]
    ambient: tuple[float, float, float]
    background: tuple[float, float, float]
    agents: list[AgentPose]
    path: str | None = None
    description: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


# --- validation helpers -------------------------------------------------------------------------------


class _Checker:
    """Collects errors with key paths so one run reports everything wrong with a file."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def number(self, value, path: str, *, default=None, positive=False, minimum=None) -> float | None:
        if value is None:
            if default is None:
                self.fail(path, "is required")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(path, f"must be a finite number, got {value!r}")
            return default
        if positive and value <= 0:
            self.fail(path, f"must be > 0, got {value!r}")
            return default
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value!r}")
            return default
        return float(value)

    def vector(self, value, path: str, n: int, *, default=None, positive=False) -> tuple[float, ...] | None:
        if value is None:
            if default is None:
                self.fail(path, f"is required (a list of {n} numbers)")
            return default
        if isinstance(value, dict) and set(value) <= {"x", "y", "z"} and n == 3:
            value = [value.get("x", 0.0), value.get("y", 0.0), value.get("z", 0.0)]
        if not isinstance(value, list | tuple) or len(value) != n:
            self.fail(path, f"must be a list of {n} numbers, got {value!r}")
            return default
        out = [self.number(v, f"{path}[{i}]", default=0.0, positive=positive) for i, v in enumerate(value)]
        return tuple(out)

    def color(self, value, path: str, default) -> tuple[float, float, float]:
        if value is None:
            return default
        if isinstance(value, str):
            text = value.lstrip("#")
            if len(text) == 6:
                try:
                    return tuple(int(text[i : i + 2], 16) / 255.0 for i in (0, 2, 4))
                except ValueError:
                    pass
            self.fail(path, f"must be [r, g, b] in 0..1 or '#rrggbb', got {value!r}")
            return default
        rgb = self.vector(value, path, 3, default=default)
        if any(not 0.0 <= c <= 1.0 for c in rgb):
            self.fail(path, f"components must be in 0..1, got {value!r}")
            return default
        return rgb

    def mapping(self, value, path: str, allowed: set[str]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping, got {type(value).__name__}")
            return {}
        for key in value:
            if key not in allowed:
                self.fail(
                    f"{path}.{key}" if path else str(key),
                    f"unknown key (allowed: {', '.join(sorted(allowed))})",
                )
        return value

    def seq(self, value, path: str) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {type(value).__name__}")
            return []
        return value


def format_object_id(object_type: str, position) -> str:
    """AI2-THOR's objectId form, e.g. ``Apple|+01.23|+00.98|-00.45``."""
    return object_type + "".join(f"|{float(c):+06.2f}" for c in position)


# --- rooms -> structural objects ----------------------------------------------------------------------


def _wall_segments(length: float, openings: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Split a wall of ``length`` (coordinates -L/2..L/2 along it) around door gaps -> [(start, end)]."""
    cuts = sorted((off - w / 2, off + w / 2) for off, w in openings)
    segments, cursor = [], -length / 2
    for a, b in cuts:
        if a > cursor + 1e-6:
            segments.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < length / 2 - 1e-6:
        segments.append((cursor, length / 2))
    return segments


def _room_structure(
    room: dict, index: int, base: Path | None, check: _Checker
) -> tuple[list[ObjectSpec], FloorArea | None]:
    path = f"rooms[{index}]"
    check.mapping(room, path, {"name", "center", "size", "height", "floor", "walls", "ceiling"})
    name = str(room.get("name", f"room{index}"))
    center = check.vector(room.get("center"), f"{path}.center", 2, default=(0.0, 0.0))
    size = check.vector(room.get("size"), f"{path}.size", 2, positive=True)
    height = check.number(room.get("height"), f"{path}.height", default=2.6, positive=True)
    if size is None or center is None:
        return [], None
    cx, cz = center
    sx, sz = size
    out: list[ObjectSpec] = []

    floor = room.get("floor") or {}
    check.mapping(floor, f"{path}.floor", {"color", "texture"})
    out.append(
        ObjectSpec(
            object_id=f"Floor|{name}",
            object_type="Floor",
            mesh="plane",
            position=(cx, 0.0, cz),
            rotation=(0.0, 0.0, 0.0),
            scale=(sx, 1.0, sz),
            color=check.color(floor.get("color"), f"{path}.floor.color", (0.55, 0.45, 0.35)),
            texture=_resolve_texture(floor.get("texture"), base, f"{path}.floor.texture", check),
            structural=True,
        )
    )

    ceiling = room.get("ceiling", {})
    if ceiling is not False:
        ceiling = ceiling if isinstance(ceiling, dict) else {}
        check.mapping(ceiling, f"{path}.ceiling", {"color", "texture"})
        out.append(
            ObjectSpec(
                object_id=f"Ceiling|{name}",
                object_type="Ceiling",
                mesh="plane",
                position=(cx, height, cz),
                rotation=(180.0, 0.0, 0.0),  # face down
                scale=(sx, 1.0, sz),
                color=check.color(ceiling.get("color"), f"{path}.ceiling.color", (0.92, 0.92, 0.9)),
                texture=_resolve_texture(ceiling.get("texture"), base, f"{path}.ceiling.texture", check),
                structural=True,
            )
        )

    walls = room.get("walls") or {}
    check.mapping(walls, f"{path}.walls", {"color", "texture", "thickness", "sides", "openings"})
    color = check.color(walls.get("color"), f"{path}.walls.color", (0.85, 0.83, 0.78))
    wall_texture = _resolve_texture(walls.get("texture"), base, f"{path}.walls.texture", check)
    thickness = check.number(walls.get("thickness"), f"{path}.walls.thickness", default=0.1, positive=True)
    sides = walls.get("sides", list(WALL_SIDES))
    if not isinstance(sides, list) or any(s not in WALL_SIDES for s in sides):
        check.fail(f"{path}.walls.sides", f"must be a list of {', '.join(WALL_SIDES)}, got {sides!r}")
        sides = []
    openings = check.mapping(walls.get("openings"), f"{path}.walls.openings", set(WALL_SIDES))
    for side in sides:
        horizontal = side in ("north", "south")  # runs along x
        length = sx if horizontal else sz
        gaps = []
        for j, gap in enumerate(check.seq(openings.get(side), f"{path}.walls.openings.{side}")):
            gpath = f"{path}.walls.openings.{side}[{j}]"
            gap = check.mapping(gap, gpath, {"offset", "width"})
            off = check.number(gap.get("offset"), f"{gpath}.offset", default=0.0)
            width = check.number(gap.get("width"), f"{gpath}.width", positive=True, default=1.0)
            if abs(off) + width / 2 > length / 2 + 1e-6:
                check.fail(gpath, f"opening does not fit in the {length:g} m wall")
            gaps.append((off, width))
        for k, (a, b) in enumerate(_wall_segments(length, gaps)):
            if horizontal:  # x-running walls reach over the corners so no gap shows there
                a -= thickness / 2 if a <= -length / 2 + 1e-6 else 0.0
                b += thickness / 2 if b >= length / 2 - 1e-6 else 0.0
            mid = (a + b) / 2
            if horizontal:
                z = cz + (sz / 2 if side == "north" else -sz / 2)
                pos, scale = (cx + mid, height / 2, z), (b - a, height, thickness)
            else:
                x = cx + (sx / 2 if side == "east" else -sx / 2)
                pos, scale = (x, height / 2, cz + mid), (thickness, height, b - a)
            out.append(
                ObjectSpec(
                    object_id=f"Wall|{name}|{side}|{k}",
                    object_type="Wall",
                    mesh="box",
                    position=pos,
                    rotation=(0.0, 0.0, 0.0),
                    scale=scale,
                    color=color,
                    texture=wall_texture,
                    structural=True,
                )
            )
    area = FloorArea(name, cx - sx / 2, cz - sz / 2, cx + sx / 2, cz + sz / 2, height)
    return out, area


# --- objects, lights, agents ----------------------------------------------------------------------------


def _resolve_file(value, base: Path | None, path: str, check: _Checker) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        check.fail(path, f"must be a file path, got {value!r}")
        return None
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    if not p.is_file():
        check.fail(path, f"file not found: {p}")
        return None
    return str(p.resolve())


def _resolve_texture(value, base: Path | None, path: str, check: _Checker) -> str | None:
    resolved = _resolve_file(value, base, path, check)
    if resolved is not None:
        from PIL import Image  # only scenes with textures pay for PIL here

        try:
            with Image.open(resolved) as image:
                image.verify()
        except Exception as exc:  # PIL raises many types for a bad file
            check.fail(path, f"not a readable image: {resolved} ({exc})")
            return None
    return resolved


def _parse_object(obj, index: int, base: Path | None, check: _Checker) -> ObjectSpec | None:
    path = f"objects[{index}]"
    if not isinstance(obj, dict):
        check.fail(path, f"must be a mapping, got {type(obj).__name__}")
        return None
    check.mapping(
        obj, path, {"objectType", "objectId", "mesh", "position", "rotation", "scale", "color", "texture"}
    )
    object_type = obj.get("objectType")
    if not isinstance(object_type, str) or not object_type or "|" in object_type:
        check.fail(f"{path}.objectType", f"must be a non-empty name without '|', got {object_type!r}")
        object_type = "Object"
    mesh = obj.get("mesh", "box")
    if isinstance(mesh, dict):
        check.mapping(mesh, f"{path}.mesh", {"file", "primitive"})
        if "file" in mesh:
            resolved = _resolve_file(mesh["file"], base, f"{path}.mesh.file", check)
            mesh = f"file:{resolved}" if resolved else "box"
        else:
            mesh = mesh.get("primitive")
    if not isinstance(mesh, str) or (mesh not in PRIMITIVES and not mesh.startswith("file:")):
        check.fail(f"{path}.mesh", f"must be one of {', '.join(PRIMITIVES)} or {{file: PATH}}, got {mesh!r}")
        mesh = "box"
    position = check.vector(obj.get("position"), f"{path}.position", 3, default=None) or (0.0, 0.0, 0.0)
    rotation = obj.get("rotation", 0.0)
    if isinstance(rotation, int | float) and not isinstance(rotation, bool):
        rotation = (0.0, float(rotation), 0.0)
    else:
        rotation = check.vector(rotation, f"{path}.rotation", 3, default=(0.0, 0.0, 0.0))
    scale = obj.get("scale", 1.0)
    if isinstance(scale, int | float) and not isinstance(scale, bool):
        scale = (float(scale),) * 3
        if scale[0] <= 0:
            check.fail(f"{path}.scale", "must be > 0")
    else:
        scale = check.vector(scale, f"{path}.scale", 3, default=(1.0, 1.0, 1.0), positive=True)
    object_id = obj.get("objectId")
    if object_id is None:
        object_id = format_object_id(object_type, position)
    elif not isinstance(object_id, str) or "|" not in object_id:
        # Event.class_masks splits instance names at '|': an id without one would read as a class.
        check.fail(
            f"{path}.objectId", f"must be a string containing '|' (e.g. 'Type|x|y|z'), got {object_id!r}"
        )
        object_id = format_object_id(object_type, position)
    return ObjectSpec(
        object_id=object_id,
        object_type=object_type,
        mesh=mesh,
        position=position,
        rotation=rotation,
        scale=scale,
        color=check.color(obj.get("color"), f"{path}.color", (0.7, 0.7, 0.7)),
        texture=_resolve_texture(obj.get("texture"), base, f"{path}.texture", check),
    )


def _parse_light(light, index: int, check: _Checker) -> LightSpec | None:
    path = f"lights[{index}]"
    light = check.mapping(light, path, {"kind", "direction", "position", "color", "intensity"})
    kind = light.get("kind", "directional")
    if kind not in LIGHT_KINDS:
        check.fail(f"{path}.kind", f"must be one of {', '.join(LIGHT_KINDS)}, got {kind!r}")
        return None
    key = "direction" if kind == "directional" else "position"
    vector = check.vector(light.get(key), f"{path}.{key}", 3)
    if vector is None:
        return None
    if kind == "directional" and not any(vector):
        check.fail(f"{path}.direction", "must not be the zero vector")
    return LightSpec(
        kind=kind,
        vector=vector,
        color=check.color(light.get("color"), f"{path}.color", (1.0, 1.0, 1.0)),
        intensity=check.number(light.get("intensity"), f"{path}.intensity", default=1.0, minimum=0.0),
    )


def _parse_agent(pose, index: int, check: _Checker) -> AgentPose | None:
    path = f"agents[{index}]"
    pose = check.mapping(pose, path, {"position", "rotation", "horizon", "standing"})
    pos = pose.get("position")
    if isinstance(pos, list | tuple) and len(pos) == 2:
        xz = check.vector(pos, f"{path}.position", 2)
        position = (xz[0], AGENT_HALF_HEIGHT, xz[1]) if xz else None
    else:
        position = check.vector(pos, f"{path}.position", 3)
    if position is None:
        return None
    rotation = pose.get("rotation", 0.0)
    if isinstance(rotation, dict):
        rotation = rotation.get("y", 0.0)
    return AgentPose(
        position=position,
        rotation=check.number(rotation, f"{path}.rotation", default=0.0),
        horizon=check.number(pose.get("horizon"), f"{path}.horizon", default=0.0),
        standing=bool(pose.get("standing", True)),
    )


def parse_scene(
    data: dict, *, name: str | None = None, base_dir: str | os.PathLike | None = None
) -> SceneSpec:
    """Validate a scene mapping; ``base_dir`` resolves relative mesh/texture paths."""
    check = _Checker()
    if not isinstance(data, dict):
        raise SceneError(f"scene {name or ''} must be a mapping at the top level, got {type(data).__name__}")
    check.mapping(
        data, "", {"name", "description", "rooms", "objects", "lights", "ambient", "background", "agents"}
    )
    base = Path(base_dir) if base_dir is not None else None
    objects: list[ObjectSpec] = []
    floors: list[FloorArea] = []
    rooms = check.seq(data.get("rooms"), "rooms")
    if not rooms:
        check.fail("rooms", "at least one room is required (agents walk on room floors)")
    for i, room in enumerate(rooms):
        if not isinstance(room, dict):
            check.fail(f"rooms[{i}]", "must be a mapping")
            continue
        structure, area = _room_structure(room, i, base, check)
        objects.extend(structure)
        if area:
            floors.append(area)
    for i, obj in enumerate(check.seq(data.get("objects"), "objects")):
        spec = _parse_object(obj, i, base, check)
        if spec:
            objects.append(spec)
    seen: dict[str, int] = {}
    for i, spec in enumerate(objects):
        if spec.object_id in seen:
            check.fail("objects", f"objectId {spec.object_id!r} is not unique")
        seen[spec.object_id] = i
    lights = [
        light
        for i, raw in enumerate(check.seq(data.get("lights"), "lights"))
        if (light := _parse_light(raw, i, check))
    ]
    if not lights:
        lights = [LightSpec("directional", (0.35, -1.0, 0.55), (1.0, 1.0, 1.0), 0.8)]
    agents = [
        a
        for i, raw in enumerate(check.seq(data.get("agents"), "agents"))
        if (a := _parse_agent(raw, i, check))
    ]
    if not agents and floors:
        f = floors[0]
        agents = [AgentPose(((f.x0 + f.x1) / 2, AGENT_HALF_HEIGHT, (f.z0 + f.z1) / 2), 0.0)]
    scene_name = data.get("name", name or "Scene")
    if not isinstance(scene_name, str) or not scene_name:
        check.fail("name", f"must be a non-empty string, got {scene_name!r}")
        scene_name = "Scene"
    if check.errors:
        raise SceneError(f"invalid scene {scene_name!r}", check.errors)
    ambient = data.get("ambient", 0.3)
    if isinstance(ambient, int | float) and not isinstance(ambient, bool):
        ambient = [float(ambient)] * 3
    return SceneSpec(
        name=scene_name,
        objects=objects,
        floors=floors,
        lights=lights,
        ambient=check.color(ambient, "ambient", (0.3, 0.3, 0.3)),
        background=check.color(data.get("background"), "background", (0.55, 0.65, 0.8)),
        agents=agents,
        description=str(data.get("description", "")),
    )


def load_scene_file(path: str | os.PathLike) -> SceneSpec:
    """Read and validate a YAML or JSON scene file."""
    p = Path(path).expanduser()
    if p.suffix.lower() not in SCENE_SUFFIXES:
        raise SceneError(f"scene file {p} must end in {', '.join(SCENE_SUFFIXES)}")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SceneError(f"cannot read scene file {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            data = yaml.load(text, Loader=loader)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError: report, don't crash
        raise SceneError(f"scene file {p} is not valid {p.suffix[1:].upper()}: {exc}") from None
    spec = parse_scene(data, name=p.stem, base_dir=p.parent)
    spec.path = str(p.resolve())
    return spec


def builtin_scene_names() -> list[str]:
    """Names of the scenes shipped with the player (GetScenesInBuild), sorted."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def find_scene(name: str) -> SceneSpec:
    """A built-in scene by name (``FloorPlan1`` finds ``FloorPlan1_physics``) or a scene file by path."""
    if not isinstance(name, str) or not name:
        raise SceneError(f"sceneName must be a non-empty string, got {name!r}")
    for candidate in (name, f"{name}_physics"):
        p = BUILTIN_DIR / f"{candidate}.yaml"
        if "/" not in candidate and p.is_file():
            return load_scene_file(p)
    p = Path(name).expanduser()
    if p.suffix.lower() in SCENE_SUFFIXES and p.is_file():
        return load_scene_file(p)
    raise SceneError(
        f"unknown scene {name!r}: not a built-in scene ({', '.join(builtin_scene_names())}) "
        "and not a path to a .yaml/.yml/.json scene file"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m unirender.player.scene FILE...``: validate scene files, print what is wrong."""
    import sys

    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m unirender.player.scene SCENE.yaml [...]", file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        try:
            spec = load_scene_file(path)
        except SceneError as exc:
            print(f"{path}: {exc}")
            status = 1
            continue
        furniture = sum(not o.structural for o in spec.objects)
        print(f"{path}: ok: scene {spec.name!r}, {len(spec.floors)} room(s), {furniture} objects, "
              f"{len(spec.lights)} light(s), {len(spec.agents)} agent start pose(s)")  # fmt: skip
    return status


if __name__ == "__main__":
    raise SystemExit(main())
