"""Atomic files: write to a temporary name in the same directory, then rename over the final name.

A reader (or a resumed job) therefore sees either the old file, no file, or the complete new one — never a
torn write, even after SIGKILL. Temporary names carry ``TEMP_MARK`` so a resumed job can sweep leftovers.
No fsync: this protects against a killed process, not against a power cut (documented in docs/jobs.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

TEMP_MARK = ".unirender-tmp"


def temp_path_for(path: Path) -> Path:
    return path.with_name(f"{path.name}{TEMP_MARK}{os.getpid()}")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """``with atomic_file(p) as f: f.write(...)`` — ``p`` appears only if the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def sweep_temp_files(root: str | os.PathLike, *, recursive: bool = True) -> int:
    """Remove temporaries left by a killed job in ``root`` (and below it, with ``recursive``); returns how
    many were removed."""
    removed = 0
    if not recursive:
        try:
            names = [e.name for e in os.scandir(root) if e.is_file(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return 0
        walk = [(str(root), [], names)]
    else:
        walk = os.walk(root)
    for dirpath, _dirs, files in walk:
        for name in files:
            if TEMP_MARK in name:
                Path(dirpath, name).unlink(missing_ok=True)
                removed += 1
    return removed
