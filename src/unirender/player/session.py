"""One running player: the loaded world, the AgentManager settings, the screen and the renderer.

``PlayerSession.hello()`` and ``step(action)`` return an :class:`Emission` (metadata + images in wire order, or
a metadata patch); the transport loop in ``main.py`` only moves its bytes. The renderer is created on the first
frame that needs one, so a metadata-only player (``-nographics`` / no server-side screenshots) never loads GL.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from unirender.player import actions, encode
from unirender.player.metadata import WorldMetadata, agent_metadata
from unirender.player.scene import builtin_scene_names, find_scene
from unirender.player.world import World

log = logging.getLogger("unirender.player")

# Like a CloudRendering build, the Vulkan flavour ignores -screen-width/-height and starts at this size;
# the Controller follows the first event with ChangeResolution (protocol.md 6.4, 9.14).
CLOUD_RENDERING_DEFAULT_SIZE = (400, 300)
DEFAULT_SIZE = (300, 300)
# The simulated clock behind ``currentTime`` (seconds since the scene was loaded): a function of the actions
# only, never of the wall clock, so two runs of one job write identical metadata (docs/jobs.md). An action
# that lets the world run from where it stands takes one physics step of AI2-THOR's default fixedDeltaTime;
# actions that set state absolutely (Reset, teleports), ask (queries) or configure (Initialize, cameras,
# resolution, quality) take none. So a job resumed from a teleport, or one action sequence replayed from its
# reset, reaches each frame at the same simulated time as an uninterrupted run.
FIXED_DELTA_TIME = 0.02
TIMED_ACTIONS = frozenset({
    "Pass", "MoveAhead", "MoveBack", "MoveRight", "MoveLeft", "RotateRight", "RotateLeft", "LookUp", "LookDown",
    "Crouch", "Stand",
})  # fmt: skip


@dataclass
class Settings:
    """AgentManager state: set by Initialize, back to defaults on Reset (a new scene = a new AgentManager)."""

    grid_size: float = 0.25
    field_of_view: float = 90.0
    near: float = 0.1
    far: float = 20.0
    rotate_step: float = 90.0
    visibility_distance: float = 1.5
    render_depth: bool = False
    render_instance: bool = False
    render_semantic: bool = False
    render_normals: bool = False
    render_flow: bool = False
    fast_action_emit: bool = True

    def copy(self) -> Settings:
        return dataclasses.replace(self)


@dataclass
class Emission:
    """What the player sends next: a full event (``metadata`` + ``images``) or a fast-path ``patch``."""

    metadata: dict | None = None
    images: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)
    patch: dict | None = None
    reconnect: bool = False  # a scene was loaded: over WSGI this emission goes on a new connection


def _result_state(name, result: actions.ActionResult) -> dict:
    return {
        "lastAction": name if isinstance(name, str) else "",
        "lastActionSuccess": result.success,
        "errorMessage": result.error_message,
        "errorCode": result.error_code,
        "actionReturn": result.action_return,
        "collidedObjects": result.collided_objects,
    }


class PlayerSession:
    def __init__(
        self,
        backend: str | None,
        width: int,
        height: int,
        *,
        quality: str = "Ultra",
        render_images: bool = True,
        device_index: int | None = None,
        scene: str | None = None,
    ):
        """``backend`` None (or ``render_images`` False) = metadata only, like ``-nographics``."""
        self.backend = backend
        self.render_images = render_images and backend is not None
        self.rgb_channels = 4 if backend == "vulkan" else 3
        self.width, self.height = width, height
        self.quality = quality
        self.device_index = device_index
        self.settings = Settings()
        self.sequence_id = 0
        self.renderer = None
        self._scene_uploaded = False
        self._previous_cameras: dict[tuple[str, int], object] = {}
        self.clock_steps = 0  # physics steps since the scene was loaded: currentTime = steps x FIXED_DELTA_TIME
        self.load_scene(scene or builtin_scene_names()[0])

    # --- state changes used by actions ---------------------------------------------------------------------

    def load_scene(self, name: str) -> None:
        world = World(find_scene(name))
        self.world = world
        self.static = WorldMetadata(world)
        self.settings = Settings()
        self._scene_uploaded = False
        self._previous_cameras.clear()
        self._results = [_result_state("", actions.ActionResult()) for _ in world.agents]
        self._loaded_scene = True
        self.clock_steps = 0

    def set_agent_count(self, count: int) -> None:
        cameras = self.world.cameras
        self.world = World(self.world.scene, agent_count=count, meshes=self.world.meshes)
        self.world.cameras = cameras
        self.static = WorldMetadata(self.world)
        self._results = [_result_state("", actions.ActionResult()) for _ in self.world.agents]
        self._previous_cameras = {k: v for k, v in self._previous_cameras.items() if k[0] == "camera"}

    def resize(self, width: int, height: int) -> None:
        if self.renderer is not None:
            self.renderer.resize(width, height)  # first: if it fails, the old size stays consistent
        self.width, self.height = width, height
        self._previous_cameras.clear()

    # --- emissions --------------------------------------------------------------------------------------------

    def hello(self) -> Emission:
        """The first event after start (sequenceId 0), rendered like any other."""
        self._loaded_scene = False
        return self._full_emission({})

    def step(self, action: dict, *, patches: bool) -> Emission:
        """Run one action. ``patches``: the transport supports METADATA_PATCH (FIFO)."""
        seq = action.get("sequenceId", 0)
        self.sequence_id = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
        self._loaded_scene = False
        agent_id, result = actions.dispatch(self, action)
        name = action.get("action")
        if name in TIMED_ACTIONS and not self._loaded_scene:
            self.clock_steps += 1
        if self._loaded_scene:  # Reset: every agent of the new scene reports it
            self._results = [_result_state(name, result) for _ in self.world.agents]
        else:
            self._results[agent_id] = _result_state(name, result)
        if result.query and patches and self.settings.fast_action_emit:
            return Emission(
                patch={
                    "lastAction": name,
                    "errorMessage": result.error_message,
                    "errorCode": result.error_code,
                    "lastActionSuccess": result.success,
                    "agentId": agent_id,
                    "actionReturn": result.action_return,
                }
            )
        try:
            emission = self._full_emission(action, agent_id)
        except Exception as exc:  # rendering broke (e.g. a driver error): report it, keep the player alive
            log.exception("rendering after %r failed", name)
            failed = actions.ActionResult(False, f"{name}: rendering failed in the reference player: {exc!r}")
            self._results[agent_id] = _result_state(name, failed)
            emission = self._full_emission({**action, "renderImage": False}, agent_id)
        emission.reconnect = self._loaded_scene
        return emission

    def _full_emission(self, action: dict, active_agent: int = 0) -> Emission:
        s = self.settings
        render = self.render_images and action.get("renderImage", True) is not False
        want_depth = s.render_depth or action.get("renderDepthImage") is True
        want_ids = (
            s.render_instance
            or action.get("renderInstanceSegmentation") is True
            or action.get("renderObjectImage") is True
        )
        want_classes = (
            s.render_semantic
            or action.get("renderSemanticSegmentation") is True
            or action.get("renderClassImage") is True
        )
        want_ids = want_ids or want_classes  # Unity sends image_ids with either segmentation (protocol.md 2.4)
        want_normals = s.render_normals or action.get("renderNormalsImage") is True
        want_flow = s.render_flow or action.get("renderFlowImage") is True
        images: list[tuple[str, bytes]] = []
        if render:
            modalities = {"rgb"}
            if want_depth:
                modalities.add("depth")
            if want_ids or want_classes:
                modalities.add("instance")
            if want_normals:
                modalities.add("normals")
            if want_flow:
                modalities.add("flow")
            camera_images = [
                self._render_view(("camera", cam.camera_id), self._camera_for(cam), modalities, want_ids,
                                  want_classes, third_party=True)
                for cam in self.world.cameras
            ]  # fmt: skip
            agent_images = [
                self._render_view(("agent", a.agent_id), self._agent_camera(a), modalities, want_ids, want_classes,
                                  third_party=False)
                for a in self.world.agents
            ]  # fmt: skip
            from unirender.protocol.unity import order_images

            images = order_images(agent_images, camera_images)
        now = round(self.clock_steps * FIXED_DELTA_TIME, 4)
        agents_meta = [
            agent_metadata(
                self.static,
                agent,
                self._results[agent.agent_id],
                screen=(self.width, self.height),
                fov=s.field_of_view,
                near=s.near,
                visibility_distance=s.visibility_distance,
                images_sent=render,
                colors_sent=render and want_ids,
                current_time=now,
            )
            for agent in self.world.agents
        ]
        metadata = {
            "agents": agents_meta,
            "thirdPartyCameras": None,
            "activeAgentId": active_agent,
            "sequenceId": self.sequence_id,
        }
        return Emission(metadata=metadata, images=images)

    # --- rendering ----------------------------------------------------------------------------------------------

    def _agent_camera(self, agent):
        from unirender.player.render import Camera

        s = self.settings
        return Camera(
            tuple(float(v) for v in agent.camera_position()),
            agent.camera_rotation(),
            s.field_of_view,
            s.near,
            s.far,
        )

    def _camera_for(self, cam):
        from unirender.player.render import Camera

        near = cam.near if cam.near is not None else self.settings.near
        far = cam.far if cam.far is not None else max(self.settings.far, near * 2)
        return Camera(
            tuple(float(v) for v in cam.position), tuple(cam.rotation), cam.field_of_view, near, far
        )

    def ensure_renderer(self):
        if self.renderer is None:
            from unirender.player.render import create_renderer

            self.renderer = create_renderer(self.backend, self.width, self.height, self.device_index)
        if not self._scene_uploaded:
            self._upload_scene()
        return self.renderer

    def _upload_scene(self) -> None:
        from unirender.player.render import Instance, Light, mesh

        meshes = {}
        for obj in self.world.objects:
            key = obj.spec.mesh
            if key in meshes:
                continue
            if key.startswith("file:"):
                meshes[key] = mesh.mesh_from_trimesh(self.world.meshes.trimesh(key))
            else:
                meshes[key] = getattr(mesh, key)()
        instances = [
            Instance(o.spec.mesh, o.model, tuple(o.spec.color), o.instance_id, o.spec.texture)
            for o in self.world.objects
        ]
        lights = []
        for light in self.world.scene.lights:
            if light.kind == "directional":
                lights.append(
                    Light("directional", direction=light.vector, color=light.color, intensity=light.intensity)
                )
            else:
                lights.append(
                    Light("point", position=light.vector, color=light.color, intensity=light.intensity)
                )
        self.renderer.set_scene(
            meshes, instances, lights, self.world.scene.ambient, self.world.scene.background
        )
        self._id_lut = encode.color_lut([o.id_color for o in self.world.objects])
        self._class_lut = encode.color_lut([o.class_color for o in self.world.objects])
        self._scene_uploaded = True

    def _render_view(
        self, key, camera, modalities, want_ids, want_classes, *, third_party: bool
    ) -> dict[str, bytes]:
        renderer = self.ensure_renderer()
        previous = self._previous_cameras.get(key)
        frames = renderer.render(camera, modalities, previous_camera=previous, rgb_channels=self.rgb_channels)
        self._previous_cameras[key] = camera
        names = (
            ("image-thirdParty-camera", "image_thirdParty_depth", "image_thirdParty_normals",
             "image_thirdParty_image_ids", "image_thirdParty_classes", "image_thirdParty_flow")
            if third_party
            else ("image", "image_depth", "image_normals", "image_ids", "image_classes", "image_flow")
        )  # fmt: skip
        out = {names[0]: encode.encode_rgb(frames["rgb"])}
        if "depth" in frames:
            out[names[1]] = encode.encode_depth(frames["depth"])
        if "normals" in frames:
            out[names[2]] = encode.encode_normals(frames["normals"])
        if want_ids:
            out[names[3]] = encode.encode_ids(frames["instance"], self._id_lut)
        if want_classes:
            out[names[4]] = encode.encode_ids(frames["instance"], self._class_lut)
        if "flow" in frames:
            out[names[5]] = encode.encode_flow(frames["flow"])
        return out

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None
