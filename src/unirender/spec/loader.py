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
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from unirender.errors import SpecError
from unirender.spec.errors import (
    Position,
    did_you_mean,
    format_errors,
    key_positions,
    validation_problems,
)
from unirender.spec.mlagents import BUILTIN_BEHAVIORS, BUILTIN_SENSORS, PROTOCOLS, MLAgentsJobSpec
from unirender.spec.models import EnvironmentSpec, JobSpec

SUFFIX_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}

_Source = tuple[str, dict[str, Position]]  # (file name, key path -> position)
# Where each loaded spec came from, for checks made after loading (kept out of the model: not part of equality).
_SOURCES: dict[int, _Source] = {}


def source_of(spec: JobSpec) -> _Source | tuple[None, None]:
    return _SOURCES.get(id(spec), (None, None))


def _remember_source(spec: JobSpec, source: _Source) -> None:
    key = id(spec)
    _SOURCES[key] = source
    weakref.finalize(spec, _SOURCES.pop, key, None)


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


def load_spec(source: str | os.PathLike | Mapping[str, Any] | JobSpec | MLAgentsJobSpec):
    """A validated :class:`JobSpec` (or, with ``environment.protocol: mlagents``, an
    :class:`~unirender.spec.mlagents.MLAgentsJobSpec`) from a file path, a mapping or an existing spec."""
    if isinstance(source, JobSpec | MLAgentsJobSpec):
        return source
    where = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        data, where = read_source(source)
    if _protocol(data, where) == "mlagents":
        spec = _validate(MLAgentsJobSpec, data, where)
        check_mlagents_record(spec)
        return spec
    return _validate(JobSpec, data, where)


def _protocol(data: dict[str, Any], where: _Source | None) -> str:
    """``environment.protocol`` (default ``ai2thor``, removed from an AI2-THOR environment so its models and
    content hash stay as they were); an unknown value is a SpecError with the allowed ones."""
    env = data.get("environment")
    if not isinstance(env, Mapping) or "protocol" not in env:
        return "ai2thor"
    value = env["protocol"]
    if value == "ai2thor":
        data["environment"] = {k: v for k, v in env.items() if k != "protocol"}
        return value
    if value == "mlagents":
        return value
    guess = did_you_mean(value, list(PROTOCOLS)) if isinstance(value, str) else None
    hint = f"; did you mean {guess!r}?" if guess else ""
    problems = [("environment.protocol", f"{value!r} is not a protocol{hint} (allowed: {', '.join(PROTOCOLS)})")]
    origin, positions = where if where else (None, None)
    raise SpecError(format_errors(problems, origin=origin, positions=positions), problems)


def check_mlagents_record(spec: MLAgentsJobSpec) -> None:
    """With the builtin player, the recorded sensors and behaviors must be ones its game has (with a "did you
    mean"); a Unity build's are checked against its behavior specs when its first episode starts."""
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
    _raise_problems(spec, problems)


def load_environment(source: str | os.PathLike | Mapping[str, Any] | EnvironmentSpec) -> EnvironmentSpec:
    """An :class:`EnvironmentSpec` from a bare environment mapping or a document with an ``environment`` key
    (a job file works: the rest of it is ignored)."""
    if isinstance(source, EnvironmentSpec):
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
    return _validate(EnvironmentSpec, dict(data), where, prefix)


def _raise_problems(spec: JobSpec, problems: list[tuple[str, str]]) -> None:
    if problems:
        origin, positions = source_of(spec)
        raise SpecError(format_errors(problems, origin=origin, positions=positions), problems)


def check_builtin_scenes(spec: JobSpec | MLAgentsJobSpec) -> None:
    """With the builtin player, every episode's scene must be one it has (``FloorPlan1`` finds
    ``FloorPlan1_physics``) or look like a scene file path (the player opens it); SpecError otherwise, so a
    job fails before any player starts. Unity builds' scenes are their own business (checked at reset)."""
    if not spec.environment.is_builtin or isinstance(spec, MLAgentsJobSpec):
        return
    from pathlib import PurePath

    from unirender.player.scene import SCENE_SUFFIXES, builtin_scene_names

    known = builtin_scene_names()
    errors = [
        (
            f"episodes.{i}.scene",
            f"{episode.scene!r} is not a scene of the builtin player; built-in scenes: {', '.join(known)} "
            "(or give the path of a .yaml/.yml/.json scene file)",
        )
        for i, episode in enumerate(spec.episodes)
        if "/" not in episode.scene
        and PurePath(episode.scene).suffix.lower() not in SCENE_SUFFIXES
        and episode.scene not in known
        and f"{episode.scene}_physics" not in known
    ]
    _raise_problems(spec, errors)


def check_actions(spec: JobSpec) -> list[tuple[str, str]]:
    """Every action name in the episodes against the builtin player's actions. With the builtin player an
    unknown name is a SpecError (with a "did you mean"); a Unity build's actions cannot be known from here, so
    for one the same findings are returned as warnings and the job may go ahead."""
    if isinstance(spec, MLAgentsJobSpec):
        return []  # its actions are checked against the policy's kinds by the schema
    from unirender.player.actions import ACTIONS

    known = sorted(ACTIONS)
    problems = []
    for i, episode in enumerate(spec.episodes):
        for j, action in enumerate(episode.action_dicts()):
            name = action["action"]
            if name in ACTIONS:
                continue
            guess = did_you_mean(name, known)
            hint = f"; did you mean {guess!r}?" if guess else ""
            problems.append(
                (f"episodes.{i}.actions.{j}", f"{name!r} is not an action of the builtin player{hint}")
            )
    if spec.environment.is_builtin:
        _raise_problems(spec, problems)
        return []
    return [(path, f"{message} (a Unity build may have it)") for path, message in problems]


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
    if source and isinstance(spec, JobSpec | MLAgentsJobSpec):
        _remember_source(spec, source)
    return spec
