"""The declarative spec: one pydantic schema for an environment and for a rendering job.

Every model forbids unknown keys, so a typo fails at load time with its key path instead of being ignored.
Cross-field rules (flow needs a previous-frame policy, EGL needs the builtin player, ...) live in
validators next to the fields they constrain; :mod:`unirender.spec.loader` turns failures into ``SpecError``.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from unirender.simulator import AI2THOR, BUILTIN
from unirender.spec.errors import FieldError

Modality = Literal["rgb", "depth", "instance_segmentation", "semantic_segmentation", "normals", "flow"]
MODALITIES: tuple[str, ...] = Modality.__args__  # type: ignore[attr-defined]

PlatformName = Literal["auto", "CloudRendering", "LinuxHeadlessSimulation", "Linux64", "EGL", "OSXIntel64", "WebGL"]
DepthFormat = Literal["Meters", "Normalized", "Millimeters"]
# Unity's QualitySettings names as AI2-THOR builds ship them.
Quality = Literal[
    "Very Low", "Low", "Medium", "MediumCloseFitShadows", "High", "High WebGL", "Very High", "Ultra"
]

# Initialize flags per modality (protocol.md 6.5). rgb is always rendered by the player: no flag to set.
MODALITY_INITIALIZE_FLAG: dict[str, str | None] = {
    "rgb": None,
    "depth": "renderDepthImage",
    "instance_segmentation": "renderInstanceSegmentation",
    "semantic_segmentation": "renderSemanticSegmentation",
    "normals": "renderNormalsImage",
    "flow": "renderFlowImage",
}

# Controller keyword arguments that the spec sets itself; `environment.initialize` may not shadow them.
CONTROLLER_KEYS = {
    "executable", "build", "width", "height", "server", "quality", "scene", "x_display", "platform", "headless",
    "gpu_device", "server_timeout", "server_start_timeout", "max_restarts", "depth_format",
}  # fmt: skip


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


ALLOW_FLAT_CAMERAS_HELP = (
    "a job fails fast when a camera's first frame is one flat colour (a player without a rendering context: "
    "-nographics, no GPU or display); true lets it go on (a scene that really is one colour)"
)


BUILD_HELP = (
    "the build by reference, resolved through the build store (docs/builds.md): 'ai2thor:<commit>', "
    "'name:tag' or 'sha256:<digest>'; instead of executable"
)


def check_build_reference(value: str | None) -> str | None:
    """``environment.build``: a store reference, not a path (a path goes in ``executable``)."""
    if value is None:
        return value
    from unirender.builds.manifest import is_digest
    from unirender.builds.store import split_reference

    if value.startswith("sha256:"):
        hex_part = value.removeprefix("sha256:")
        if is_digest(value) or (len(hex_part) >= 12 and all(c in "0123456789abcdef" for c in hex_part)):
            return value
        raise ValueError(f"{value!r}: a digest is 'sha256:' and 64 (at least 12) lower-case hex digits")
    if "/" in value:
        raise ValueError(f"{value!r} is a path: give it as 'executable', or add it to the store (unirender builds add)")
    try:
        split_reference(value)
    except Exception as exc:  # noqa: BLE001 (the store's message says what is wrong)
        raise ValueError(str(exc)) from None
    return value


def without_unset_build(data: Any) -> Any:
    """An environment's dump without ``build`` while it is unset: specs that name an executable dump (and hash)
    byte for byte as before the field existed."""
    if isinstance(data, dict) and data.get("build") is None:
        data.pop("build", None)
    return data


BuildReference = Annotated[
    str | None, Field(min_length=1, description=BUILD_HELP), AfterValidator(check_build_reference)
]  # ``environment.build`` of every family (declared in each model where it stood, so dumps keep their order)


class BuildEnvironment(StrictModel):
    """What every family's environment model shares about ``build``: its dump leaves it out while unset, it and
    ``executable`` are exclusive (checked before the model's own validators), ``is_builtin``. The model declares
    ``build: BuildReference = None`` and ``executable`` itself."""

    if TYPE_CHECKING:  # the model's own fields (declared here they would move to the front of its dump)
        build: str | None
        executable: str

    @model_serializer(mode="wrap")
    def _omit_unset_build(self, handler):
        return without_unset_build(handler(self))

    @model_validator(mode="after")
    def _one_build_source(self):
        if self.build is not None and self.executable != BUILTIN:
            raise FieldError("build", "give either 'build' (a store reference) or 'executable' (a path), not both")
        return self

    @property
    def is_builtin(self) -> bool:
        return self.build is None and self.executable == BUILTIN


def hash_build(environment: dict[str, Any], build_digest: str | None) -> None:
    """In a content hash, the build's bytes stand for it, not the path or name it was reached by."""
    if build_digest is not None:
        environment.pop("executable", None)
        environment.pop("build", None)
        environment["build_digest"] = build_digest


def without_unset_flag(section: BaseModel, data: Any) -> Any:
    """A section's dump without ``allow_flat_cameras`` while it is false: specs that do not set it dump (and so
    hash, and land in manifests) byte for byte as before the field existed."""
    if isinstance(data, dict) and not getattr(section, "allow_flat_cameras", False):
        data.pop("allow_flat_cameras", None)
    return data


class Vec3(StrictModel):
    x: float = 0.0
    y: float = 0.0
    z: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"x": self.x, "y": self.y, "z": self.z}


