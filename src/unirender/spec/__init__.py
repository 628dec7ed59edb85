"""Declarative specs: environments and rendering jobs, loaded from YAML/JSON/TOML and validated."""

from unirender.spec.loader import check_builtin_scenes, load_environment, load_spec, read_document
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
    "OutputSpec",
    "PoseSpec",
    "RandomGenerator",
    "RenderSpec",
    "check_builtin_scenes",
    "load_environment",
    "load_spec",
    "read_document",
]
