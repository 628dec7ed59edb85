"""sha256 of files outside the store, remembered by (path, device, inode, size, mtime): a second look at an
unchanged file is one ``stat``. A changed size or mtime (or a file replaced by another) misses, and is re-hashed.

Kept in SQLite beside the store; where the store is read-only it is kept in memory for the process instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class DigestCache:
    def __init__(self, path: Path | None) -> None:
        self._memory: dict[str, tuple[tuple[int, int, int, int], str]] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            try:
                self._db = sqlite3.connect(path, timeout=30, check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # a lost row is re-hashed, never wrong
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS digests (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, "
                    "size INTEGER, mtime INTEGER, sha256 TEXT)"
                )
            except sqlite3.Error:
                self.close()  # a read-only store: remember in memory only

    def close(self) -> None:
        if self._db is not None:
            self.flush()
            self._db.close()
            self._db = None

    def lookup(self, path: str, st: os.stat_result) -> str | None:
        with self._lock:
            hit = self._memory.get(path)
            if hit is not None:
                return hit[1] if hit[0] == _key(st) else None
            if self._db is None:
                return None
            try:
                row = self._db.execute(
                    "SELECT dev, ino, size, mtime, sha256 FROM digests WHERE path = ?", (path,)
                ).fetchone()
            except sqlite3.Error:
                return None
        if row is None or tuple(row[:4]) != _key(st):
            return None
        return row[4]

    def remember(self, path: str, st: os.stat_result, sha: str) -> None:
        with self._lock:
            self._memory[path] = (_key(st), sha)
            if self._db is not None:
                try:
                    self._db.execute(
                        "INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?)", (path, *_key(st), sha)
                    )
                except sqlite3.Error:
                    pass  # a full or read-only disk: the memory copy still serves this process

    def flush(self) -> None:
        """Commit what was remembered: one transaction per add or digest, not one (and one sync) per file."""
        with self._lock:
            if self._db is None:
                return
            try:
                self._db.commit()
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()

    def sha256(self, path: str) -> str:
        """The file's sha256, from the cache when its stat is unchanged."""
        st = os.stat(path)
        sha = self.lookup(path, st)
        if sha is None:
            sha = sha256_file(path)
            after = os.stat(path)
            if _key(after) == _key(st):  # not changed while it was read
                self.remember(path, st, sha)
        return sha
