"""Renamed public names: a module keeps its old names importable, with a ``DeprecationWarning``, through
``__getattr__ = renamed(__name__, {"OldName": "NewName"})``."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any


def renamed(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each old name of ``names`` (old -> new) with the module's new name,
    warning that it is deprecated; any other name raises ``AttributeError`` as usual."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {module}.{new}", DeprecationWarning, stacklevel=2)
        return getattr(sys.modules[module], new)

    return __getattr__


__all__ = ["renamed"]
