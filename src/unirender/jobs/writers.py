"""Dataset writers: one episode at a time, in one of three layouts.

* ``png``: ``frames/<unit>/<k>/<index>.<key>.<ext>``, one file per image (PNG, or ``.npy`` for float arrays).
* ``npz``: ``shards/<unit>-<k>.npz`` holding ``<index>.<key>`` arrays (deflated, or stored raw).
* ``webdataset``: ``shards/<unit>-<k>.tar`` with members ``<unit>_<index>.<key>.<ext>`` + ``.json`` metadata.

Every file appears atomically (see :mod:`unirender.jobs.atomic`); shards are assembled under a temporary name
and renamed when the chunk is sealed. Archive member timestamps and owners are fixed, so the same frames give
the same bytes. ``seal`` returns one record per frame (``index``, ``location``, ``files`` = frame key ->
file/member name, ``metadata``) for the chunk's metadata file.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from unirender.jobs.atomic import temp_path_for, write_atomic
from unirender.jobs.chunks import PackedMap
from unirender.jobs.encoding import DEPTH16_SCALE, dumps_json, encode_array
from unirender.spec.models import OutputSpec

FRAMES_DIR = "frames"
SHARDS_DIR = "shards"
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# Deflate level 1: on the grid example's frames (rgb, float depth, instance ids at 300x300) it stores ~20x less
# than raw arrays at about half the encoding time of zlib's default 6, which is another ~1.5x smaller but made
# encoding, not rendering, the job's bottleneck (benchmarks/jobs.py --datasets).
NPZ_DEFLATE_LEVEL = 1


def safe_name(key: str) -> str:
    """A frame key as a file-name part: letters, digits, ``_`` and ``-`` only."""
    return re.sub(r"[^A-Za-z0-9_\-]", "-", key)


def depth16_scale(output: OutputSpec, depth_format: str) -> float | None:
    return DEPTH16_SCALE[depth_format] if output.depth_encoding == "png16" else None


class EpisodeWriter(ABC):
    """Writes one unit's frames chunk by chunk: ``add`` frames of one chunk, then ``seal`` it (its files final,
    its frame records returned). Chunk ``k`` holds frames ``k*C .. k*C+C-1`` (C = ``frames_per_shard``), so
    a redone chunk rewrites the same files with the same bytes."""

    def __init__(self, root: Path, unit_id: str, output: OutputSpec, depth_format: str = "Meters"):
        self.root = Path(root)
        self.unit_id = unit_id
        self.output = output
        self.depth16_scale = depth16_scale(output, depth_format)
        self.chunk: int | None = None  # the open chunk
        self.records: list[dict[str, Any]] = []

    def _encode(self, key: str, array: np.ndarray, prefer_png: bool) -> tuple[str, bytes]:
        return encode_array(
            key,
            array,
            prefer_png=prefer_png,
            depth16_scale=self.depth16_scale,
            png_compress_level=self.output.png_compress_level,
        )

    def chunk_of(self, index: int) -> int:
        return index // self.output.frames_per_shard

    def add(self, index: int, frames: dict[str, np.ndarray], metadata: dict[str, Any]) -> dict[str, Any]:
        """Write one frame of the open chunk (opening it on its first frame); returns the frame's record."""
        chunk = self.chunk_of(index)
        if self.chunk is None:
            self.chunk = chunk
            self._open_chunk()
        elif chunk != self.chunk:
            raise ValueError(f"frame {index} is not in the open chunk {self.chunk}: seal it first")
        location, files = self._write_frame(index, frames, metadata)
        record = {"index": index, "location": location, "files": files, "metadata": metadata}
        self.records.append(record)
        return record

    def seal(self) -> tuple[int, list[dict[str, Any]]]:
        """Make the open chunk's files final; ``(chunk number, its frame records)``."""
        if self.chunk is None:
            raise ValueError("no open chunk")
        self._seal_chunk()
        done = (self.chunk, self.records)
        self.chunk, self.records = None, []
        return done

    def discard(self) -> None:
        """Drop the open chunk's temporaries (finished files stay: a redo rewrites them with the same bytes)."""
        self.chunk, self.records = None, []

    def _open_chunk(self) -> None:
        return None

    def _seal_chunk(self) -> None:
        return None

    @abstractmethod
    def _write_frame(self, index, frames, metadata) -> tuple[str, dict[str, str]]: ...


