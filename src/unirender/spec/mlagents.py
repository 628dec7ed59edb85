"""ML-Agents job specs: ``environment.protocol: mlagents`` (see ``docs/mlagents.md``, "Specs and jobs").

An ML-Agents job launches a game that speaks the ML-Agents communicator (a Unity build or the builtin reference
player), and per episode: starts a fresh game seeded with the episode's seed, sets its environment parameters
(numbers or samplers, written as ML-Agents' own ``environment_parameters`` config), resets, and takes ``steps``
steps with an action policy (seeded random, zeros, or a scripted list). Every frame (the one after the reset
and one per step) records the chosen sensors of every agent plus rewards, actions and decision/terminal flags.

The models share the AI2-THOR job's ``output``, ``workers``, ``max_episode_retries`` and ``name``, and the loader
(:func:`unirender.spec.load_spec`) picks them when ``environment.protocol`` is ``mlagents``, with the same
file:line and "did you mean" errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from unirender.simulator import MLAGENTS
from unirender.spec.errors import FieldError, did_you_mean
from unirender.spec.models import (
    ALLOW_FLAT_CAMERAS_HELP,
    BUILTIN,
    BuildEnvironment,
    BuildReference,
    JobSpecBase,
    OutputSpec,
    StrictModel,
    without_unset_flag,
)
from unirender.spec.sources import raise_problems

if TYPE_CHECKING:
    from unirender.platforms import PlatformRequest

# What the builtin reference player's ML-Agents game (ReachTarget) has; checked at load time for it.
BUILTIN_SENSORS = ("CameraSensor", "VectorSensor_size8")
BUILTIN_BEHAVIORS = ("ReachTarget?team=0",)
MLAgentsPlatform = Literal["auto", "Linux64", "CloudRendering", "EGL"]


class UniformParameters(StrictModel):
    min_value: float
    max_value: float

    @model_validator(mode="after")
    def _ordered(self) -> UniformParameters:
        if self.min_value > self.max_value:
            raise FieldError("max_value", f"must be >= min_value ({self.min_value})")
        return self


class GaussianParameters(StrictModel):
    mean: float
    st_dev: float = Field(ge=0)


class MultiRangeParameters(StrictModel):
    intervals: list[tuple[float, float]] = Field(min_length=1)

    @field_validator("intervals")
    @classmethod
    def _ordered(cls, value: list[tuple[float, float]]) -> list[tuple[float, float]]:
        for i, (a, b) in enumerate(value):
            if a > b:
                raise ValueError(f"interval {i}: [{a}, {b}] has min > max")
        if sum(b - a for a, b in value) <= 0:
            raise ValueError("the intervals have no width to draw from")
        return value


class _SamplerBase(StrictModel):
    seed: int | None = Field(
        None, description="added to the episode's seed; omitted: the parameter's position in the mapping"
    )


class UniformSampler(_SamplerBase):
    sampler_type: Literal["uniform"]
    sampler_parameters: UniformParameters


class GaussianSampler(_SamplerBase):
    sampler_type: Literal["gaussian"]
    sampler_parameters: GaussianParameters


class MultiRangeSampler(_SamplerBase):
    sampler_type: Literal["multirangeuniform"]
    sampler_parameters: MultiRangeParameters


SamplerSpec = Annotated[
    UniformSampler | GaussianSampler | MultiRangeSampler, Field(discriminator="sampler_type")
]
SAMPLER_TYPES = ("uniform", "gaussian", "multirangeuniform")


def _number_or_sampler(value: Any) -> str:
    return "sampler" if isinstance(value, dict | _SamplerBase) else "number"


# A number or a sampler mapping, told apart by type so that an error names only what was meant.
ParameterValue = Annotated[
    Annotated[float, Tag("number")] | Annotated[SamplerSpec, Tag("sampler")],
    Discriminator(_number_or_sampler),
    BeforeValidator(lambda value: _known_tag(value, "sampler_type", SAMPLER_TYPES)),
]


def _known_tag(value: Any, key: str, allowed: tuple[str, ...]) -> None:
    tag = value.get(key) if isinstance(value, dict) else None
    if isinstance(tag, str) and tag not in allowed:
        guess = did_you_mean(tag, list(allowed))
        hint = f"did you mean {guess!r}? " if guess else ""
        raise ValueError(f"{key} {tag!r} is unknown; {hint}(allowed: {', '.join(allowed)})")
    return value


def _sampler(value: SamplerSpec, seed: int):
    from unirender.protocol.mlagents.side_channels import Sampler

    p = value.sampler_parameters
    if isinstance(value, UniformSampler):
        return Sampler.uniform(p.min_value, p.max_value, seed)
    if isinstance(value, GaussianSampler):
        return Sampler.gaussian(p.mean, p.st_dev, seed)
    return Sampler.multirange_uniform(p.intervals, seed)


def resolve_parameters(parameters: dict[str, ParameterValue], episode_seed: int) -> dict[str, Any]:
    """``{key: float | Sampler}`` for the controller: each sampler seeded from the episode's seed, so an episode
    draws the same values on any worker and on a resume (and two parameters never share a draw sequence)."""
    out: dict[str, Any] = {}
    for i, (key, value) in enumerate(parameters.items()):
        if isinstance(value, int | float):
            out[key] = float(value)
        else:
            offset = value.seed if value.seed is not None else i
            out[key] = _sampler(value, (episode_seed + offset) % 2**31)  # the wire's seed is an int32
    return out


class MLAgentsEnvironmentSpec(BuildEnvironment):
    """What to launch: maps one to one onto :class:`unirender.mlagents.MLAgentsController` arguments."""

    protocol: Literal["mlagents"]
    executable: str = Field(
        BUILTIN, min_length=1, description="path to a Unity ML-Agents build, or 'builtin'"
    )
    platform: MLAgentsPlatform = "auto"
    width: int = Field(84, ge=1, le=8192)
    height: int = Field(84, ge=1, le=8192)
    time_scale: float = Field(20.0, ge=1.0, le=1000.0, description="Unity clamps it to >= 1")
    quality_level: int | None = Field(None, ge=0, le=100)
    x_display: str | None = Field(None, pattern=r"^:?\d+(\.\d+)?$")
    gpu_device: int | None = Field(None, ge=0)
    timeout: float = Field(60.0, gt=0, description="seconds to wait for any one step")
    start_timeout: float = Field(120.0, gt=0)
    max_restarts: int = Field(3, ge=0)
    layout: Literal["HWC", "CHW"] | None = None
    args: list[str] = Field(default_factory=list, description="extra command-line arguments for the game")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables for the game")
    environment_parameters: dict[str, ParameterValue] = Field(
        default_factory=dict, description="numbers or ML-Agents samplers; episodes may override keys"
    )
    build: BuildReference = None

    @model_validator(mode="after")
    def _platform_runs_executable(self) -> MLAgentsEnvironmentSpec:
        if self.platform == "EGL" and not self.is_builtin:
            raise FieldError(
                "platform", "'EGL' only runs the builtin reference player; use 'auto' for a build"
            )
        return self

    @property
    def build_name(self) -> str:
        """What names the build: the reference, or the executable's path (or 'builtin')."""
        return self.build or self.executable

    def controller_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``MLAgentsController`` (without the per-episode seed and parameters)."""
        return {
            "executable": self.build_name,  # a reference is resolved through the build store at launch
            "width": self.width,
            "height": self.height,
            "time_scale": self.time_scale,
            "quality_level": self.quality_level,
            "platform": self.platform,
            "x_display": self.x_display,
            "gpu_device": self.gpu_device,
            "timeout": self.timeout,
            "start_timeout": self.start_timeout,
            "max_restarts": self.max_restarts,
            "layout": self.layout,
            "args": list(self.args),
            "env": dict(self.env),
        }


class ScriptedAction(StrictModel):
    """One step's actions: a list is given to every agent, a list of lists is one row per agent (in decision
    order; an agent beyond the rows gets the last row)."""

    continuous: list[float] | list[list[float]] | None = None
    discrete: list[int] | list[list[int]] | None = None


class RandomPolicy(StrictModel):
    kind: Literal["random"]
    seed: int = Field(0, description="with the episode's seed and the step number: each step's draw is fixed")


class ZerosPolicy(StrictModel):
    kind: Literal["zeros"]


class ScriptedPolicy(StrictModel):
    kind: Literal["scripted"]
    actions: list[ScriptedAction] = Field(min_length=1)


POLICY_KINDS = ("random", "zeros", "scripted")
Policy = Annotated[RandomPolicy | ZerosPolicy | ScriptedPolicy, Field(discriminator="kind")]


class MLAgentsEpisodeSpec(StrictModel):
    """``steps`` steps after a reset, with one action policy. ``repeat`` runs it again with seed + i."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)
    steps: int | None = Field(None, ge=0, le=1_000_000, description="omitted: a scripted policy's length")
    seed: int = Field(0, ge=0, description="the game's seed (Unity's Random.InitState) and the samplers'")
    policy: Policy = Field(default_factory=lambda: RandomPolicy(kind="random"))
    environment_parameters: dict[str, ParameterValue] = Field(default_factory=dict)
    repeat: int = Field(1, ge=1, le=100_000)

    @field_validator("policy", mode="before")
    @classmethod
    def _bare_kind(cls, value: Any) -> Any:
        value = {"kind": value} if isinstance(value, str) else value  # `policy: zeros`
        _known_tag(value, "kind", POLICY_KINDS)
        return value

    @model_validator(mode="after")
    def _steps_given(self) -> MLAgentsEpisodeSpec:
        scripted = self.policy.actions if isinstance(self.policy, ScriptedPolicy) else None
        if self.steps is None:
            if scripted is None:
                raise FieldError("steps", "required (how many steps to take after the reset)")
            self.steps = len(scripted)
        elif scripted is not None and self.steps > len(scripted):
            raise FieldError(
                "steps", f"{self.steps} steps but the scripted policy lists {len(scripted)} actions"
            )
        return self

    @property
    def known_frame_count(self) -> int:
        return int(self.steps) + 1  # the reset's frame, then one per step

    @property
    def scene(self) -> str:
        """The label the manifest lists for the episode's units (ML-Agents games have no scenes to choose)."""
        return self.name or "episode"


