"""Load a spec from YAML, JSON, TOML or a mapping; report every problem as one ``SpecError``.

Each error carries the dotted path of the offending key (``episodes.2.generator.count``) and, where the
schema knows them, the allowed values or keys.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from unirender.errors import SpecError
from unirender.spec.models import EnvironmentSpec, JobSpec, _FieldError

SUFFIX_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}


def read_document(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a YAML/JSON/TOML file (chosen by suffix) into a mapping; SpecError on any failure."""
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
    try:
        if kind == "yaml":
            data = yaml.safe_load(text)
        elif kind == "json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: not valid {kind.upper()}: {exc}", [("", str(exc))]) from exc
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: a spec is a mapping at the top level, got {type(data).__name__}",
            [("", "top level must be a mapping")],
        )
    return data


def load_spec(source: str | os.PathLike | Mapping[str, Any] | JobSpec) -> JobSpec:
    """A validated :class:`JobSpec` from a file path, a mapping or an existing spec."""
    if isinstance(source, JobSpec):
        return source
    origin = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        origin = str(source)
        data = read_document(source)
    return _validate(JobSpec, data, origin)


def load_environment(source: str | os.PathLike | Mapping[str, Any] | EnvironmentSpec) -> EnvironmentSpec:
    """An :class:`EnvironmentSpec` from a bare environment mapping or a document with an ``environment`` key
    (a job file works: the rest of it is ignored)."""
    if isinstance(source, EnvironmentSpec):
        return source
    origin = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        origin = str(source)
        data = read_document(source)
    prefix = ""
    if "environment" in data:
        data, prefix = data["environment"], "environment"
        if not isinstance(data, Mapping):
            raise SpecError(
                _header(origin) + "\n  environment: must be a mapping", [("environment", "must be a mapping")]
            )
    return _validate(EnvironmentSpec, dict(data), origin, prefix)


def check_builtin_scenes(spec: JobSpec) -> None:
    """With the builtin player, every episode's scene must be one it has (``FloorPlan1`` finds
    ``FloorPlan1_physics``) or look like a scene file path (the player opens it); SpecError otherwise, so a
    job fails before any player starts. Unity builds' scenes are their own business (checked at reset)."""
    if not spec.environment.is_builtin:
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
    if errors:
        lines = [f"  {path}: {message}" for path, message in errors]
        raise SpecError(_header(None) + "\n" + "\n".join(lines), errors)


def _validate(model: type[BaseModel], data: dict[str, Any], origin: str | None, prefix: str = ""):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # One entry per key path, in the order pydantic reports them; the members of a union that all
        # failed (a name or a mapping, an int or 'auto') are joined into one message.
        merged: dict[str, list[str]] = {}
        for err in exc.errors():
            path, message = _describe(err, data, model, prefix)
            if message not in merged.setdefault(path, []):
                merged[path].append(message)
        errors = [(path, "; or ".join(messages)) for path, messages in merged.items()]
        lines = [f"  {path or '(top level)'}: {message}" for path, message in errors]
        raise SpecError(_header(origin) + "\n" + "\n".join(lines), errors) from None


def _header(origin: str | None) -> str:
    return f"invalid spec {origin}:" if origin else "invalid spec:"


def _describe(err: dict, data: Any, model: type[BaseModel], prefix: str) -> tuple[str, str]:
    loc = _input_path(err["loc"], data, missing=err["type"] == "missing")
    message = err["msg"]
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, _FieldError):
        # A cross-field rule that names the field it belongs to.
        loc = loc + cause.field.split(".")
        message = str(cause)
    elif isinstance(cause, ValueError):
        message = str(cause)
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1], data)
        message = "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    elif err["type"] == "missing":
        message = "required key is missing"
    elif "input" in err and not isinstance(cause, ValueError):
        shown = repr(err["input"])
        if len(shown) <= 60 and not isinstance(err["input"], dict | list):
            message += f" (got {shown})"
    path = ".".join(str(p) for p in ([prefix] if prefix else []) + list(loc))
    return path, message


def _input_path(loc: tuple, data: Any, missing: bool) -> list:
    """pydantic locations include union member tags (``generator.grid.rotations``, ``actions.0.str``); keep
    only the parts that exist in the user's document (plus the name of a missing key), so the path is one
    they can find."""
    out: list = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, Mapping) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif missing and i == len(loc) - 1:
            out.append(part)  # the key that should have been there
        # else: a union member tag, not in the document
    return out


def _allowed_keys(model: type[BaseModel], loc: list, data: Any) -> list[str]:
    """The field names of the model found at ``loc`` (walks nested models, lists and unions; a union
    member is chosen by the document's ``kind``)."""
    candidates: list[type[BaseModel]] = [model]
    node = data
    for part in loc:
        node = node[part] if isinstance(node, Mapping | list) else None
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in candidates:
            field = m.model_fields.get(part)
            if field is None:
                continue
            stack = [field.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    nxt.append(t)
                else:
                    stack.extend(get_args(t))
        candidates = nxt
        kind = node.get("kind") if isinstance(node, Mapping) else None
        if kind is not None:
            candidates = [m for m in candidates if _accepts_kind(m, kind)]
    keys: list[str] = []
    for m in candidates:
        keys.extend(k for k in m.model_fields if k not in keys)
    return keys


def _accepts_kind(model: type[BaseModel], kind: Any) -> bool:
    field = model.model_fields.get("kind")
    return field is None or kind in get_args(field.annotation)
