"""Chunks: the unit of commit inside an episode, their metadata files and the commit log (the resume state).

A unit's frames are cut into chunks of ``output.frames_per_shard`` frames (chunk ``k`` holds frames
``k*C .. k*C+C-1``; for npz/webdataset the chunk is one shard). A chunk is *committed* when its image files
are in place, its metadata file ``meta/<unit>-<k>.msgpack.zst`` has been written atomically, and one line
naming it has been appended to ``.unirender-job/commits.log``. That line is the commit point: a stop at any
moment loses at most the chunks that were open.

Why an append-only log and not one file per unit: opening a job reads one small file, O(chunks), with no
per-frame parsing (100,000 frames in 100-frame chunks are 1,000 lines). A line torn by SIGKILL has no newline
and is cut off when the log is next opened for appending.

Why msgpack + zstd per chunk (figures in docs/jobs.md): frame metadata is nested and heterogeneous (object
lists, per-action returns), which msgpack stores as is; 100 consecutive frames share almost everything, which
zstd finds within one chunk's stream.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zstandard

META_DIR = "meta"
META_SUFFIX = ".msgpack.zst"
COMMIT_LOG = "commits.log"
# zstd level 3: on the grid example's frame metadata (100 frames of ~49 KB JSON per chunk) it gives ~120 bytes
# per frame in ~1 ms per chunk; level 9 saves another ~15 % for ~25x the time, level 19 ~20 % for ~600x
# (benchmarks/jobs.py --datasets).
ZSTD_LEVEL = 3


def chunk_name(unit_id: str, chunk: int) -> str:
    return f"{unit_id}-{chunk:04d}"


def meta_path(root: Path, unit_id: str, chunk: int) -> Path:
    return Path(root) / META_DIR / f"{chunk_name(unit_id, chunk)}{META_SUFFIX}"


def _plain(value: Any):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in frame metadata")


class PackedMap(bytes):
    """A metadata map that is msgpack already (the player's bytes as received, ``Event.metadata_msgpack``): a
    chunk splices it in as it is, so writing a frame's metadata costs no decode/re-encode round trip."""

    def unpack(self) -> dict[str, Any]:
        return msgpack.unpackb(self, raw=False, strict_map_key=False)


def encode_records(records: list[dict[str, Any]]) -> bytes:
    if any(isinstance(value, PackedMap) for record in records for value in record.values()):
        packed = _pack_spliced(records)
    else:
        packed = msgpack.packb(records, default=_plain, use_bin_type=True)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(packed)


def _pack_spliced(records: list[dict[str, Any]]) -> bytes:
    """``msgpack.packb(records)`` with each :class:`PackedMap` value written as its own bytes: msgpack values are
    self-delimiting, so a list of maps is its header followed by each map's header and packed key/value pairs."""
    packer = msgpack.Packer(default=_plain, use_bin_type=True)
    parts = [packer.pack_array_header(len(records))]
    for record in records:
        parts.append(packer.pack_map_header(len(record)))
        for key, value in record.items():
            parts.append(packer.pack(key))
            parts.append(bytes(value) if isinstance(value, PackedMap) else packer.pack(value))
    return b"".join(parts)


def decode_records(data: bytes) -> list[dict[str, Any]]:
    return msgpack.unpackb(
        zstandard.ZstdDecompressor().decompress(data), raw=False, strict_map_key=False, use_list=True
    )


def read_chunk_records(root: Path, unit_id: str, chunk: int) -> list[dict[str, Any]]:
    return decode_records(meta_path(root, unit_id, chunk).read_bytes())


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Commit:
    unit: str
    chunk: int
    frames: int  # in this chunk
    unit_frames: int  # in the whole unit (a grid's size is known once its scene is loaded)
    sha256: str  # of the chunk's metadata file

    def line(self) -> bytes:
        entry = {"u": self.unit, "c": self.chunk, "n": self.frames, "t": self.unit_frames, "h": self.sha256}
        return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


class CommitLog:
    """``.unirender-job/commits.log``: one JSON line per committed chunk. Thread-safe appends."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> dict[tuple[str, int], Commit]:
        """Every committed chunk, keyed ``(unit id, chunk)``; a torn last line (no newline) is ignored."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        commits: dict[tuple[str, int], Commit] = {}
        for line in data.split(b"\n")[:-1]:  # the part after the last newline is torn or empty
            try:
                e = json.loads(line)
                commit = Commit(e["u"], int(e["c"]), int(e["n"]), int(e["t"]), e["h"])
            except (ValueError, KeyError, TypeError):
                continue
            commits[(commit.unit, commit.chunk)] = commit
        return commits

    def repair(self) -> None:
        """Cut a torn last line off, so that the next append starts on a line of its own."""
        try:
            with open(self.path, "rb+") as f:
                data = f.read()
                keep = data.rfind(b"\n") + 1
                if keep != len(data):
                    f.truncate(keep)
        except FileNotFoundError:
            pass

    def append(self, commit: Commit) -> None:
        line = commit.line()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):  # disk full mid-line: cut it so the log stays line-aligned
                    raise OSError(28, "short write to the commit log")
            except BaseException:
                os.close(fd)
                self.repair()
                raise
            os.close(fd)


def select_metadata(metadata: dict[str, Any], keep: str | list[str]) -> dict[str, Any]:
    """``output.metadata``: ``'all'``, ``'none'``, or key paths (``objects.position`` keeps ``position`` in
    every item of the ``objects`` list)."""
    if keep == "all":
        return metadata
    if keep == "none":
        return {}
    out: dict[str, Any] = {}
    for path in keep:
        _copy_path(metadata, out, path.split("."))
    return out


def _copy_path(src: Any, dst: dict, parts: list[str]) -> None:
    key = parts[0]
    if not isinstance(src, dict) or key not in src:
        return
    value = src[key]
    if len(parts) == 1:
        dst[key] = value
    elif isinstance(value, dict):
        _copy_path(value, dst.setdefault(key, {}), parts[1:])
    elif isinstance(value, list):
        items = dst.setdefault(key, [{} for _ in value])
        for item, target in zip(value, items, strict=False):
            _copy_path(item, target, parts[1:])
