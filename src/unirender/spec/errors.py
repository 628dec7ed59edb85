"""Spec problems as people read them: ``file:line:col: key.path: message``, "did you mean", a cap on the count.

One formatter for every place that reports a spec problem (the CLI, ``render()``, the HTTP API):
:func:`validation_problems` turns a pydantic ``ValidationError`` into ``(key path, message)`` pairs in the
user's terms, :func:`format_errors` renders them, with positions from :func:`key_positions` when the spec
came from a file (YAML, JSON or TOML).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

Problem = tuple[str, str]  # (dotted key path, message)
Position = tuple[int, int]  # (line, column), 1-based
MAX_PROBLEMS = 20  # a spec with more is usually one systematic mistake; the first ones show it


class FieldError(ValueError):
    """A model-level rule that belongs to one field: reported under that field's path."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def did_you_mean(word: str, choices: list[str]) -> str | None:
    """The closest of ``choices`` to a misspelt ``word`` (case-insensitive), or None."""
    lowered = {c.lower(): c for c in choices}
    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def format_errors(
    problems: list[Problem],
    *,
    origin: str | None = None,
    positions: Mapping[str, Position] | None = None,
    header: str = "invalid spec",
    max_problems: int = MAX_PROBLEMS,
) -> str:
    """``invalid spec job.yaml (2 problems):`` then one line per problem, ``job.yaml:3:5: width: message``
    when the position is known, at most ``max_problems`` lines."""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    lines = [f"{header} {origin} ({count}):" if origin else f"{header} ({count}):"]
    for path, message in problems[:max_problems]:
        where = locate(path, positions) if positions else None
        prefix = f"{origin}:{where[0]}:{where[1]}: " if origin and where else ""
        lines.append(f"  {prefix}{path or '(top level)'}: {message}")
    if len(problems) > max_problems:
        lines.append(f"  ... and {len(problems) - max_problems} more")
    return "\n".join(lines)


def locate(path: str, positions: Mapping[str, Position]) -> Position | None:
    """The position of ``path``, or of its nearest ancestor in the document (a missing key: its mapping)."""
    parts = path.split(".") if path else []
    while parts:
        found = positions.get(".".join(parts))
        if found is not None:
            return found
        parts.pop()
    return positions.get("")


# -- pydantic errors in the user's terms -------------------------------------------------------------------
def validation_problems(
    exc: ValidationError, data: Any, model: type[BaseModel], prefix: str = ""
) -> list[Problem]:
    """One entry per key path, in the order pydantic reports them; the members of a union that all failed
    (a name or a mapping, an int or 'auto') are joined into one message."""
    merged: dict[str, list[str]] = {}
    for err in exc.errors():
        path, message = _describe(err, data, model, prefix)
        if message not in merged.setdefault(path, []):
            merged[path].append(message)
    return [(path, "; or ".join(messages)) for path, messages in merged.items()]


def _describe(err: dict, data: Any, model: type[BaseModel], prefix: str) -> Problem:
    loc = _input_path(err["loc"], data, missing=err["type"] == "missing")
    message = err["msg"]
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, FieldError):
        loc = loc + cause.field.split(".")
        message = str(cause)
    elif isinstance(cause, ValueError):
        message = str(cause)
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1], data)
        guess = did_you_mean(str(loc[-1]), allowed) if loc else None
        message = "unknown key" + (f"; did you mean {guess!r}?" if guess else "")
        message += f" (allowed keys: {', '.join(allowed)})" if allowed else ""
    elif err["type"] == "missing":
        message = "required key is missing"
    elif "input" in err and not isinstance(cause, ValueError):
        shown = repr(err["input"])
        if len(shown) <= 60 and not isinstance(err["input"], dict | list):
            message += f" (got {shown})"
        expected = ctx.get("expected")
        if err["type"] == "literal_error" and isinstance(err["input"], str) and expected:
            options = re.findall(r"'([^']*)'", expected)
            guess = did_you_mean(err["input"], options)
            if guess:
                message += f"; did you mean {guess!r}?"
    path = ".".join(str(p) for p in ([prefix] if prefix else []) + list(loc))
    return path, message


def _input_path(loc: tuple, data: Any, missing: bool) -> list:
    """pydantic locations include union member tags (``generator.grid.rotations``, ``actions.0.str``); keep
    only the parts that exist in the user's document (plus the name of a missing key)."""
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


