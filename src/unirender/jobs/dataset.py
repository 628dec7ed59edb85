"""Read a dataset written by a job back as Events (numpy arrays + metadata), whatever its format."""

from __future__ import annotations

import bisect
import json
import os
import tarfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from unirender.jobs.chunks import read_chunk_records
from unirender.jobs.encoding import decode_array
from unirender.jobs.families import family_of_manifest
from unirender.jobs.manifest import dataset_records
from unirender.jobs.state import MANIFEST, METADATA, JobError


class Dataset:
    """A finished dataset: ``len()``, iteration as Events (an ML-Agents dataset: ``MLAgentsFrame``s),
    ``frames(i)`` as arrays, ``record(i)``, ``records``
    (all of them, read on first use), ``manifest``.

    Opening reads only the manifest; a frame's metadata is read with its chunk (one ``meta/`` file of
    ``frames_per_shard`` records, the last one kept), so iterating a million-frame dataset never holds more than
    one chunk of metadata in memory.
    """

    def __init__(self, directory: str | os.PathLike):
        self.root = Path(directory)
        try:
            self.manifest: dict[str, Any] = json.loads((self.root / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise JobError(
                f"{self.root} is not a finished dataset (no {MANIFEST}); run its job again to finish it"
            ) from None
        self._records: list[dict[str, Any]] | None = None
        self._starts: list[int] = []  # first frame number of each chunk, in dataset order
        self._chunks: list[tuple[dict[str, Any], int]] = []  # (unit entry, chunk number)
        if "units" in self.manifest:
            n = 0
            for unit in self.manifest["units"]:
                for k in range(unit["chunks"]):
                    self._starts.append(n)
                    self._chunks.append((unit, k))
                    n += (
                        self.manifest["output"]["frames_per_shard"]
                        if k < unit["chunks"] - 1
                        else (unit["frames"] - k * self.manifest["output"]["frames_per_shard"])
                    )
            self._length = n
        else:  # written before chunked metadata: one JSON line per frame
            with open(self.root / METADATA, encoding="utf-8") as f:
                self._records = [json.loads(line) for line in f if line.strip()]
            self._length = len(self._records)
        self._cached: tuple[int, list[dict[str, Any]]] | None = None
        self._family = family_of_manifest(self.manifest)  # what wrote it: the frame type it reads back as
        self.format: str = self.manifest["output"]["format"]
        self.depth16_scale: float | None = self.manifest["output"].get("depth16_scale")
        self._archive_path: str | None = None
        self._archive: Any = None

    def __len__(self) -> int:
        return self._length

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every frame record (``unit``, ``episode``, ``repeat``, ``scene``, ``index``, ``location``, ``files``,
        ``metadata``) in dataset order; reads all the metadata on first use."""
        if self._records is None:
            self._records = list(dataset_records(self.root, self.manifest["units"]))
        return self._records

    def record(self, i: int) -> dict[str, Any]:
        if self._records is not None:
            return self._records[i]
        if not 0 <= i < self._length:
            raise IndexError(f"frame {i} of a dataset of {self._length}")
        c = bisect.bisect_right(self._starts, i) - 1
        if self._cached is None or self._cached[0] != c:
            unit, k = self._chunks[c]
            chunk = [
                {
                    "unit": unit["id"],
                    "episode": unit["episode"],
                    "repeat": unit["repeat"],
                    "scene": unit["scene"],
                    **r,
                }
                for r in read_chunk_records(self.root, unit["id"], k)
            ]
            self._cached = (c, chunk)
        return self._cached[1][i - self._starts[c]]

    def __iter__(self) -> Iterator:
        try:
            for i in range(self._length):
                yield self.event(i)
        finally:
            self.close()

    def event(self, i: int):
        """Frame ``i`` as its family reads back (an ``Event``; an ML-Agents dataset's: an ``MLAgentsFrame``)."""
        return self._family.dataset_frame(self.record(i)["metadata"], self.images(i))

    def frames(self, i: int) -> dict[str, np.ndarray]:
        """Deprecated name of :meth:`images` (``frames()`` is an event's arrays: ``Event.frames()``,
        ``MLAgentsEvent.frames(behavior)``; a dataset's are its frames' images)."""
        warnings.warn("Dataset.frames(i) is now Dataset.images(i)", DeprecationWarning, stacklevel=2)
        return self.images(i)

    def images(self, i: int) -> dict[str, np.ndarray]:
        """Frame ``i``'s images as written (third-party images one per camera: ``<name>.<camera>``)."""
        record = self.record(i)
        location = record["location"]
        if self.format == "png":
            return {
                key: self._decode(name, (self.root / location / name).read_bytes())
                for key, name in record["files"].items()
            }
        archive = self._open_archive(location)
        if self.format == "npz":
            return {key: archive[name] for key, name in record["files"].items()}
        return {
            key: self._decode(name, archive.extractfile(name).read()) for key, name in record["files"].items()
        }

    def _decode(self, name: str, data: bytes) -> np.ndarray:
        return decode_array(name, data, depth16_scale=self.depth16_scale)

    def _open_archive(self, location: str):
        # Frames are read in order, so keeping the last shard open reads each shard once.
        if self._archive_path != location:
            self.close()
            path = self.root / location
            if self.format == "npz":
                self._archive = np.load(path, allow_pickle=False)
            else:
                self._archive = tarfile.open(path, "r")
            self._archive_path = location
        return self._archive

    def close(self) -> None:
        if self._archive is not None:
            self._archive.close()
        self._archive = self._archive_path = None

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_dataset(directory: str | os.PathLike) -> Dataset:
    """``for event in unirender.load_dataset(dir): event.frame, event.depth_frame, event.metadata ...``"""
    return Dataset(directory)


__all__ = ["Dataset", "load_dataset"]
