"""Load a spec from YAML, JSON, TOML or a mapping; report every problem as one ``SpecError``.

Each problem carries the dotted path of the offending key (``episodes.2.generator.count``), its file, line
and column when the spec came from a file, a "did you mean" for a misspelt key or value, and where the schema
knows them the allowed values or keys (formatting: :mod:`unirender.spec.errors`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from unirender.errors import SpecError
from unirender.simulator import AI2THOR
from unirender.spec.errors import (
    Position,
    did_you_mean,
    format_errors,
    key_positions,
    validation_problems,
)
from unirender.spec.families import ENVIRONMENT_MODELS, JOB_MODELS, SPEC_FAMILIES, SpecFamily, spec_family
from unirender.spec.models import JobSpec
from unirender.spec.sources import Source as _Source
from unirender.spec.sources import remember_source, source_of  # noqa: F401  (source_of: re-exported)

SUFFIX_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}

def _syntax_position(exc: Exception) -> Position | None:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return mark.line + 1, mark.column + 1
    if isinstance(exc, json.JSONDecodeError):
        return exc.lineno, exc.colno
    found = re.search(r"at line (\d+), column (\d+)", str(exc))  # tomllib puts it in the message
    return (int(found.group(1)), int(found.group(2))) if found else None


def read_source(path: str | os.PathLike) -> tuple[dict[str, Any], _Source]:
    """Parse a YAML/JSON/TOML file (chosen by suffix): the mapping and where each key is; SpecError (with the
    line and column of a syntax error) on any failure."""
    path = Path(path)
    kind = SUFFIX_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise SpecError(
            f"{path}: unknown spec file type {path.suffix!r}; use one of {', '.join(SUFFIX_FORMATS)}",
            [("", "unknown file type")],
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec: {exc.strerror or exc}", [("", str(exc))]) from exc
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text: {exc}", [("", str(exc))]) from exc
    try:
        if kind == "yaml":
            data = yaml.safe_load(text)
        elif kind == "json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        where = _syntax_position(exc)
        at = f"{path}:{where[0]}:{where[1]}" if where else str(path)
        detail = str(exc).replace("\n", " ")
        raise SpecError(f"{at}: not valid {kind.upper()}: {detail}", [("", detail)]) from exc
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}:1:1: a spec is a mapping at the top level, got {type(data).__name__}",
            [("", "top level must be a mapping")],
        )
    return data, (str(path), key_positions(text, kind))


def read_document(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a YAML/JSON/TOML file (chosen by suffix) into a mapping; SpecError on any failure."""
    return read_source(path)[0]


def load_spec(source: str | os.PathLike | Mapping[str, Any] | BaseModel):
    """A validated job spec from a file path, a mapping or an existing spec: a :class:`JobSpec`, or the model
    its ``environment.protocol`` names in :data:`unirender.spec.families.SPEC_FAMILIES` (``mlagents``:
    :class:`~unirender.spec.mlagents.MLAgentsJobSpec`)."""
    if isinstance(source, JOB_MODELS):
        return source
    where = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        data, where = read_source(source)
    family = _family(data, where)
    spec = _validate(family.job_model, data, where)
    family.check_loaded(spec)
    return spec


def _family(data: dict[str, Any], where: _Source | None) -> SpecFamily:
    """The family of a job document's ``environment`` (see :func:`_environment_family`)."""
    env = data.get("environment")
    if not isinstance(env, Mapping):
        return SPEC_FAMILIES[AI2THOR]
    family, data["environment"] = _environment_family(env, where, "environment.")
    return family


def _environment_family(
    env: Mapping[str, Any], where: _Source | None, path: str, default: str = AI2THOR
) -> tuple[SpecFamily, dict[str, Any]]:
    """The family ``protocol`` names (``default`` when absent) and the environment as its model takes it: the
    ``protocol`` key removed where the model has no such field (AI2-THOR's, so its models and content hash stay as
    they were), added where the model requires it. An unknown value is a SpecError with the allowed ones."""
    value = env.get("protocol", default)
    family = SPEC_FAMILIES.get(value) if isinstance(value, str) else None
    if family is not None:
        if not family.protocol_field:
            return family, {k: v for k, v in env.items() if k != "protocol"}
        return family, {**env, "protocol": family.name}
    guess = did_you_mean(value, list(SPEC_FAMILIES)) if isinstance(value, str) else None
    hint = f"; did you mean {guess!r}?" if guess else ""
    allowed = ", ".join(SPEC_FAMILIES)
    problems = [(f"{path}protocol", f"{value!r} is not a protocol{hint} (allowed: {allowed})")]
    origin, positions = where if where else (None, None)
    raise SpecError(format_errors(problems, origin=origin, positions=positions), problems)


def load_environment(
    source: str | os.PathLike | Mapping[str, Any] | BaseModel, *, default: str = AI2THOR
) -> BaseModel:
    """The environment model of its family from a bare environment mapping or a document with an ``environment``
    key (a job file works: the rest of it is ignored): the model ``protocol`` names in
    :data:`unirender.spec.families.SPEC_FAMILIES` (``default`` when absent): an :class:`EnvironmentSpec`, an
    :class:`~unirender.spec.mlagents.MLAgentsEnvironmentSpec`. Errors are SpecErrors with key paths."""
    if isinstance(source, ENVIRONMENT_MODELS):
        return source
    where = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        data, where = read_source(source)
    prefix = ""
    if "environment" in data:
        data, prefix = data["environment"], "environment"
        if not isinstance(data, Mapping):
            problems = [("environment", "must be a mapping")]
            raise SpecError(format_errors(problems, origin=where[0] if where else None,
                                          positions=where[1] if where else None), problems)  # fmt: skip
    family, data = _environment_family(data, where, f"{prefix}." if prefix else "", default)
    return _validate(family.environment_model, data, where, prefix)


def check_builtin_scenes(spec) -> None:
    """With the builtin player, every episode's scene must be one it has; SpecError otherwise, so a job fails
    before any player starts (the spec's family decides what a scene is: ``spec.families``)."""
    spec_family(spec).check_builtin_scenes(spec)


def check_actions(spec) -> list[tuple[str, str]]:
    """Every action name in the episodes against the builtin player's: a SpecError with the builtin player,
    warnings for a Unity build (the spec's family decides: ``spec.families``)."""
    return spec_family(spec).check_actions(spec)


def spec_warnings_text(spec: JobSpec, warnings: list[tuple[str, str]]) -> str:
    """Warnings in the same ``file:line:col: path: message`` form as errors."""
    origin, positions = source_of(spec)
    return format_errors(warnings, origin=origin, positions=positions, header="warning: spec")


def _validate(model: type[BaseModel], data: dict[str, Any], source: _Source | None, prefix: str = ""):
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc, data, model, prefix)
        origin, positions = source if source else (None, None)
        raise SpecError(format_errors(problems, origin=origin, positions=positions), problems) from None
    if source and isinstance(spec, JOB_MODELS):
        remember_source(spec, source)
    return spec
