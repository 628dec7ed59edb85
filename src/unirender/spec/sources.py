"""Where each loaded spec came from (file, key positions), for checks made after loading.

Kept out of the models (not part of equality or the content hash): a weak map from the spec object to its
source, so that a check failing after validation still names ``file:line:col``.
"""

from __future__ import annotations

import weakref
from typing import Any

from unirender.errors import SpecError
from unirender.spec.errors import Position, format_errors

Source = tuple[str, dict[str, Position]]  # (file name, key path -> position)
_SOURCES: dict[int, Source] = {}


def source_of(spec: Any) -> Source | tuple[None, None]:
    return _SOURCES.get(id(spec), (None, None))


def remember_source(spec: Any, source: Source) -> None:
    key = id(spec)
    _SOURCES[key] = source
    weakref.finalize(spec, _SOURCES.pop, key, None)


def raise_problems(spec: Any, problems: list[tuple[str, str]]) -> None:
    """One ``SpecError`` for every ``(key path, message)`` found in ``spec`` (none: nothing happens)."""
    if problems:
        origin, positions = source_of(spec)
        raise SpecError(format_errors(problems, origin=origin, positions=positions), problems)
