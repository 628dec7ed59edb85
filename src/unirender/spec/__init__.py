"""Declarative specs: environments and rendering jobs, loaded from YAML/JSON/TOML and validated."""

from unirender.spec.errors import format_errors, validation_problems
from unirender.spec.loader import (
    check_actions,
    check_builtin_scenes,
    load_environment,
    load_spec,
    read_document,
    spec_warnings_text,
)
from unirender.spec.mlagents import MLAgentsEnvironmentSpec, MLAgentsEpisodeSpec, MLAgentsJobSpec
from unirender.spec.models import (
    MODALITIES,
    CameraSpec,
    EnvironmentSpec,
    EpisodeSpec,
    GridGenerator,
    JobSpec,
    OutputSpec,
    PoseSpec,
    RandomGenerator,
    RenderSpec,
)

__all__ = [
    "MODALITIES",
    "CameraSpec",
    "EnvironmentSpec",
    "EpisodeSpec",
    "GridGenerator",
    "JobSpec",
    "MLAgentsEnvironmentSpec",
    "MLAgentsEpisodeSpec",
    "MLAgentsJobSpec",
    "OutputSpec",
    "PoseSpec",
    "RandomGenerator",
    "RenderSpec",
    "check_actions",
    "check_builtin_scenes",
    "format_errors",
    "spec_warnings_text",
    "validation_problems",
    "load_environment",
    "load_spec",
    "read_document",
]
