"""The spec layer's family registry: ``environment.protocol`` -> that family's models and load-time hooks.

The loader picks the job model by ``environment.protocol`` from :data:`SPEC_FAMILIES` (AI2-THOR when absent), and
the shared checks and the platform resolver ask a loaded spec's family (``spec.family``) here, never its type. A
third family adds its models and one :class:`SpecFamily` line here (docs/internals.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from unirender.platforms import PlatformRequest

from unirender.simulator import AI2THOR, MLAGENTS, WEBGL
from unirender.spec import ai2thor, mlagents, webgl
from unirender.spec.models import EnvironmentSpec, JobSpec


def _nothing(spec: Any) -> None:
    return None


def _no_warnings(spec: Any) -> list[tuple[str, str]]:
    return []


def _declared_platform(spec: Any) -> str:
    return spec.environment.platform


@dataclass(frozen=True)
class SpecFamily:
    """One family's spec: its models and what is checked once a spec of it is loaded."""

    name: str
    job_model: type[BaseModel]
    environment_model: type[BaseModel]
    # Whether the environment model has the ``protocol`` field: AI2-THOR's does not (an explicit
    # ``protocol: ai2thor`` is removed before validation, so its models and content hash stay as they were).
    protocol_field: bool
    check_loaded: Callable[[Any], None] = _nothing  # right after validation: names the builtin player has
    check_builtin_scenes: Callable[[Any], None] = _nothing
    check_actions: Callable[[Any], list[tuple[str, str]]] = _no_warnings  # warnings; raises for the builtin
    platform_request: Callable[[Any], PlatformRequest] = ai2thor.platform_request
    platform_name: Callable[[Any], str] = _declared_platform  # the platform the job's players are resolved for


SPEC_FAMILIES: dict[str, SpecFamily] = {
    AI2THOR: SpecFamily(
        AI2THOR,
        JobSpec,
        EnvironmentSpec,
        protocol_field=False,
        check_builtin_scenes=ai2thor.check_builtin_scenes,
        check_actions=ai2thor.check_action_names,
        platform_name=ai2thor.platform_name,
    ),
    MLAGENTS: SpecFamily(
        MLAGENTS,
        mlagents.MLAgentsJobSpec,
        mlagents.MLAgentsEnvironmentSpec,
        protocol_field=True,
        check_loaded=mlagents.check_builtin_record,
        platform_request=mlagents.platform_request,
    ),
    WEBGL: SpecFamily(WEBGL, webgl.WebGLJobSpec, webgl.WebGLEnvironmentSpec, protocol_field=True,
                      check_loaded=webgl.check_episode_actions, platform_request=webgl.platform_request),
}
JOB_MODELS: tuple[type[BaseModel], ...] = tuple(f.job_model for f in SPEC_FAMILIES.values())
ENVIRONMENT_MODELS: tuple[type[BaseModel], ...] = tuple(f.environment_model for f in SPEC_FAMILIES.values())


def spec_family(spec_or_name: Any) -> SpecFamily:
    """The family of a loaded job spec (its ``family``) or of a protocol name."""
    name = spec_or_name if isinstance(spec_or_name, str) else spec_or_name.family
    return SPEC_FAMILIES[name]
