"""Scene state of the reference player: objects with their bounds and colours, agents, third-party cameras,
collisions, reachability and visibility. No rendering and no I/O here, so all of it is unit-testable."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from unirender.player import geometry
from unirender.player.scene import AGENT_HALF_HEIGHT, ObjectSpec, SceneError, SceneSpec

AGENT_RADIUS = 0.2  # AI2-THOR's default agent capsule radius
AGENT_HEIGHT = 2 * AGENT_HALF_HEIGHT
CAMERA_OFFSET_STANDING = 0.675  # camera above agent.position.y, as in iTHOR
CAMERA_OFFSET_CROUCHING = 0.2275
STEP_HEIGHT = 0.05  # objects lower than this (rugs) do not block the agent
MAX_REACHABLE = 20000
# The unit primitives of unirender.player.render.mesh, all centred at the origin.
PRIMITIVE_BOUNDS = {
    "box": ((-0.5, -0.5, -0.5), (0.5, 0.5, 0.5)),
    "sphere": ((-0.5, -0.5, -0.5), (0.5, 0.5, 0.5)),
    "cylinder": ((-0.5, -0.5, -0.5), (0.5, 0.5, 0.5)),
    "plane": ((-0.5, 0.0, -0.5), (0.5, 0.0, 0.5)),
}


def _hash_color(key: str, salt: int = 0) -> tuple[int, int, int]:
    digest = hashlib.md5(f"{key}#{salt}".encode()).digest()
    return digest[0], digest[1], digest[2]


_RIGHT_TO_LEFT_HANDED = np.diag([-1.0, 1.0, 1.0, 1.0])


class MeshLibrary:
    """Local bounds of every mesh key; file meshes are loaded with trimesh (imported only then) and kept."""

    def __init__(self) -> None:
        self.loaded: dict[str, object] = {}  # "file:..." -> trimesh.Trimesh

    def bounds(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        if key in PRIMITIVE_BOUNDS:
            lo, hi = PRIMITIVE_BOUNDS[key]
            return np.array(lo, float), np.array(hi, float)
        mesh = self.trimesh(key)
        return np.asarray(mesh.bounds[0], float), np.asarray(mesh.bounds[1], float)

    def trimesh(self, key: str):
        if key not in self.loaded:
            import trimesh  # heavy: only for scenes that use file meshes

            path = key[len("file:") :]
            try:
                loaded = trimesh.load(path, force="mesh")
            except Exception as exc:  # trimesh raises many types for a bad file
                raise SceneError(f"cannot load mesh file {path}: {exc}") from None
            if loaded.is_empty:
                raise SceneError(f"mesh file {path} contains no triangles")
            # OBJ and glTF are right-handed; Unity is left-handed. Unity's importers negate x, so a model appears
            # here as it does in a Unity build (not mirrored). trimesh flips the face winding with the reflection.
            loaded.apply_transform(_RIGHT_TO_LEFT_HANDED)
            self.loaded[key] = loaded
        return self.loaded[key]


@dataclass
class WorldObject:
    spec: ObjectSpec
    instance_id: int  # renderer instance id, > 0
    model: np.ndarray  # 4x4 float32 Unity world matrix
    lo: np.ndarray
    hi: np.ndarray
    id_color: tuple[int, int, int]  # instance segmentation colour
    class_color: tuple[int, int, int]  # class segmentation colour

    @property
    def object_id(self) -> str:
        return self.spec.object_id

    @property
    def center(self) -> np.ndarray:
        return (self.lo + self.hi) / 2


@dataclass
class Agent:
    agent_id: int
    position: np.ndarray  # (3,) float64, agent centre (y = floor + 0.9)
    rotation: float  # yaw degrees
    horizon: float = 0.0  # camera pitch, + looks down
    standing: bool = True

    def camera_position(self) -> np.ndarray:
        offset = CAMERA_OFFSET_STANDING if self.standing else CAMERA_OFFSET_CROUCHING
        return self.position + np.array([0.0, offset, 0.0])

    def camera_rotation(self) -> tuple[float, float, float]:
        return (self.horizon, self.rotation, 0.0)


@dataclass
class ThirdPartyCamera:
    camera_id: int
    position: np.ndarray
    rotation: tuple[float, float, float]
    field_of_view: float = 90.0
    near: float | None = None
    far: float | None = None


@dataclass
class MoveResult:
    success: bool
    message: str = ""
    blocking: list[str] = field(default_factory=list)


class World:
    """Everything in one loaded scene. Coordinates are Unity world metres."""

    def __init__(self, scene: SceneSpec, *, agent_count: int = 1, meshes: MeshLibrary | None = None):
        if agent_count < 1:
            raise ValueError(f"agentCount must be >= 1, got {agent_count}")
        self.scene = scene
        self.meshes = meshes or MeshLibrary()
        self.objects: list[WorldObject] = []
        used_ids: set[tuple[int, int, int]] = {(0, 0, 0)}
        class_colors: dict[str, tuple[int, int, int]] = {}
        used_class: set[tuple[int, int, int]] = {(0, 0, 0)}
        for i, spec in enumerate(scene.objects):
            model = geometry.model_matrix(spec.position, spec.rotation, spec.scale)
            lo, hi = geometry.transformed_bounds(*self.meshes.bounds(spec.mesh), model)
            color, salt = _hash_color(spec.object_id), 0
            while color in used_ids:  # unique per object, never the black background
                salt += 1
                color = _hash_color(spec.object_id, salt)
            used_ids.add(color)
            if spec.object_type not in class_colors:
                ccolor, salt = _hash_color(spec.object_type), 0
                while ccolor in used_class:
                    salt += 1
                    ccolor = _hash_color(spec.object_type, salt)
                used_class.add(ccolor)
                class_colors[spec.object_type] = ccolor
            self.objects.append(
                WorldObject(spec, i + 1, model, lo, hi, color, class_colors[spec.object_type])
            )
        self.class_colors = class_colors
        self.by_id = {o.object_id: o for o in self.objects}
        self._init_obstacles()
        self.agents: list[Agent] = []
        for i in range(agent_count):
            self.agents.append(self._spawn_agent(i))
        self.cameras: list[ThirdPartyCamera] = []
        all_lo = np.min([o.lo for o in self.objects], axis=0) if self.objects else np.zeros(3)
        all_hi = np.max([o.hi for o in self.objects], axis=0) if self.objects else np.zeros(3)
        self.bounds = (all_lo, all_hi)
        # (N, 9, 3): centre + 8 corners per object, for vectorised visibility tests
        self._probe_points = np.array(
            [np.vstack([o.center[None], geometry.box_corners(o.lo, o.hi)]) for o in self.objects]
        ).reshape(-1, 9, 3)
        self._reachable_cache: dict[tuple, list[dict]] = {}

    # --- collisions ------------------------------------------------------------------------------------

    def _init_obstacles(self) -> None:
        blocking = [
            o
            for o in self.objects
            if o.spec.object_type not in ("Floor", "Ceiling")
            and o.hi[1] > STEP_HEIGHT
            and o.lo[1] < AGENT_HEIGHT
        ]
        self._obstacles = blocking
        self._obs_lo = np.array([[o.lo[0], o.lo[2]] for o in blocking]).reshape(-1, 2)
        self._obs_hi = np.array([[o.hi[0], o.hi[2]] for o in blocking]).reshape(-1, 2)

    def on_floor(self, x: float, z: float) -> bool:
        return any(f.contains(x, z) for f in self.scene.floors)

    def blocking_at(
        self, points_xz: np.ndarray, *, ignore_agent: int | None = None, agents: bool = True
    ) -> list[str]:
        """Ids of obstacles (objects, other agents) an agent circle centred at any of ``points_xz`` touches."""
        pts = np.asarray(points_xz, float).reshape(-1, 2)
        hits: list[str] = []
        if len(self._obstacles):
            d = np.maximum(
                np.maximum(self._obs_lo[None] - pts[:, None], pts[:, None] - self._obs_hi[None]), 0.0
            )
            touching = (d**2).sum(axis=2) < (AGENT_RADIUS - 1e-6) ** 2
            hits = [self._obstacles[k].object_id for k in np.flatnonzero(touching.any(axis=0))]
        if agents:
            for other in self.agents:
                if other.agent_id == ignore_agent:
                    continue
                gap = np.hypot(pts[:, 0] - other.position[0], pts[:, 1] - other.position[2])
                if (gap < 2 * AGENT_RADIUS - 1e-6).any():
                    hits.append(f"Agent {other.agent_id}")
        return hits

    def _path_samples(self, start_xz, end_xz) -> np.ndarray:
        start, end = np.asarray(start_xz, float), np.asarray(end_xz, float)
        n = max(1, math.ceil(np.linalg.norm(end - start) / (AGENT_RADIUS / 2)))
        t = np.linspace(0.0, 1.0, n + 1)[1:, None]
        return start + (end - start) * t

    def _spawn_agent(self, index: int) -> Agent:
        """Start pose ``index`` of the scene; extra agents (or a blocked pose) take the nearest free grid spot."""
        poses = self.scene.agents
        base = poses[index % len(poses)]
        pos = np.array(base.position, float)
        if index >= len(poses) or self.blocking_at([pos[[0, 2]]]):
            candidates = sorted(
                ((dx * 0.25, dz * 0.25) for dx in range(-24, 25) for dz in range(-24, 25)),
                key=lambda d: (d[0] ** 2 + d[1] ** 2, d),
            )
            for dx, dz in candidates:
                x, z = pos[0] + dx, pos[2] + dz
                if self.on_floor(x, z) and not self.blocking_at([[x, z]]):
                    pos = np.array([x, pos[1], z])
                    break
            else:
                raise ValueError(f"no free place for agent {index} in scene {self.scene.name!r}")
        return Agent(index, pos, geometry.normalize_degrees(base.rotation), base.horizon, base.standing)

    def move_agent(self, agent: Agent, dx: float, dz: float, *, force: bool = False) -> MoveResult:
        """Move on the floor plane by (dx, dz); blocked moves leave the agent where it was."""
        start = agent.position[[0, 2]]
        end = start + np.array([dx, dz])
        if not force:
            if not self.on_floor(end[0], end[1]):
                return MoveResult(
                    False,
                    f"Agent {agent.agent_id} would leave the walkable area at ({end[0]:.4f}, {end[1]:.4f}).",
                )
            hits = self.blocking_at(self._path_samples(start, end), ignore_agent=agent.agent_id)
            if hits:
                return MoveResult(
                    False,
                    f"{hits[0]} is blocking Agent {agent.agent_id} from moving by ({dx:.4f}, 0.0000, {dz:.4f}).",
                    hits,
                )
        agent.position = np.array([end[0], agent.position[1], end[1]])
        return MoveResult(True)

    def place_agent(self, agent: Agent, position, *, force: bool = False) -> MoveResult:
        """Teleport target check: on a floor and not inside anything (no path check)."""
        x, z = float(position[0]), float(position[2])
        if not force:
            if not self.on_floor(x, z):
                return MoveResult(False, f"Teleport target ({x:.4f}, {z:.4f}) is outside the walkable area.")
            hits = self.blocking_at([[x, z]], ignore_agent=agent.agent_id)
            if hits:
                return MoveResult(False, f"Teleport target ({x:.4f}, {z:.4f}) collides with {hits[0]}.", hits)
        agent.position = np.array(
            [x, agent.position[1], z]
        )  # on the floor: a given y is ignored, as physics would
        return MoveResult(True)

    def reachable_positions(self, agent: Agent, grid_size: float) -> list[dict[str, float]]:
        """Grid points (spacing ``grid_size``, through the agent's position) reachable by 4-neighbour steps,
        ignoring other agents (like AI2-THOR). Cached: the scene is static."""
        if grid_size <= 0:
            raise ValueError(f"gridSize must be > 0, got {grid_size}")
        x0, y, z0 = (float(v) for v in agent.position)
        key = (round(x0, 4), round(y, 4), round(z0, 4), round(grid_size, 6))
        if key in self._reachable_cache:
            return self._reachable_cache[key]

        def free(i: int, j: int) -> bool:
            x, z = x0 + i * grid_size, z0 + j * grid_size
            return self.on_floor(x, z) and not self.blocking_at([[x, z]], agents=False)

        out: list[dict[str, float]] = []
        if free(0, 0):
            seen = {(0, 0)}
            queue = deque([(0, 0)])
            while queue and len(out) < MAX_REACHABLE:
                i, j = queue.popleft()
                out.append(
                    {"x": round(x0 + i * grid_size, 4), "y": round(y, 4), "z": round(z0 + j * grid_size, 4)}
                )
                for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    n = (i + di, j + dj)
                    if n in seen:
                        continue
                    seen.add(n)
                    if not free(*n):
                        continue
                    path = self._path_samples(
                        (x0 + i * grid_size, z0 + j * grid_size),
                        (x0 + n[0] * grid_size, z0 + n[1] * grid_size),
                    )
                    if not self.blocking_at(path, agents=False):
                        queue.append(n)
        self._reachable_cache[key] = out
        return out

    # --- perception --------------------------------------------------------------------------------------

    def visibility(
        self, cam_pos, cam_rot, fov_deg: float, aspect: float, near: float, max_distance: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(visible bool[N], distance float[N]) for every object, geometric (no occlusion test): an object is
        visible when its centre or a corner is in the view frustum and its bounds are within ``max_distance``
        of the camera. ``distance`` is camera to bounds centre, like AI2-THOR's agent-to-object distance."""
        n = len(self.objects)
        if n == 0:
            return np.zeros(0, bool), np.zeros(0)
        cam_pos = np.asarray(cam_pos, float)
        rot = geometry.rotation_matrix(cam_rot)
        local = (self._probe_points - cam_pos) @ rot  # rows are R^T (p - c): camera space, z forward
        tan_y = math.tan(math.radians(fov_deg) / 2)
        tan_x = tan_y * aspect
        z = local[..., 2]
        inside = (z > near) & (np.abs(local[..., 0]) <= z * tan_x) & (np.abs(local[..., 1]) <= z * tan_y)
        lo = np.array([o.lo for o in self.objects])
        hi = np.array([o.hi for o in self.objects])
        nearest = np.clip(cam_pos, lo, hi)
        close = np.linalg.norm(nearest - cam_pos, axis=1) <= max_distance
        distance = np.linalg.norm(self._probe_points[:, 0] - cam_pos, axis=1)
        return inside.any(axis=1) & close, distance
