"""A build's canonical manifest and its digest (no I/O): the build's identity, as an OCI manifest is an image's.

The manifest lists every entry of the build folder, sorted by its relative path (``/``-separated, UTF-8): its
type (``file``, ``dir``, ``symlink``), its mode, and for a file its size and the sha256 of its bytes, for a symlink
its target. Modes are canonical (``0o755`` for a directory or a file with any execute bit, ``0o644`` for other
files, ``0o777`` for a symlink): a zip that lost the run bit, or a umask, does not change what a build *is*;
the executable bit does. The digest is ``sha256:`` + the sha256 of the manifest's canonical JSON (sorted keys, no
whitespace).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

EntryType = Literal["file", "dir", "symlink"]
MANIFEST_VERSION = 1


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    type: EntryType
    mode: int
    size: int = 0
    sha256: str = ""
    target: str = ""

    def as_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"path": self.path, "type": self.type, "mode": self.mode}
        if self.type == "file":
            item.update(size=self.size, sha256=self.sha256)
        elif self.type == "symlink":
            item["target"] = self.target
        return item

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Entry:
        return cls(item["path"], item["type"], int(item["mode"]), int(item.get("size", 0)),
                   item.get("sha256", ""), item.get("target", ""))  # fmt: skip


def canonical_mode(kind: EntryType, mode: int) -> int:
    if kind == "symlink":
        return 0o777
    if kind == "dir" or mode & 0o111:
        return 0o755
    return 0o644


def canonical_bytes(entries: list[Entry]) -> bytes:
    document = {
        "version": MANIFEST_VERSION,
        "entries": [e.as_json() for e in sorted(entries, key=lambda e: e.path)],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest_of(entries: list[Entry]) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(entries)).hexdigest()


def parse(blob: bytes) -> list[Entry]:
    document = json.loads(blob)
    if document.get("version") != MANIFEST_VERSION:
        raise ValueError(f"unknown build manifest version {document.get('version')!r}")
    return [Entry.from_json(item) for item in document["entries"]]


def is_digest(text: str) -> bool:
    hex_part = text.removeprefix("sha256:")
    return (
        text.startswith("sha256:") and len(hex_part) == 64 and all(c in "0123456789abcdef" for c in hex_part)
    )
