"""Where a build is named (a spec's ``environment.build``/``executable``, ``Controller(build=...)``, the drop-in's
``file_name``), turn the name into the executable to launch and the digest of its bytes, the one way."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from unirender.builds.errors import BuildError
from unirender.builds.store import BuildStore, StoredBuild, is_reference

BUILTIN = "builtin"


@dataclass(frozen=True)
class ResolvedBuild:
    executable: str  # a path, or "builtin"
    stored: StoredBuild | None = None  # when it came from the store

    @property
    def digest(self) -> str | None:
        """The build's digest: read from the store, or computed for a plain path (cached by path, size and
        mtime); None for the builtin player."""
        if self.stored is not None:
            return self.stored.digest
        if self.executable == BUILTIN:
            return None
        return path_digest(self.executable)


def build_folder(executable: str | os.PathLike) -> Path:
    """The folder a build's executable stands in: its parent, or the folder holding a macOS ``.app``."""
    path = Path(executable).resolve()
    for parent in path.parents:
        if parent.suffix == ".app":
            return parent.parent
    return path.parent


def path_digest(executable: str | os.PathLike, store: BuildStore | None = None) -> str:
    return (store or BuildStore()).digest_folder(build_folder(executable))


def resolve_build(name: str | os.PathLike, *, platform: str | None = None,
                  store: BuildStore | None = None) -> ResolvedBuild:  # fmt: skip
    """``builtin``, a path to an executable, or a store reference (``sha256:<hex>``, ``name:tag``,
    ``ai2thor:<commit>``) -> what to launch."""
    text = os.fspath(name)
    if text == BUILTIN:
        return ResolvedBuild(BUILTIN)
    if not is_reference(text):
        return ResolvedBuild(text)
    stored = (store or BuildStore()).resolve(text, platform=platform)
    if stored.executable is None:
        raise BuildError(
            f"{text} ({stored.digest}) holds no executable unirender can launch (target {stored.info.target})"
        )
    return ResolvedBuild(str(stored.executable), stored)