def _rotation(value: Any) -> Any:
    # AI2-THOR accepts a bare number for a rotation about y; so do we.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"y": value}
    return value


class EnvironmentSpec(BuildEnvironment):
    """What to launch and how: maps one to one onto :class:`unirender.Controller` arguments."""

    executable: str = Field(BUILTIN, min_length=1, description="path to a Unity build, or 'builtin'")
    platform: PlatformName = "auto"
    transport: Literal["fifo", "wsgi"] = "fifo"
    width: int = Field(300, ge=1, le=8192)
    height: int = Field(300, ge=1, le=8192)
    quality: Quality = "Ultra"
    headless: bool = Field(
        False, description="AI2-THOR's headless: no window and renderImage=false on every step (no images)"
    )
    gpu_device: int | None = Field(None, ge=0)
    x_display: str | None = Field(None, pattern=r"^:?\d+(\.\d+)?$", description="local X display, e.g. ':1'")
    server_timeout: float | None = Field(100.0, gt=0)
    server_start_timeout: float = Field(300.0, gt=0)
    max_restarts: int = Field(3, ge=0)
    initialize: dict[str, Any] = Field(
        default_factory=dict, description="extra Initialize parameters, passed to the player unchanged"
    )
    build: BuildReference = None

    @field_validator("initialize")
    @classmethod
    def _no_shadowed_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(value) & CONTROLLER_KEYS)
        if clash:
            raise ValueError(
                f"keys {clash} are environment settings, not Initialize parameters: set them on environment"
            )
        return value

    @model_validator(mode="after")
    def _platform_runs_executable(self) -> EnvironmentSpec:
        if self.platform == "EGL" and not self.is_builtin:
            raise FieldError(
                "platform",
                "'EGL' only runs the builtin reference player; for a Unity build use "
                "'auto', 'CloudRendering', 'LinuxHeadlessSimulation' or 'Linux64'",
            )
        return self

    @property
    def build_name(self) -> str:
        """What names the build: the reference, or the executable's path (or 'builtin')."""
        return self.build or self.executable

    def controller_kwargs(self, render: RenderSpec | None = None) -> dict[str, Any]:
        """Keyword arguments for ``unirender.Controller`` — the one place a spec becomes a Controller.

        With ``render``, the Initialize flags for its modalities and its ``depth_format`` are added.
        """
        kwargs: dict[str, Any] = {
            "executable": self.build_name,  # a reference is resolved through the build store at launch
            "width": self.width,
            "height": self.height,
            "server": self.transport,
            "quality": self.quality,
            "platform": self.platform,
            "headless": self.headless,
            "gpu_device": self.gpu_device,
            "x_display": self.x_display,
            "server_timeout": self.server_timeout,
            "server_start_timeout": self.server_start_timeout,
            "max_restarts": self.max_restarts,
        }
        kwargs.update(self.initialize)
        if render is not None:
            kwargs["depth_format"] = render.depth_format
            kwargs.update(render.initialize_params())
        return kwargs


class CameraSpec(StrictModel):
    """A third-party camera, added with ``AddThirdPartyCamera`` after every reset."""

    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)
    position: Vec3
    rotation: Vec3 = Field(default_factory=Vec3)
    field_of_view: float = Field(90.0, gt=0, lt=180)

    _bare_rotation = field_validator("rotation", mode="before")(_rotation)

    def add_action(self) -> dict[str, Any]:
        return {
            "action": "AddThirdPartyCamera",
            "position": self.position.as_dict(),
            "rotation": self.rotation.as_dict(),
            "fieldOfView": self.field_of_view,
        }


