"""WebGL job specs: ``environment.protocol: webgl`` (see ``docs/webgl.md``, "Specs and datasets").

A WebGL job boots a Unity WebGL build folder in headless Chromium (the ``webgl`` family's ``WebGLController``)
and, per episode repeat, on a freshly booted page: the frame after boot, then one frame per declared action the
episode lists. Every frame records the canvas (``rgb``) and, in its metadata, what the game emitted through
``window.unirender.emit`` during the step (its messages, their summed ``reward``, ``done`` and merged mappings).

The environment model maps one to one onto ``WebGLController``'s arguments (:meth:`controller_kwargs`); the
loader (:func:`unirender.spec.load_spec`) picks these models when ``environment.protocol`` is ``webgl``, with the
same file:line and "did you mean" errors as the other families. Key names and points are checked here, at load
time; the spec layer cannot import the family's own modules, so the key names are listed again below (a test
holds them equal to ``unirender.webgl.actions``'s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from unirender.simulator import WEBGL
from unirender.spec.errors import FieldError, did_you_mean
from unirender.spec.models import (
    ALLOW_FLAT_CAMERAS_HELP,
    BUILD_HELP,
    JobSpecBase,
    OutputSpec,
    StrictModel,
    check_build_reference,
    without_unset_build,
    without_unset_flag,
)
from unirender.spec.sources import raise_problems

if TYPE_CHECKING:
    from unirender.platforms import PlatformRequest

# The DOM key names unirender.webgl.actions can press (besides one letter or digit).
KEY_NAMES = ("ArrowLeft", "ArrowUp", "ArrowRight", "ArrowDown", "Space", " ", "Enter", "Escape", "Tab", "Backspace",
             "Shift", "Control", "Alt")  # fmt: skip
NOOP = "noop"  # always declared: a step without input


def _check_key(key: str) -> str:
    if key in KEY_NAMES or (len(key) == 1 and key.isalnum()):
        return key
    guess = did_you_mean(key, [k for k in KEY_NAMES if k != " "])
    hint = f"did you mean {guess!r}? " if guess else ""
    raise ValueError(f"{key!r} is not a key unirender can press; {hint}(keys: {', '.join(KEY_NAMES[:-1])}, "
                     "Alt, or one letter or digit)")  # fmt: skip


class WebGLAction(StrictModel):
    """One declared action (docs/webgl.md, "Actions"): keys held for the step's frames, a click or a pointer
    move (canvas pixels, origin top left), and/or a Unity ``SendMessage`` before the frames."""

    key: str | None = None
    keys: list[str] | None = None
    click: tuple[int, int] | None = None
    button: Literal["left", "middle", "right"] | None = None
    move: tuple[int, int] | None = None
    send_message: list[str | int | float] | None = Field(
        None, min_length=2, max_length=3, description="[gameObject, method] or [gameObject, method, argument]"
    )

    @field_validator("click", "move", mode="before")
    @classmethod
    def _point(cls, value):  # a JSON list is a point: strict validation (the service's bodies) takes no list for a tuple
        return tuple(value) if isinstance(value, list) else value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return None if value is None else _check_key(value)

    @field_validator("keys")
    @classmethod
    def _keys(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_check_key(k) for k in value]

    @field_validator("send_message")
    @classmethod
    def _message(cls, value):
        if value is not None and not all(isinstance(v, str) for v in value[:2]):
            raise ValueError("gameObject and method are strings")
        return value

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler):  # a dump (a manifest, the hash) names only the fields an action sets
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    def mapping(self) -> dict[str, Any]:
        """The action as ``WebGLController`` takes it (unset fields left out)."""
        return {k: (list(v) if isinstance(v, tuple | list) else v) for k, v in self.model_dump().items()}


class WebGLEnvironmentSpec(StrictModel):
    """What to launch: maps one to one onto :class:`unirender.webgl.WebGLController` arguments (``executable``
    is its ``build`` folder; ``build`` a store reference to one)."""

    protocol: Literal["webgl"]
    executable: str | None = Field(None, min_length=1, description="the build folder (the one holding Build/)")
    build: str | None = Field(None, min_length=1, description=BUILD_HELP)
    platform: Literal["auto", "WebGL"] = "WebGL"
    width: int = Field(300, ge=1, le=8192)
    height: int = Field(300, ge=1, le=8192)
    actions: dict[str, WebGLAction] = Field(
        default_factory=dict, description="named actions: episodes list them; 'noop' is always declared"
    )
    fps: float = Field(60.0, gt=0, le=1000, description="the page's virtual clock: frames per virtual second")
    frames_per_step: int = Field(1, ge=1, le=10_000)
    readback: Literal["png", "pixels", "screenshot"] = "png"
    host_script: str = Field("", description="JavaScript run before the build's loader (host objects its jslib calls)")
    wait_for: Literal["instance", "ready"] = Field(
        "instance", description="boot ends when createUnityInstance resolves, or when the page calls unirender.ready()"
    )
    reset_message: list[str | int | float] | None = Field(
        None, min_length=2, max_length=3, description="a SendMessage that starts an episode; omitted: a page reload"
    )
    config: dict[str, Any] = Field(default_factory=dict, description="extra createUnityInstance config entries")
    gpu_device: int | None = Field(None, ge=0)
    boot_timeout: float = Field(120.0, gt=0, description="seconds for the build to boot")
    step_timeout: float = Field(60.0, gt=0, description="seconds for any one step")
    max_restarts: int = Field(3, ge=0)

    _build_reference = field_validator("build")(classmethod(lambda cls, value: check_build_reference(value)))

    @model_serializer(mode="wrap")
    def _omit_unset_build(self, handler):
        return without_unset_build(handler(self))

    @model_validator(mode="after")
    def _one_build_and_actions_on_canvas(self) -> WebGLEnvironmentSpec:
        if (self.build is None) == (self.executable is None):
            raise FieldError("executable", "give either 'executable' (the build folder) or 'build' (a store "
                                            "reference), exactly one")  # fmt: skip
        if NOOP in self.actions:
            raise FieldError(f"actions.{NOOP}", "'noop' is always declared (a step without input)")
        for name, action in self.actions.items():
            for field in ("click", "move"):
                point = getattr(action, field)
                if point is not None and not (0 <= point[0] < self.width and 0 <= point[1] < self.height):
                    raise FieldError(f"actions.{name}.{field}",
                                      f"{list(point)} is off the {self.width}x{self.height} canvas")  # fmt: skip
        return self

    @property
    def x_display(self) -> None:  # PlatformRequest.of reads it: a browser needs no X display
        return None

    @property
    def is_builtin(self) -> bool:
        return False

    @property
    def build_name(self) -> str:
        """What names the build for the build store and ``spec check``: the reference, or a path inside the
        folder (``<folder>/Build``) so that the folder it stands in is the whole build."""
        if self.build is not None:
            return self.build
        return f"{str(self.executable).rstrip('/')}/Build"

    @property
    def action_names(self) -> tuple[str, ...]:
        return (NOOP, *self.actions)

    def controller_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``WebGLController`` (``executable``: its ``build`` folder, or the reference that
        the family's launcher resolves through the build store)."""
        return {
            "executable": self.build or self.executable,
            "width": self.width,
            "height": self.height,
            "actions": {name: action.mapping() for name, action in self.actions.items()},
            "fps": self.fps,
            "frames_per_step": self.frames_per_step,
            "readback": self.readback,
            "host_script": self.host_script,
            "wait_for": self.wait_for,
            "reset_message": list(self.reset_message) if self.reset_message else None,
            "config": dict(self.config),
            "platform": self.platform,
            "gpu_device": self.gpu_device,
            "boot_timeout": self.boot_timeout,
            "step_timeout": self.step_timeout,
            "max_restarts": self.max_restarts,
        }