class PngEpisodeWriter(EpisodeWriter):
    """One directory per chunk, so a resumed job looks for leftovers in the open chunks' directories only."""

    def _write_frame(self, index, frames, metadata):
        rel_dir = f"{FRAMES_DIR}/{self.unit_id}/{self.chunk:04d}"
        files = {}
        for key, array in frames.items():
            ext, data = self._encode(key, array, prefer_png=True)
            name = f"{index:06d}.{safe_name(key)}.{ext}"
            write_atomic(self.root / rel_dir / name, data)
            files[key] = name
        return rel_dir, files


class _ShardedEpisodeWriter(EpisodeWriter):
    suffix = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path: Path | None = None
        self._tmp: Path | None = None

    def _location(self) -> str:
        return f"{SHARDS_DIR}/{self.unit_id}-{self.chunk:04d}.{self.suffix}"

    def _open_chunk(self):
        self._path = self.root / self._location()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temp_path_for(self._path)
        self._open(self._tmp)

    def _write_frame(self, index, frames, metadata):
        return self._location(), self._write_members(index, frames, metadata)

    def _seal_chunk(self) -> None:
        self._close()
        self._tmp.replace(self._path)
        self._tmp = self._path = None

    def discard(self):
        if self._tmp is not None:
            try:
                self._close()
            except OSError:
                pass  # e.g. the disk is full: the temporary goes anyway
            finally:
                self._tmp.unlink(missing_ok=True)
                self._tmp = None
        super().discard()

    @abstractmethod
    def _open(self, path: Path) -> None: ...

    @abstractmethod
    def _close(self) -> None: ...

    @abstractmethod
    def _write_members(self, index, frames, metadata) -> dict[str, str]: ...


def _set_compress_level(info: zipfile.ZipInfo, level: int) -> None:
    """A ZipInfo handed to ``ZipFile.open`` keeps its own level (the archive's applies only to plain names);
    the attribute is ``_compresslevel`` up to Python 3.12, ``compress_level`` from 3.13."""
    for attr in ("compress_level", "_compresslevel"):
        if hasattr(info, attr):
            setattr(info, attr, level)
            return


class NpzEpisodeWriter(_ShardedEpisodeWriter):
    """``numpy.load`` reads the shards; arrays are written straight into the archive (no temp copies)."""

    suffix = "npz"

    def _open(self, path):
        method = zipfile.ZIP_DEFLATED if self.output.compress else zipfile.ZIP_STORED
        self._zip = zipfile.ZipFile(
            path, "w", compression=method, compresslevel=NPZ_DEFLATE_LEVEL, allowZip64=True
        )

    def _close(self):
        self._zip.close()

    def _write_members(self, index, frames, metadata):
        files = {}
        for key, array in frames.items():
            name = f"{index:06d}.{safe_name(key)}"
            info = zipfile.ZipInfo(name + ".npy", date_time=_FIXED_ZIP_TIME)
            info.compress_type = self._zip.compression
            _set_compress_level(info, NPZ_DEFLATE_LEVEL)
            info.external_attr = 0o644 << 16
            # One contiguous copy, written as a buffer (write_array would copy twice for the flipped views).
            data = np.asarray(array)
            data = data if data.flags.c_contiguous else data.copy(order="C")  # keeps 0-d arrays 0-d
            with self._zip.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(data))
                member.write(memoryview(data.reshape(-1).view(np.uint8)))
            files[key] = name
        return files


class WebDatasetEpisodeWriter(_ShardedEpisodeWriter):
    """Tar shards in the WebDataset convention: a sample is every member sharing the ``<unit>_<index>`` key."""

    suffix = "tar"

    def _open(self, path):
        self._tar = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)

    def _close(self):
        self._tar.close()

    def _add_member(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = 0
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))

    def _write_members(self, index, frames, metadata):
        sample = f"{self.unit_id}_{index:06d}"
        files = {}
        for key, array in frames.items():
            ext, data = self._encode(key, array, prefer_png=True)
            name = f"{sample}.{safe_name(key)}.{ext}"
            self._add_member(name, data)
            files[key] = name
        if isinstance(metadata, PackedMap):
            metadata = metadata.unpack()
        self._add_member(f"{sample}.json", dumps_json(metadata).encode())
        return files


WRITERS: dict[str, type[EpisodeWriter]] = {
    "png": PngEpisodeWriter,
    "npz": NpzEpisodeWriter,
    "webdataset": WebDatasetEpisodeWriter,
}


def open_episode_writer(root: Path, unit_id: str, output: OutputSpec, depth_format: str) -> EpisodeWriter:
    return WRITERS[output.format](root, unit_id, output, depth_format)
