"""A Unity WebGL build folder: what it holds and how each file must be served.

Unity 2020+ writes ``Build/<name>.loader.js``, ``<name>.framework.js``, ``<name>.wasm`` and ``<name>.data``,
the last three possibly compressed (``.gz`` or ``.br``: then they must be served with ``Content-Encoding`` and
their own MIME type, unless the build carries a decompression fallback), plus ``StreamingAssets/`` and
``TemplateData/``. ``find_build`` checks all of it before any browser starts, so a broken build is a clear error
in milliseconds instead of a page that never calls back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from unirender.errors import PlatformError

ENCODINGS = {".gz": "gzip", ".br": "br"}
# MIME types by the extension under the compression suffix (Unity's "Server configuration" page).
MIME_TYPES = {
    ".js": "application/javascript",
    ".wasm": "application/wasm",
    ".data": "application/octet-stream",
    ".unityweb": "application/octet-stream",
    ".json": "application/json",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".ico": "image/x-icon",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


def content_headers(path: str) -> tuple[str, str | None]:
    """``(Content-Type, Content-Encoding or None)`` for a build file's name."""
    stem, suffix = os.path.splitext(path)
    encoding = ENCODINGS.get(suffix.lower())
    if encoding is None:
        stem, suffix = path, suffix
    else:
        suffix = os.path.splitext(stem)[1]
    return MIME_TYPES.get(suffix.lower(), "application/octet-stream"), encoding


@dataclass(frozen=True)
class WebGLBuild:
    """A checked build folder; ``loader``, ``framework``, ``code`` and ``data`` are paths relative to ``root``
    (``code``/``data`` None when the build has none: a build may carry no wasm or no data file)."""

    root: Path
    name: str
    loader: str
    framework: str
    code: str | None
    data: str | None

    def urls(self) -> dict:
        """The ``createUnityInstance`` config entries for these files (served from the build's root)."""
        doc = {"frameworkUrl": self.framework, "loaderUrl": self.loader}
        if self.code:
            doc["codeUrl"] = self.code
        if self.data:
            doc["dataUrl"] = self.data
        if (self.root / "StreamingAssets").is_dir():
            doc["streamingAssetsUrl"] = "StreamingAssets"
        return doc

    @property
    def compression(self) -> str | None:
        return content_headers(self.framework)[1]


def _one(build_dir: Path, name: str, kind: str, required: bool) -> str | None:
    found = [f"{name}.{kind}{suffix}" for suffix in ("", ".gz", ".br") if (build_dir / f"{name}.{kind}{suffix}").is_file()]
    if len(found) > 1:
        raise PlatformError(f"WebGL build {build_dir.parent}: several {kind} files ({', '.join(found)}); keep one")
    if not found:
        if required:
            raise PlatformError(
                f"WebGL build {build_dir.parent}: Build/{name}.{kind} (or .gz/.br) is missing; a Unity WebGL "
                f"build has {name}.loader.js, {name}.framework.js, {name}.wasm and {name}.data under Build/"
            )
        return None
    return f"Build/{found[0]}"


def find_build(path: str | os.PathLike, *, require_code: bool = True, require_data: bool = False) -> WebGLBuild:
    """The build in ``path`` (its folder; ``Build/`` below it), checked; PlatformError says what is wrong."""
    root = Path(path).expanduser().resolve()
    if root.is_file() and root.parent.name == "Build":  # a loader.js given directly
        root = root.parent.parent
    build_dir = root / "Build"
    if not build_dir.is_dir():
        if (root / "Build" / "UnityLoader.js").exists() or any(root.glob("*.unityweb")):
            raise PlatformError(f"{root}: a Unity 2019-or-older WebGL build (UnityLoader.js); only Unity 2020+ "
                                "builds (createUnityInstance) are supported")
        raise PlatformError(f"{root} is not a Unity WebGL build: no Build/ folder with a <name>.loader.js")
    loaders = sorted(p.name for p in build_dir.iterdir() if p.name.endswith(".loader.js"))
    if not loaders:
        hint = " (Build/UnityLoader.js: Unity 2019 or older, not supported)" if (build_dir / "UnityLoader.js").exists() else ""
        raise PlatformError(f"{root} is not a Unity WebGL build: no Build/<name>.loader.js{hint}")
    if len(loaders) > 1:
        raise PlatformError(f"{root}: several loaders under Build/ ({', '.join(loaders)}); one build per folder")
    name = loaders[0][: -len(".loader.js")]
    build = WebGLBuild(
        root=root,
        name=name,
        loader=f"Build/{loaders[0]}",
        framework=_one(build_dir, name, "framework.js", True),
        code=_one(build_dir, name, "wasm", require_code),
        data=_one(build_dir, name, "data", require_data),
    )
    for relative in (build.framework, build.code, build.data):
        if relative and _magic_mismatch(root / relative):
            raise PlatformError(
                f"WebGL build {root}: {relative} is not {content_headers(relative)[1]}-compressed although its "
                "name says so (re-export the build, or rename it to match its real compression)"
            )
    return build


def _magic_mismatch(path: Path) -> bool:
    """A ``.gz`` file that does not start with gzip's magic bytes (brotli has no magic number to check)."""
    if path.suffix != ".gz":
        return False
    with open(path, "rb") as f:
        return f.read(2) != b"\x1f\x8b"