class RenderSpec(StrictModel):
    """Which images every recorded frame carries."""

    modalities: list[Modality] = Field(default_factory=lambda: ["rgb"], min_length=1)
    depth_format: DepthFormat = "Meters"
    cameras: list[CameraSpec] = Field(default_factory=list)
    annotations: list[Literal["coco", "cameras"]] = Field(
        default_factory=list,
        description="extra files beside the images: 'coco' (COCO instance annotations per camera, needs "
        "instance_segmentation), 'cameras' (per-frame intrinsics, extrinsics and depth files as JSON)",
    )
    flow_policy: Literal["previous_step"] | None = Field(
        None,
        description="what optical flow is measured against; 'previous_step': the frame the player rendered "
        "for the previous step of the episode (actions: the first frame, right after the reset, has zero flow; "
        "poses and generators: the first pose is measured against the scene's start pose)",
    )
    allow_flat_cameras: bool = Field(False, description=ALLOW_FLAT_CAMERAS_HELP)

    @model_serializer(mode="wrap")
    def _omit_unset_flag(self, handler):
        return without_unset_flag(self, handler(self))

    @field_validator("modalities")
    @classmethod
    def _unique_modalities(cls, value: list[str]) -> list[str]:
        dup = sorted({m for m in value if value.count(m) > 1})
        if dup:
            raise ValueError(f"listed more than once: {dup}")
        return value

    @field_validator("cameras")
    @classmethod
    def _unique_camera_names(cls, value: list[CameraSpec]) -> list[CameraSpec]:
        names = [c.name for c in value]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"camera names must be unique; repeated: {dup}")
        return value

    @model_validator(mode="after")
    def _coco_needs_instances(self) -> RenderSpec:
        if "coco" in self.annotations and "instance_segmentation" not in self.modalities:
            raise FieldError(
                "annotations",
                "'coco' is made from the instance masks: add 'instance_segmentation' to modalities",
            )
        return self

    @model_validator(mode="after")
    def _flow_needs_policy(self) -> RenderSpec:
        if "flow" in self.modalities and self.flow_policy is None:
            raise FieldError(
                "flow_policy",
                "required when 'flow' is in modalities (flow is measured against a previous frame); "
                "allowed: 'previous_step'",
            )
        return self

    def initialize_params(self) -> dict[str, bool]:
        return {
            flag: (modality in self.modalities)
            for modality, flag in MODALITY_INITIALIZE_FLAG.items()
            if flag is not None
        }


class PoseSpec(StrictModel):
    position: Vec3
    rotation: Vec3 = Field(default_factory=Vec3)
    horizon: float = Field(0.0, ge=-90, le=90)
    standing: bool = True

    _bare_rotation = field_validator("rotation", mode="before")(_rotation)

    def teleport_action(self) -> dict[str, Any]:
        return {
            "action": "TeleportFull",
            "position": self.position.as_dict(),
            "rotation": self.rotation.as_dict(),
            "horizon": self.horizon,
            "standing": self.standing,
        }


class GridGenerator(StrictModel):
    """Every reachable position (thinned by ``every``) times every rotation and horizon."""

    kind: Literal["grid"]
    rotations: list[float] = Field(default_factory=lambda: [0.0, 90.0, 180.0, 270.0], min_length=1)
    horizons: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    every: int = Field(1, ge=1, description="keep every n-th reachable position")
    max_positions: int | None = Field(None, ge=1)


class RandomGenerator(StrictModel):
    """``count`` poses drawn from the reachable positions with a seeded generator."""

    kind: Literal["random"]
    count: int = Field(ge=1, le=1_000_000)
    seed: int = 0
    rotations: list[float] | None = Field(
        None, description="rotations to draw from; omitted: uniform in [0, 360)"
    )
    horizons: list[float] = Field(default_factory=lambda: [0.0], min_length=1)


Generator = Annotated[GridGenerator | RandomGenerator, Field(discriminator="kind")]


