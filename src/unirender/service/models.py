"""Request bodies of the client API, built from the declarative-jobs schema (``unirender.spec``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from unirender.errors import SpecError
from unirender.spec import EnvironmentSpec, EpisodeSpec, RenderSpec, format_errors, validation_problems


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(StrictBody):
    """POST /v1/sessions."""

    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    render: RenderSpec = Field(default_factory=RenderSpec, description="modalities the player renders")
    scene: str | None = Field(None, min_length=1, description="first scene; default: the player's first")
    auto_restart: bool = Field(False, description="restart the player if it crashes (the episode is lost)")


class ResetBody(StrictBody):
    """POST /v1/sessions/{id}/reset: a scene and Initialize parameters, as ``Controller.reset``."""

    model_config = ConfigDict(extra="allow")
    scene: str | None = Field(None, min_length=1)


class RenderRequest(StrictBody):
    """POST /v1/render: one episode rendered on a temporary player, all frames in the response."""

    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    render: RenderSpec = Field(default_factory=RenderSpec)
    episode: EpisodeSpec


# Problems listed in one 422: a body of a million bad items must not become a response of a million lines.
MAX_REPORTED_PROBLEMS = 20


def validate_body(model: type[BaseModel], data: Any):
    """Strict pydantic validation (no ``true`` for an integer, no ``"1"`` for a number) with errors as
    ``SpecError`` key paths (-> 422 ``invalid_spec``), at most ``MAX_REPORTED_PROBLEMS`` of them."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        total = exc.error_count()
        errors = _first_problems(model, data, exc, total)
        # The CLI's wording (did you mean, union members joined), without file positions: a body has no lines.
        text = format_errors(errors, header="invalid request body")
        # Problems of one key are merged into one line, so only a body past the cap has problems left out.
        omitted = total - len(errors) if total > MAX_REPORTED_PROBLEMS else 0
        if omitted:
            text += f"\n  ... and {omitted} more problems (not listed)"
        error = SpecError(text, errors)
        error.omitted = omitted
        raise error from None


def _first_problems(model, data, exc: ValidationError, total: int) -> list[tuple[str, str]]:
    """The first problems, without building all of them (pydantic's ``errors()`` costs ~4 us per problem: 4 s
    for a million). Many problems come from long lists or mappings, so the body is validated again with every
    list and mapping cut to ``MAX_REPORTED_PROBLEMS + 1`` items: the problems of that prefix, found at once."""
    if total > MAX_REPORTED_PROBLEMS:
        data = _prefix(data, MAX_REPORTED_PROBLEMS + 1)
        try:
            model.model_validate(data, strict=True)
            return []  # every problem lies beyond the prefix: counted, not listed
        except ValidationError as cut:
            exc = cut
    return validation_problems(exc, data, model)[:MAX_REPORTED_PROBLEMS]


def _prefix(value: Any, n: int, depth: int = 0) -> Any:
    if depth > 64:  # deeper than any schema here: cut, do not recurse further
        return None
    if isinstance(value, list):
        return [_prefix(v, n, depth + 1) for v in value[:n]]
    if isinstance(value, dict):
        return {k: _prefix(v, n, depth + 1) for k, v in list(value.items())[:n]}
    return value
