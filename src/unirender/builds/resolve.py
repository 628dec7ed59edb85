"""Where a build is named (a spec's ``environment.build``/``executable``, ``Controller(build=...)``, the drop-in's
``file_name``), turn the name into the executable to launch and the digest of its bytes, the one way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirender.builds.bounds import HEX, Lease, lease
from unirender.builds.detect import is_webgl_build
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

    def lease(self) -> Lease | None:
        """Hold the build while a player runs it (builds.bounds; release it when the player stops): a build
        from the store, or a path inside a store's ``builds/<hex>/files/`` (the drop-in's and the registry's
        executables); None for the builtin player and builds elsewhere, which no store evicts. Taking it records
        the build's use time (the LRU order of eviction); about 20 microseconds (bounds.lease)."""
        if self.stored is not None:
            return lease(self.stored.path.parent.parent, self.stored.digest)
        if self.executable == BUILTIN:
            return None
        found = stored_path(self.executable)
        return lease(*found) if found is not None else None


def stored_path(executable: str | os.PathLike) -> tuple[Path, str] | None:
    """(store root, digest) when ``executable`` lies in a store's ``builds/<hex>/files/``; path arithmetic and
    one stat."""
    path = Path(os.path.abspath(executable))
    for parent in path.parents:
        if parent.name == "files" and parent.parent.parent.name == "builds":
            folder = parent.parent
            if HEX.match(folder.name) and (folder / "manifest.json").is_file():
                return folder.parent.parent, "sha256:" + folder.name
            return None
    return None


def build_folder(executable: str | os.PathLike) -> Path:
    """The folder a build's executable stands in: its parent, the folder holding a macOS ``.app``, or a WebGL
    build's folder itself (the AI2-THOR family names it as its executable)."""
    path = Path(executable).resolve()
    if is_webgl_build(path):
        return path
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
    stored = (store or BuildStore()).resolve(text, platform=platform, names=False)
    if stored.executable is None and stored.info.target == "WebGL":
        return ResolvedBuild(str(stored.root / "Build"), stored)  # the webgl family's name for its folder
    if stored.executable is None:
        raise BuildError(
            f"{text} ({stored.digest}) holds no executable unirender can launch (target {stored.info.target})"
        )
    return ResolvedBuild(str(stored.executable), stored)


def build_platform_name(platform) -> str | None:
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
    platform_name = build_platform_name(platform)
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


def is_webgl(resolved: ResolvedBuild, platform=None) -> bool:
    """Whether a resolved build is a Unity WebGL build, which runs in a browser and not as a player process:
    ``platform`` WebGL declared for it, a stored build of target WebGL, or a folder holding ``Build/*.loader.js``.
    The AI2-THOR family's launcher sends such a build to its WebGL bridge (``cluster.simulators.launch``)."""
    if build_platform_name(platform) == "WebGL":
        return True
    if resolved.stored is not None:
        return resolved.stored.info.target == "WebGL"
    return resolved.executable != BUILTIN and is_webgl_build(resolved.executable)


def names_webgl_build(controller_kwargs: Mapping[str, Any]) -> bool:
    """Whether ``Controller`` keyword arguments name a Unity WebGL build (:func:`is_webgl`); a name that does not
    resolve is not one (whoever launches it says what is wrong), nor is a player started elsewhere."""
    if controller_kwargs.get("start_unity", True) is False:
        return False
    try:
        resolved = controller_build(controller_kwargs.get("executable", BUILTIN), build=controller_kwargs.get("build"),
                                    commit_id=controller_kwargs.get("commit_id"),
                                    local_executable_path=controller_kwargs.get("local_executable_path"),
                                    platform=controller_kwargs.get("platform"))  # fmt: skip
    except (BuildError, ValueError):
        return False
    return is_webgl(resolved, controller_kwargs.get("platform"))


def named_build_digest(name: str, platform: str | None = None, store: BuildStore | None = None) -> str | None:
    """The digest of the bytes a spec's build name stands for (a reference's from the store; a path's computed,
    cached by path, size and mtime); None for the builtin player."""
    return resolve_build(name, platform=platform, store=store).digest


def platform_warning(platform: str | None, target: str) -> str | None:
    """Why a declared platform cannot run a build of ``target`` (None when it can, or nobody knows)."""
    if target == "WebGL" and platform != "WebGL":  # the webgl family declares platform WebGL
        return ("a WebGL build runs in a browser, not as a player process: the webgl family runs it in headless "
                "Chromium, and the AI2-THOR family an AI2-THOR WebGL build on platform WebGL (or auto); the ML-Agents "
                "family cannot (docs/webgl.md)")  # fmt: skip
    if target in ("StandaloneOSX", "Windows"):
        return f"a {target} build does not run on Linux render hosts; build for Linux64 or CloudRendering"
    if platform == "CloudRendering" and target == "Linux64":
        return ("platform CloudRendering needs a CloudRendering (or LinuxHeadlessSimulation) build; this is a "
                "Linux64 build, which renders through an X display: use platform Linux64 or auto")  # fmt: skip
    return None


def describe_named_build(name: str, platform: str | None = None) -> tuple[list[str], list[str]]:
    """``spec check``'s lines about a spec's build (build, digest, family, Unity version, target) and its
    warnings."""
    from unirender.builds.detect import detect

    if name == BUILTIN:
        return ["build          builtin (the reference player)"], []
    resolved = resolve_build(name, platform=platform)
    if resolved.stored is not None:
        info, digest = resolved.stored.info, resolved.stored.digest
    else:
        info, digest = detect(build_folder(name)), resolved.digest
    lines = [
        f"build          {name}",
        f"digest         {digest}",
        f"family         {info.family}",
        f"unity version  {info.unity_version or 'unknown'}",
        f"target         {info.target}",
    ]
    warning = platform_warning(platform, info.target)
    return lines, [warning] if warning else []