# -- where each key is in the file ---------------------------------------------------------------------------
def key_positions(text: str, kind: str) -> dict[str, Position]:
    """Dotted key path (list items by index) -> (line, column) of the key (of the item, for list items) in a
    YAML, JSON or TOML document. Best effort: a path not found is reported without a position."""
    try:
        if kind == "yaml":
            return _yaml_positions(text)
        if kind == "json":
            return _json_positions(text)
        return _toml_positions(text)
    except Exception:  # never let locating a problem hide the problem
        return {}


def _yaml_positions(text: str) -> dict[str, Position]:
    import yaml

    out: dict[str, Position] = {}
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def walk(node, path: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = f"{path}.{key.value}" if path else str(key.value)
                out[sub] = (key.start_mark.line + 1, key.start_mark.column + 1)
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = f"{path}.{i}" if path else str(i)
                out[sub] = (item.start_mark.line + 1, item.start_mark.column + 1)
                walk(item, sub)

    if root is not None:
        out[""] = (root.start_mark.line + 1, root.start_mark.column + 1)
        walk(root, "")
    return out


def _line_col(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _json_positions(text: str) -> dict[str, Position]:
    """Walks the document with json's own string scanner, recording where each key and list item starts."""
    decoder = json.JSONDecoder()
    out: dict[str, Position] = {}
    ws = re.compile(r"\s*")

    def skip(i: int) -> int:
        return ws.match(text, i).end()

    def value(i: int, path: str) -> int:
        i = skip(i)
        if text[i] == "{":
            i = skip(i + 1)
            if text[i] == "}":
                return i + 1
            while True:
                i = skip(i)
                key, end = json.decoder.scanstring(text, i + 1)
                sub = f"{path}.{key}" if path else key
                out[sub] = _line_col(text, i)
                i = skip(end)
                i = value(i + 1, sub)  # past the ':'
                i = skip(i)
                if text[i] == "}":
                    return i + 1
                i += 1  # ','
        if text[i] == "[":
            i = skip(i + 1)
            if text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = skip(i)
                sub = f"{path}.{n}" if path else str(n)
                out[sub] = _line_col(text, i)
                i = skip(value(i, sub))
                n += 1
                if text[i] == "]":
                    return i + 1
                i += 1
        _, end = decoder.raw_decode(text, i)
        return end

    start = skip(0)
    out[""] = _line_col(text, start)
    value(start, "")
    return out


_TOML_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_TOML_KEY = re.compile(r"([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


def _toml_positions(text: str) -> dict[str, Position]:
    """Table headers, ``key =`` lines and the keys of inline tables (``generator = {kind = "grid"}``) and
    arrays of inline tables; multi-line strings and arrays are not followed (their keys are not needed)."""
    out: dict[str, Position] = {"": (1, 1)}
    table = ""
    array_counts: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.split("#", 1)[0]
        header = _TOML_HEADER.match(stripped)
        if header:
            name = ".".join(p.strip().strip('"') for p in header.group(2).split("."))
            if header.group(1) == "[[":
                index = array_counts.get(name, 0)
                array_counts[name] = index + 1
                out.setdefault(name, (n, header.start(2) + 1))
                table = f"{name}.{index}"
            else:
                table = name
            out[table] = (n, header.start(2) + 1)
            continue
        match = re.match(r"\s*([A-Za-z0-9_\-\".]+)\s*=", stripped)
        if not match:
            continue
        key = ".".join(p.strip().strip('"') for p in match.group(1).split("."))
        path = f"{table}.{key}" if table else key
        out[path] = (n, match.start(1) + 1)
        _toml_inline(stripped, match.end(), path, n, out)
    return out


def _toml_inline(line: str, i: int, path: str, n: int, out: dict[str, Position]) -> None:
    """Keys of the inline tables (and arrays of them) in ``line`` from offset ``i``, nested by brackets."""
    stack: list[list] = []  # [path, kind, item count]
    current = path
    j = i
    while j < len(line):
        ch = line[j]
        if ch == '"':
            end = line.find('"', j + 1)
            j = len(line) if end < 0 else end + 1
            continue
        if ch in "[{":
            if stack and stack[-1][1] == "[":
                item = f"{stack[-1][0]}.{stack[-1][2]}"
                stack[-1][2] += 1
                out[item] = (n, j + 1)
                current = item
            stack.append([current, ch, 0])
        elif ch in "]}":
            if stack:
                stack.pop()
            current = stack[-1][0] if stack else path
        elif stack and stack[-1][1] == "{":
            key = _TOML_KEY.match(line, j)
            if key and (j == 0 or not (line[j - 1].isalnum() or line[j - 1] in "_-")):
                name = key.group(1).strip('"')
                current = f"{stack[-1][0]}.{name}"
                out[current] = (n, j + 1)
                j = key.end()
                continue
        j += 1
