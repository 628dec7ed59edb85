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


def _platform_name(platform) -> str | None:
    if platform is None or isinstance(platform, str):
        return platform
    return getattr(platform, "name", None)


def ai2thor_cache_folder(commit: str, platform: str | None = None) -> Path | None:
    """AI2-THOR's own download of a commit (``~/.ai2thor/releases/thor-<Platform>-<commit>/``), if there."""
    releases = Path.home() / ".ai2thor" / "releases"
    if not releases.is_dir():
        return None
    found = sorted(releases.glob(f"thor-*-{commit}"))
    preferred = [f for f in found if platform and f.name == f"thor-{platform}-{commit}"]
    return (preferred or found or [None])[0]


def controller_build(executable=BUILTIN, *, build=None, commit_id=None, local_executable_path=None, platform=None,
                     store: BuildStore | None = None) -> ResolvedBuild:  # fmt: skip
    """AI2-THOR's ways of naming a build (``commit_id=``, ``local_executable_path=``) and unirender's
    (``executable=`` a path or a reference, ``build=`` a reference) -> what to launch. One of them at most."""
    given = {
        name: value
        for name, value in (
            ("executable", None if os.fspath(executable) == BUILTIN else executable),
            ("build", build),
            ("commit_id", commit_id),
            ("local_executable_path", local_executable_path),
        )  # fmt: skip
        if value is not None
    }
    if len(given) > 1:
        raise ValueError(f"name the build once: got {', '.join(given)}")
    platform_name = _platform_name(platform)
    if local_executable_path is not None:
        return ResolvedBuild(os.fspath(local_executable_path))
    if commit_id is not None:
        store = store or BuildStore()
        reference = f"ai2thor:{commit_id}"
        try:
            return resolve_build(reference, platform=platform_name, store=store)
        except BuildError:
            folder = ai2thor_cache_folder(str(commit_id), platform_name)
            if folder is None:
                raise
        # AI2-THOR downloaded it once: keep it in the store (checked, named), launching from there.
        try:
            store.import_ai2thor(folder.parent)
            return resolve_build(reference, platform=platform_name, store=store)
        except (BuildError, OSError):
            return ResolvedBuild(str(folder / folder.name))  # a read-only store: AI2-THOR's own copy
    if build is not None:
        if not is_reference(os.fspath(build)):
            raise BuildError(
                f"build={build!r}: a store reference ('name:tag', 'sha256:<digest>', 'ai2thor:<commit>')"
            )
        return resolve_build(build, platform=platform_name, store=store)
    return resolve_build(executable, platform=platform_name, store=store)