class RecordSpec(StrictModel):
    """What every frame keeps: the sensors (cameras become images, others float vectors in the metadata) of the
    behaviors listed (omitted: all)."""

    sensors: list[str] | None = Field(None, min_length=1, description="sensor names; omitted: all")
    behaviors: list[str] | None = Field(None, min_length=1, description="behavior names; omitted: all")
    allow_flat_cameras: bool = Field(False, description=ALLOW_FLAT_CAMERAS_HELP)

    @model_serializer(mode="wrap")
    def _omit_unset_flag(self, handler):
        return without_unset_flag(self, handler(self))


class MLAgentsJobSpec(
    JobSpecBase,
    family=MLAGENTS,
    volatile_environment_keys=("timeout", "start_timeout", "max_restarts"),  # time_scale stays: a game may use it
    flat_cameras_section="record",
):
    # An ML-Agents job: a game, what each frame records, the episodes, where to write them (no docstring: the
    # model's JSON schema, the service's OpenAPI document, stays as it was).
    version: Literal[1] = 1
    name: str = Field("job", pattern=r"^[A-Za-z0-9_.\-]+$", max_length=100)
    environment: MLAgentsEnvironmentSpec
    record: RecordSpec = Field(default_factory=RecordSpec)
    episodes: list[MLAgentsEpisodeSpec] = Field(min_length=1)
    output: OutputSpec = Field(default_factory=OutputSpec)
    workers: int | Literal["auto"] = Field("auto", description="games run side by side")
    max_episode_retries: int = Field(2, ge=0, le=100)

    def controller_kwargs(self) -> dict[str, Any]:
        return self.environment.controller_kwargs()


def check_builtin_record(spec: MLAgentsJobSpec) -> None:
    """With the builtin player, the recorded sensors and behaviors must be ones its game has (with a "did you
    mean"); a Unity build's are checked against its behaviors when its first episode starts."""
    if not spec.environment.is_builtin:
        return
    problems = []
    for field, names, known in (
        ("sensors", spec.record.sensors, BUILTIN_SENSORS),
        ("behaviors", spec.record.behaviors, BUILTIN_BEHAVIORS),
    ):
        for i, name in enumerate(names or []):
            if name not in known:
                guess = did_you_mean(name, list(known))
                hint = f"; did you mean {guess!r}?" if guess else f"; the builtin game has {', '.join(known)}"
                problems.append((f"record.{field}.{i}", f"{name!r} is not in the builtin game{hint}"))
    raise_problems(spec, problems)


def platform_request(spec: MLAgentsJobSpec) -> PlatformRequest:
    """The :class:`~unirender.platforms.PlatformRequest` of the job's games (their cameras always render)."""
    from unirender.platforms import PlatformRequest

    return PlatformRequest.of(spec.environment, headless=False, builtin=spec.environment.is_builtin)