class EpisodeSpec(StrictModel):
    """One scene and what to do in it: an action sequence, poses to visit, or a pose generator.

    Frames recorded: for ``actions`` the frame after the reset plus one per action; for ``poses`` and
    generators one per pose. ``repeat`` runs the episode again (random generators draw with ``seed + i``).
    """

    scene: str = Field(min_length=1)
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)
    actions: list[str | dict[str, Any]] | None = Field(None, min_length=1)
    poses: list[PoseSpec] | None = Field(None, min_length=1)
    generator: Generator | None = None
    repeat: int = Field(1, ge=1, le=100_000)

    @field_validator("actions")
    @classmethod
    def _actions_have_names(cls, value: list[str | dict[str, Any]] | None):
        if value is None:
            return value
        for i, action in enumerate(value):
            name = action if isinstance(action, str) else action.get("action")
            if not isinstance(name, str) or not name:
                raise ValueError(f"item {i}: an action is a name or a mapping with an 'action' name")
            if name in ("Reset", "Initialize"):
                raise ValueError(f"item {i}: {name!r} is issued by the job itself")
        return value

    @model_validator(mode="after")
    def _exactly_one_source(self) -> EpisodeSpec:
        given = [k for k in ("actions", "poses", "generator") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'actions', 'poses', 'generator'"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self

    def action_dicts(self) -> list[dict[str, Any]]:
        return [{"action": a} if isinstance(a, str) else dict(a) for a in self.actions or []]

    @property
    def known_frame_count(self) -> int | None:
        """Frames per repeat, or None when it depends on the scene (grid over reachable positions)."""
        if self.actions is not None:
            return len(self.actions) + 1
        if self.poses is not None:
            return len(self.poses)
        if isinstance(self.generator, RandomGenerator):
            return self.generator.count
        return None


class VideoSpec(StrictModel):
    """``output.video``: mp4 files of every episode beside its frames (``videos/<unit>/<camera>.<modality>.mp4``,
    or one ``tiled.mp4``), encoded while the job renders (docs/video.md)."""

    fps: float = Field(30, gt=0, description="frames per second of the videos")
    modalities: list[Modality] | None = Field(
        None, min_length=1, description="which rendered modalities get a video (default: every one rendered)"
    )
    cameras: list[str] | None = Field(
        None,
        min_length=1,
        description="which cameras get a video: 'agent' (AI2-THOR's own), a render.cameras name, an ML-Agents "
        "sensor name (every agent's) or '<sensor>.<agent>' (default: all)",
    )
    tile: bool = Field(False, description="one tiled video per episode (the contact sheet's layout) instead")
    quality: Literal["low", "medium", "high", "best"] = Field(
        "high", description="x264's constant rate factor 28 / 23 / 18 / 12"
    )
    codec: str = Field("h264", min_length=1, description="h264, hevc, av1, vp9 or any FFmpeg video encoder")
    depth_range: tuple[float, float] | None = Field(
        None, description="[near, far] for depth's colour scale, one for the whole video (default: per frame)"
    )

    @field_validator("depth_range")
    @classmethod
    def _ordered_range(cls, value):
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"near must be below far, got {list(value)}")
        return value


class OutputSpec(StrictModel):
    directory: str = Field("out", min_length=1)
    format: Literal["png", "npz", "webdataset"] = "png"
    depth_encoding: Literal["npy", "png16"] = Field(
        "npy", description="png format: depth as float32 .npy (exact) or 16-bit PNG in millimetres"
    )
    frames_per_shard: int = Field(
        100,
        ge=1,
        description="frames per shard: the unit of commit (a stop loses at most one shard); npz / webdataset "
        "write one archive per shard",
    )
    compress: bool = Field(
        True, description="npz: deflate the arrays (smaller; see docs/jobs.md for figures)"
    )
    metadata: Literal["all", "none"] | list[str] = Field(
        "all",
        description="per-frame metadata kept: 'all', 'none', or key paths such as 'agent', 'objects.position' "
        "(a path into a list of mappings keeps that key of every item)",
    )
    png_compress_level: int = Field(1, ge=0, le=9)
    video: VideoSpec | None = Field(None, description="mp4 videos of the episodes beside the frames")

    @model_serializer(mode="wrap")
    def _omit_unset_video(self, handler):
        # Specs without videos dump (and so hash, and land in manifests) byte for byte as before the field.
        data = handler(self)
        if isinstance(data, dict) and data.get("video") is None:
            data.pop("video", None)
        return data

    @model_validator(mode="after")
    def _depth_encoding_fits_format(self) -> OutputSpec:
        if self.depth_encoding == "png16" and self.format != "png":
            raise FieldError("depth_encoding", f"'png16' needs format 'png' (format is {self.format!r})")
        return self