class WebGLEpisodeSpec(StrictModel):
    """A freshly booted page, then one step per listed action (declared names, or ``noop``). ``repeat`` runs it
    again (on another fresh page)."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)
    actions: list[str] = Field(default_factory=list, max_length=1_000_000)
    repeat: int = Field(1, ge=1, le=100_000)

    @property
    def known_frame_count(self) -> int:
        return len(self.actions) + 1  # the boot's frame, then one per action

    @property
    def scene(self) -> str:
        return self.name or "episode"


class WebGLRecordSpec(StrictModel):
    """What every frame keeps besides the canvas: the emitted messages (always), and whether a flat first
    canvas may go on."""

    allow_flat_cameras: bool = Field(False, description=ALLOW_FLAT_CAMERAS_HELP)

    @model_serializer(mode="wrap")
    def _omit_unset_flag(self, handler):
        return without_unset_flag(self, handler(self))


class WebGLJobSpec(
    JobSpecBase,
    family=WEBGL,
    volatile_environment_keys=("boot_timeout", "step_timeout", "max_restarts"),
    flat_cameras_section="record",
):
    # A WebGL job: a build, the episodes of declared actions, where to write them (no docstring: as the other
    # families' job models).
    version: Literal[1] = 1
    name: str = Field("job", pattern=r"^[A-Za-z0-9_.\-]+$", max_length=100)
    environment: WebGLEnvironmentSpec
    record: WebGLRecordSpec = Field(default_factory=WebGLRecordSpec)
    episodes: list[WebGLEpisodeSpec] = Field(min_length=1)
    output: OutputSpec = Field(default_factory=OutputSpec)
    workers: int | Literal["auto"] = Field("auto", description="browsers run side by side")
    max_episode_retries: int = Field(2, ge=0, le=100)

    def controller_kwargs(self) -> dict[str, Any]:
        return self.environment.controller_kwargs()


def check_episode_actions(spec: WebGLJobSpec) -> None:
    """Every action an episode lists is declared (``environment.actions``, or ``noop``), with a "did you mean"."""
    known = list(spec.environment.action_names)
    problems = []
    for i, episode in enumerate(spec.episodes):
        for j, name in enumerate(episode.actions):
            if name not in known:
                guess = did_you_mean(name, known)
                hint = f"; did you mean {guess!r}?" if guess else f"; declared: {', '.join(known)}"
                problems.append((f"episodes.{i}.actions.{j}", f"{name!r} is not a declared action{hint}"))
    raise_problems(spec, problems)


def platform_request(spec: WebGLJobSpec) -> PlatformRequest:
    """The request of the job's browsers (the WebGL platform: no display, SwiftShader or the GPU)."""
    from unirender.platforms import PlatformRequest

    return PlatformRequest.of(spec.environment, headless=True, builtin=False)
