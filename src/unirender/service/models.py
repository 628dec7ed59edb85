"""Request bodies of the client API, built from the declarative-jobs schema (``unirender.spec``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from unirender.errors import SpecError
from unirender.spec import EnvironmentSpec, EpisodeSpec, RenderSpec


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(_Body):
    """POST /v1/sessions."""

    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    render: RenderSpec = Field(default_factory=RenderSpec, description="modalities the player renders")
    scene: str | None = Field(None, min_length=1, description="first scene; default: the player's first")
    auto_restart: bool = Field(False, description="restart the player if it crashes (the episode is lost)")


class ResetBody(_Body):
    """POST /v1/sessions/{id}/reset: a scene and Initialize parameters, as ``Controller.reset``."""

    model_config = ConfigDict(extra="allow")
    scene: str | None = Field(None, min_length=1)


class RenderRequest(_Body):
    """POST /v1/render: one episode rendered on a temporary player, all frames in the response."""

    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    render: RenderSpec = Field(default_factory=RenderSpec)
    episode: EpisodeSpec


def validate_body(model: type[BaseModel], data: Any):
    """pydantic validation with errors as ``SpecError`` key paths (-> 422 ``invalid_spec``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [(".".join(str(p) for p in e["loc"]) or "(body)", e["msg"]) for e in exc.errors()]
        errors = list(dict.fromkeys(errors))
        raise SpecError(
            "invalid request body:\n" + "\n".join(f"  {p}: {m}" for p, m in errors), errors
        ) from None
