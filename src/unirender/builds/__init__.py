"""Builds as declared content: a content-addressed store of Unity builds, names as tags over digests.

``BuildStore().add(path_or_archive, name="game:v1")`` stores a build (each file once by content, published
atomically, read-only); ``BuildStore().resolve("game:v1")`` / ``"sha256:<hex>"`` / ``"ai2thor:<commit>"`` gives the
stored build and its executable without re-hashing anything. ``resolve_build`` is the one function the
controllers, the spec and the jobs call to turn a reference or a path into (executable, digest).
See docs/builds.md.
"""

from unirender.builds.bounds import BuildInUseError, Lease, StoreFullError
from unirender.builds.detect import BuildInfo, detect
from unirender.builds.errors import (
    BuildChangedError,
    BuildError,
    BuildFetchError,
    BuildNotFoundError,
    DigestMismatchError,
    UnsafeArchiveError,
)
from unirender.builds.resolve import ResolvedBuild, path_digest, resolve_build
from unirender.builds.store import BuildStore, StoredBuild, Upload, default_root, is_reference

__all__ = [
    "BuildChangedError",
    "BuildError",
    "BuildFetchError",
    "BuildInUseError",
    "BuildInfo",
    "BuildNotFoundError",
    "BuildStore",
    "DigestMismatchError",
    "Lease",
    "ResolvedBuild",
    "StoreFullError",
    "StoredBuild",
    "UnsafeArchiveError",
    "Upload",
    "default_root",
    "detect",
    "is_reference",
    "path_digest",
    "resolve_build",
]
