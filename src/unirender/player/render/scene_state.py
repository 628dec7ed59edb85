"""Back-end-neutral scene state: validation, per-instance GPU records, previous poses for flow, and the
per-frame uniform block. Both back-ends upload exactly these bytes, so GL and Vulkan share one set of maths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .scene import MODALITIES, Camera, Instance, Light, Mesh
from .transforms import normal_matrix, view_matrix, view_projection

MAX_LIGHTS = 8

# One record per instance, read as per-instance vertex attributes. Matrices are column-major (GLSL/WGSL).
# color.w = 1 when the instance is textured (informational: texturing is a shader variant per group).
INSTANCE_DTYPE = np.dtype(
    [("model", "<f4", (16,)), ("prev_model", "<f4", (16,)), ("normal", "<f4", (9,)), ("color", "<f4", (4,)),
     ("id", "<u4")]
)

# The per-frame uniform block, all vec4/mat4 so std140 (GL) and WGSL layouts are the same bytes:
# view_proj, prev_view_proj (mat4); view_z (row 2 of the view matrix: eye z = dot(view_z, world));
# viewport (w, h, near, far); ambient (rgb, light count); background; light_vec[8] (xyz = direction towards
# the light, or position; w = 0 directional / 1 point); light_color[8] (rgb * intensity).
FRAME_FLOATS = 16 + 16 + 4 + 4 + 4 + 4 + 4 * MAX_LIGHTS + 4 * MAX_LIGHTS


@dataclass
class InstanceGroup:
    """Instances drawn by one instanced draw call: same mesh, same texture."""

    mesh: str
    texture: str | None
    records: np.ndarray  # INSTANCE_DTYPE, shape (count,)


def _column_major(m: np.ndarray) -> np.ndarray:
    return np.asarray(m, dtype=np.float32).T.reshape(-1)


class SceneState:
    def __init__(self) -> None:
        self.meshes: dict[str, Mesh] = {}
        self.instances: list[Instance] = []
        self.lights: list[Light] = []
        self.ambient = (0.3, 0.3, 0.3)
        self.background = (0.0, 0.0, 0.0)
        self._previous_models: dict[int, np.ndarray] = {}
        self._rendered_since_update = True
        self.groups: list[InstanceGroup] = []
        # bumps when meshes change (re-upload geometry) / when instance records change (re-upload records)
        self.mesh_version = 0
        self.instance_version = 0

    # -- changes -------------------------------------------------------------------------------------------
    def set_scene(self, meshes: dict[str, Mesh], instances: Sequence[Instance], lights: Sequence[Light],
                  ambient: Sequence[float], background: Sequence[float]) -> None:
        for key, mesh in meshes.items():
            if not isinstance(mesh, Mesh):
                raise TypeError(f"meshes[{key!r}] must be a Mesh, got {type(mesh).__name__}")
        if len(lights) > MAX_LIGHTS:
            raise ValueError(f"at most {MAX_LIGHTS} lights are supported, got {len(lights)}")
        for light in lights:
            if not isinstance(light, Light):
                raise TypeError(f"lights must be Light objects, got {type(light).__name__}")
        self.meshes = dict(meshes)
        self.lights = list(lights)
        self.ambient = _rgb(ambient, "ambient")
        self.background = _rgb(background, "background")
        self._validate_instances(instances)
        self.instances = list(instances)
        self._previous_models = {i.instance_id: i.model for i in self.instances}
        self._rendered_since_update = False
        self.mesh_version += 1
        self._rebuild_groups()

    def update_instances(self, instances: Sequence[Instance]) -> None:
        """New poses. Flow compares against the poses that were current at the last render() before this call,
        so calling this several times between frames, or rendering several cameras per step, stays right."""
        self._validate_instances(instances)
        if self._rendered_since_update:
            self._previous_models = {i.instance_id: i.model for i in self.instances}
            self._rendered_since_update = False
        self.instances = list(instances)
        self._rebuild_groups()

    def drawable_meshes(self) -> dict[str, Mesh]:
        return {key: m for key, m in self.meshes.items() if m.indices.size}

    @property
    def light_kinds(self) -> tuple[str, ...]:
        """Shaders are specialised on this (unrolled lighting)."""
        return tuple(light.kind for light in self.lights)

    def mark_rendered(self) -> None:
        self._rendered_since_update = True

    def _validate_instances(self, instances: Sequence[Instance]) -> None:
        seen: set[int] = set()
        for inst in instances:
            if not isinstance(inst, Instance):
                raise TypeError(f"instances must be Instance objects, got {type(inst).__name__}")
            if inst.mesh not in self.meshes:
                raise ValueError(f"instance {inst.instance_id} uses unknown mesh {inst.mesh!r}; "
                                 f"known: {sorted(self.meshes)}")
            if inst.instance_id in seen:
                raise ValueError(f"duplicate instance_id {inst.instance_id}")
            seen.add(inst.instance_id)

    def _rebuild_groups(self) -> None:
        by_key: dict[tuple[str, str | None], list[Instance]] = {}
        for inst in self.instances:
            if self.meshes[inst.mesh].indices.size:  # an empty mesh draws nothing (and GPUs dislike 0-byte buffers)
                by_key.setdefault((inst.mesh, inst.texture), []).append(inst)
        groups = []
        for (mesh, texture), members in by_key.items():
            records = np.zeros(len(members), dtype=INSTANCE_DTYPE)
            for rec, inst in zip(records, members, strict=True):
                prev = self._previous_models.get(inst.instance_id, inst.model)
                rec["model"] = _column_major(inst.model)
                rec["prev_model"] = _column_major(prev)
                rec["normal"] = _column_major(normal_matrix(inst.model))
                rec["color"] = (*_rgb(inst.color, "color"), 1.0 if texture else 0.0)
                rec["id"] = inst.instance_id
            groups.append(InstanceGroup(mesh, texture, records))
        self.groups = groups
        self.instance_version += 1

    # -- per frame -----------------------------------------------------------------------------------------
    def frame_uniforms(self, camera: Camera, previous_camera: Camera | None, width: int, height: int,
                       clip_z: str) -> np.ndarray:
        aspect = width / height
        frame = np.zeros(FRAME_FLOATS, dtype=np.float32)
        vp = view_projection(camera, aspect, clip_z)
        prev_vp = vp if previous_camera is None else view_projection(previous_camera, aspect, clip_z)
        frame[0:16] = _column_major(vp)
        frame[16:32] = _column_major(prev_vp)
        frame[32:36] = view_matrix(camera)[2]
        frame[36:40] = (width, height, camera.near, camera.far)
        frame[40:44] = (*self.ambient, len(self.lights))
        frame[44:48] = (*self.background, 1.0)
        base_vec, base_col = 48, 48 + 4 * MAX_LIGHTS
        for i, light in enumerate(self.lights):
            if light.kind == "directional":
                d = -np.asarray(light.direction, dtype=np.float64)
                norm = np.linalg.norm(d)
                if norm == 0:
                    raise ValueError("directional light with a zero direction")
                frame[base_vec + 4 * i: base_vec + 4 * i + 4] = (*(d / norm), 0.0)
            else:
                frame[base_vec + 4 * i: base_vec + 4 * i + 4] = (*light.position, 1.0)
            frame[base_col + 4 * i: base_col + 4 * i + 4] = (*(np.asarray(light.color) * light.intensity), 0.0)
        return frame


def _rgb(value: Sequence[float], what: str) -> tuple[float, float, float]:
    rgb = tuple(float(v) for v in value)
    if len(rgb) != 3:
        raise ValueError(f"{what} must be (r, g, b), got {value!r}")
    return rgb  # type: ignore[return-value]


def check_modalities(modalities) -> frozenset[str]:
    wanted = frozenset(modalities)
    unknown = wanted - set(MODALITIES)
    if unknown:
        raise ValueError(f"unknown modalities {sorted(unknown)}; known: {list(MODALITIES)}")
    if not wanted:
        raise ValueError("render() needs at least one modality")
    return wanted
