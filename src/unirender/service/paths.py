"""Where a client's job may write: under ``data_root/<owner>/`` and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from unirender.service.errors import ApiError


def owner_dir(data_root: Path, owner: str) -> Path:
    # Token names are operator-chosen, but keep the directory name boring anyway.
    return data_root / (re.sub(r"[^A-Za-z0-9_.-]", "_", owner) or "_")


def resolve_output_dir(data_root: Path, owner: str, directory: str) -> Path:
    """``directory`` (relative, from a job spec) -> an absolute path inside the owner's folder.

    Refused with 422 ``path_outside_data_root``: absolute paths, ``..`` components, NUL bytes, and anything
    that resolves (through symlinks) outside the owner's folder.
    """

    def refuse(why: str) -> ApiError:
        return ApiError(
            422, "path_outside_data_root",
            f"output.directory {directory!r} {why}; it must be a relative path inside the data root",
            path="output.directory",
        )

    if "\x00" in directory or "\\" in directory:
        raise refuse("contains a NUL byte or a backslash")
    pure = PurePosixPath(directory)
    if pure.is_absolute() or directory.startswith("~"):
        raise refuse("is absolute")
    if any(part == ".." for part in pure.parts):
        raise refuse("climbs out with '..'")
    base = owner_dir(data_root, owner).resolve()
    target = (base / pure).resolve()
    if target != base and not target.is_relative_to(base):
        raise refuse("resolves outside the data root")
    return target
