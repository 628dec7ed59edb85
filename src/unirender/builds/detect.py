"""What a build folder is, read from the files Unity writes (docs/builds.md, "What `show` detects").

Family: ML-Agents when its assemblies are inside (``Managed/Unity.ML-Agents.dll``, or the name in IL2CPP's
``global-metadata.dat``); AI2-THOR when its name carries ``thor-<Platform>-<commit>`` or a ``metadata.json`` lists
``server_types``; otherwise unknown. The Unity version comes from the header of ``globalgamemanagers`` (or
``data.unity3d``, or a WebGL loader/framework script); the target from the layout.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

UNITY_VERSION = re.compile(rb"(?<![\d.])(20\d\d|[56]\.\d|6000)\.\d+\.\d+[abfpx]\d+")
AI2THOR_NAME = re.compile(
    r"thor-(?P<platform>[A-Za-z0-9]+?)-(?P<commit>[0-9a-f]{7,40})(?:[-_.][A-Za-z0-9_.-]*)?$"
)
_VERSION_UTF16 = re.compile(rb"(?:[0-9]\x00){1,3}\.\x00(?:[0-9]\x00){1,3}\.\x00(?:[0-9]\x00){1,3}")
# com.unity.ml-agents' communicator API versions (Academy.k_ApiVersion) released so far.
COMMUNICATOR_VERSIONS = ("1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0")


@dataclass(frozen=True)
class BuildInfo:
    family: str = "unknown"  # "ai2thor", "mlagents" or "unknown"
    target: str = "unknown"
    executable: str = ""  # relative to the build's root ("" when none: WebGL, or not found)
    unity_version: str = ""
    mlagents_package: str = ""
    communicator_version: str = ""
    ai2thor_commit: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def _head(path: Path, size: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def _unity_version(paths: list[Path]) -> str:
    for path in paths:
        found = UNITY_VERSION.search(_head(path))
        if found:
            return found.group(0).decode()
    return ""


def _data_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.endswith("_Data"))


def _linux_like(root: Path) -> tuple[str, str, Path | None]:
    """(target, executable, data folder) for a Linux or Windows standalone build, or ("", "", None)."""
    for data in _data_folders(root):
        stem = data.name[: -len("_Data")]
        for name, target in ((f"{stem}.x86_64", "Linux64"), (stem, "Linux64"), (f"{stem}.exe", "Windows"),
                             (f"{stem}.x86", "Linux64")):  # fmt: skip
            candidate = root / name
            if candidate.is_file():
                return target, name, data
    return "", "", None


def is_webgl_build(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder that looks like a Unity WebGL build (a loader under ``Build/``)."""
    build = Path(path) / "Build"
    return build.is_dir() and any(p.name.endswith(".loader.js") for p in build.iterdir())


def detect(root: Path, hint_name: str = "") -> BuildInfo:
    """Detect what the build in folder ``root`` is; ``hint_name``: the archive or folder it came from."""
    target, executable, data = _linux_like(root)
    version_files: list[Path] = []
    if data is not None:
        version_files = [data / "globalgamemanagers", data / "data.unity3d", data / "mainData"]
    else:
        apps = sorted(root.glob("*.app"))
        if apps:
            app = apps[0]
            target = "StandaloneOSX"
            exes = sorted((app / "Contents" / "MacOS").glob("*"))
            executable = str(exes[0].relative_to(root)) if exes else ""
            data = app / "Contents" / "Resources" / "Data"
            version_files = [data / "globalgamemanagers", data / "data.unity3d"]
        elif (root / "Build").is_dir() and ((root / "index.html").is_file()
                                            or any((root / "Build").glob("*.loader.js"))):  # fmt: skip
            target = "WebGL"
            version_files = sorted((root / "Build").glob("*.js"))
    names = " ".join(filter(None, [hint_name, root.name, executable]))
    thor = None
    for candidate in (hint_name, root.name, Path(executable).name):
        thor = AI2THOR_NAME.search(candidate or "")
        if thor:
            break
    if target == "Linux64":
        for headless in ("CloudRendering", "LinuxHeadlessSimulation"):
            if headless in names:
                target = headless
    family, package, communicator = "unknown", "", ""
    managed = data / "Managed" if data is not None else None
    if managed is not None and (managed / "Unity.ML-Agents.dll").is_file():
        family = "mlagents"
        package, communicator = _mlagents_versions(managed / "Unity.ML-Agents.dll")
    elif data is not None and b"Unity.ML-Agents" in _head(data / "il2cpp_data" / "Metadata" / "global-metadata.dat",
                                                          64 << 20):  # fmt: skip
        family = "mlagents"
    elif thor or _has_server_types(root):
        family = "ai2thor"
    return BuildInfo(
        family=family,
        target=target or "unknown",
        executable=executable,
        unity_version=_unity_version(version_files),
        mlagents_package=package,
        communicator_version=communicator,
        ai2thor_commit=thor.group("commit") if thor else "",
    )


def _has_server_types(root: Path) -> bool:
    try:
        return "server_types" in json.loads((root / "metadata.json").read_text())
    except (OSError, ValueError):
        return False


def _mlagents_versions(dll: Path) -> tuple[str, str]:
    """(package version, communicator version) from the version strings in the assembly's user-string heap.

    Academy's ``k_PackageVersion`` and ``k_ApiVersion`` are the assembly's only x.y.z literals in released
    packages; the communicator's is the one among the known API versions, the package's the other."""
    try:
        blob = dll.read_bytes() if dll.stat().st_size < (64 << 20) else b""
    except OSError:
        return "", ""
    found = list(dict.fromkeys(m.group(0).decode("utf-16-le") for m in _VERSION_UTF16.finditer(blob)))
    communicator = next((v for v in found if v in COMMUNICATOR_VERSIONS), "")
    package = next((v for v in found if v != communicator), "")
    return package, communicator


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