class JobSpecBase(StrictModel):
    """What every family's job spec shares: ``version``, ``name``, ``environment``, ``episodes``, ``output``,
    ``workers``, ``max_episode_retries`` (declared in each family's model, in its own order: a spec's dump, key order
    included, is what a dataset's manifest writes), the ``workers`` check and the content hash."""

    family: ClassVar[str]  # the simulator family (unirender.simulator); spec.families maps it
    # What does not decide the dataset's bytes: the environment's timeouts and restarts, and the section whose
    # ``allow_flat_cameras`` says whether a job may go on, not what it writes.
    volatile_environment_keys: ClassVar[tuple[str, ...]]
    flat_cameras_section: ClassVar[str]

    def __init_subclass__(cls, *, family: str, volatile_environment_keys: tuple[str, ...],
                          flat_cameras_section: str, **kwargs: Any) -> None:  # fmt: skip
        """A family's job model names its family and its hash policy as class parameters."""
        super().__init_subclass__(**kwargs)
        cls.family, cls.flat_cameras_section = family, flat_cameras_section
        cls.volatile_environment_keys = volatile_environment_keys

    @field_validator("workers", check_fields=False)
    @classmethod
    def _positive_workers(cls, value):
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1, or 'auto'")
        return value

    def content_hash(self, build_digest: str | None = None) -> str:
        """Hash of everything that decides the dataset's bytes (not where it goes, how many workers, timeouts).

        ``build_digest``: the digest of the build's bytes (jobs pass it), which then stands for its path or name;
        without it (the builtin player, or a caller that does not know it) the hash is as it always was."""
        data = self.model_dump(mode="json")
        hash_build(data["environment"], build_digest)
        data["output"].pop("directory")
        data[self.flat_cameras_section].pop("allow_flat_cameras", None)
        for key in ("workers", "max_episode_retries", "name"):
            data.pop(key)
        for key in self.volatile_environment_keys:
            data["environment"].pop(key)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


class JobSpec(
    JobSpecBase,
    family=AI2THOR,
    volatile_environment_keys=("server_timeout", "server_start_timeout", "max_restarts"),
    flat_cameras_section="render",
):
    """A rendering job: an environment, what to render, the episodes, and where to write them."""

    version: Literal[1] = 1
    name: str = Field("job", pattern=r"^[A-Za-z0-9_.\-]+$", max_length=100)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    render: RenderSpec = Field(default_factory=RenderSpec)
    episodes: list[EpisodeSpec] = Field(min_length=1)
    output: OutputSpec = Field(default_factory=OutputSpec)
    workers: int | Literal["auto"] = Field("auto", description="players run side by side")
    max_episode_retries: int = Field(2, ge=0, le=100, description="per episode, after a player crash")

    @model_validator(mode="after")
    def _combinations(self) -> JobSpec:
        if self.environment.headless:
            raise FieldError(
                "environment.headless",
                "true turns image rendering off (renderImage=false on every step, as in AI2-THOR); a "
                "rendering job needs false (unirender renders offscreen without a window anyway)",
            )
        shadowed = sorted(set(self.environment.initialize) & set(self.render.initialize_params()))
        if shadowed:
            raise FieldError(
                f"environment.initialize.{shadowed[0]}", "set by render.modalities; remove it here"
            )
        if not self.environment.is_builtin and "flow" in self.render.modalities and self.render.cameras:
            # AI2-THOR builds never fill third-party flow (protocol.md 4.2): a camera could not deliver it.
            raise FieldError(
                "render.modalities",
                "'flow' cannot be produced for third-party cameras by a Unity build; drop 'flow' or the "
                "cameras (the builtin player produces both)",
            )
        return self

    @model_validator(mode="after")
    def _video_within_render(self) -> JobSpec:
        video = self.output.video
        if video is None:
            return self
        extra = [m for m in video.modalities or [] if m not in self.render.modalities]
        if extra:
            raise FieldError("output.video.modalities", f"{extra} not rendered (render.modalities: "
                                                          f"{self.render.modalities})")  # fmt: skip
        known = ["agent", *(c.name for c in self.render.cameras)]
        unknown = [c for c in video.cameras or [] if c not in known]
        if unknown:
            raise FieldError("output.video.cameras", f"{unknown}: no such camera (cameras: {known})")
        return self

    def controller_kwargs(self) -> dict[str, Any]:
        return self.environment.controller_kwargs(self.render)
