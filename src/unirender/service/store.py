"""The service's durable records, in one SQLite database under the data root: jobs and sessions.

Why SQLite (stdlib ``sqlite3``): the queue must outlive the process (a SIGKILL, a redeploy, a pod rescheduled
with its volume), and render managers people trust keep theirs in a database (Flamenco: SQLite). One file,
no server, transactions that survive a killed writer.

- WAL journal, ``synchronous=NORMAL``: a committed write survives the process being killed at any instruction
  (not a power cut: the datasets are not fsynced either, docs/jobs.md).
- One writer: one connection behind one lock, in the one service process that holds the data root's lock
  (:mod:`unirender.service.data_root`); reads go through the same connection (they are a few ms at most).
- Versioned schema: ``schema_version`` holds the version; :data:`MIGRATIONS` are applied in order, each in its
  own transaction. A database from a newer unirender, or one that is not a readable SQLite database, is
  refused with :class:`StoreError` before anything is written to it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirender.errors import UnirenderError

DATABASE = "service.sqlite3"

# Each entry takes the schema from version i to i + 1. Never edit a released entry: append a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL UNIQUE,          -- submission order: listing order and page cursor
        owner TEXT NOT NULL,
        name TEXT,                            -- the spec's name (listed without decoding the spec)
        kind TEXT NOT NULL,                   -- which spec model: ai2thor | mlagents
        spec TEXT NOT NULL,                   -- the validated spec, as JSON
        output TEXT NOT NULL,                 -- output.directory, relative to the owner's folder
        workers INTEGER NOT NULL,
        state TEXT NOT NULL,
        progress TEXT NOT NULL,               -- JSON
        errors TEXT NOT NULL,                 -- JSON list
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        updated_at REAL NOT NULL,
        manifest TEXT                         -- the manifest's path once written
    );
    CREATE INDEX jobs_owner_seq ON jobs (owner, seq);
    CREATE INDEX jobs_finished ON jobs (finished_at);
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,                  -- live | lost
        reason TEXT,
        info TEXT NOT NULL,                   -- JSON: what GET /v1/sessions/{id} showed when it was created
        created_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE INDEX sessions_owner ON sessions (owner);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

JOB_COLUMNS = (
    "id", "seq", "owner", "name", "kind", "spec", "output", "workers", "state", "progress", "errors", "cancel_requested",
    "created_at", "started_at", "finished_at", "updated_at", "manifest",
)  # fmt: skip
_JSON_COLUMNS = {"spec", "progress", "errors", "info"}


class StoreError(UnirenderError):
    """The database cannot be used as it is (newer schema, not a database, damaged); it was left untouched."""


@dataclass
class SessionRecord:
    id: str
    owner: str
    state: str
    reason: str | None
    info: dict[str, Any]
    created_at: float
    ended_at: float | None


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


class ServiceStore:
    """Jobs and session records in ``<data_root>/service.sqlite3``. Thread-safe; one instance per data root."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = self._open()

    # -- opening and migrating --------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5.0)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the service database {self.path}: {exc}") from exc
        try:
            version = self._check(db) if existed else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the service database {self.path} has schema version {version}, written by a newer unirender "
                    f"(this one knows versions up to {SCHEMA_VERSION}); upgrade unirender or use another data "
                    "root. Nothing was changed."
                )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._migrate(db, version)
        except BaseException:
            db.close()
            raise
        return db

    def _check(self, db: sqlite3.Connection) -> int:
        """The schema version of an existing file, reading only (a damaged or foreign file is refused as is)."""
        try:
            ok = db.execute("PRAGMA quick_check").fetchone()
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if ok is None or ok[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {ok[0] if ok else 'no answer'}")
            if "schema_version" not in tables:
                if tables:
                    raise StoreError(
                        f"{self.path} is an SQLite database but not unirender's (tables: {', '.join(sorted(tables))}; "
                        "no schema_version); move it away or use another data root. Nothing was changed."
                    )
                return 0
            row = db.execute("SELECT version FROM schema_version").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"the service database {self.path} is not a readable SQLite database ({exc}); move it away (the "
                "jobs' datasets are safe: resubmitting a spec resumes its dataset) or restore a copy. Nothing was "
                "changed."
            ) from exc
        if row is None or not isinstance(row[0], int):
            raise StoreError(f"the service database {self.path} has no valid schema version; nothing was changed")
        return row[0]

    @staticmethod
    def _migrate(db: sqlite3.Connection, version: int) -> None:
        for target in range(version + 1, SCHEMA_VERSION + 1):
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(MIGRATIONS[target - 1]):
                    db.execute(statement)
                if target == 1:
                    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                    db.execute("INSERT INTO schema_version VALUES (1)")
                else:
                    db.execute("UPDATE schema_version SET version = ?", (target,))
                db.execute("COMMIT")
            except BaseException as exc:
                db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"migrating the service database to schema version {target} failed ({exc}); "
                                     f"it was left at version {target - 1}") from exc
                raise

    def schema_version(self) -> int:
        with self._lock:
            return self._db.execute("SELECT version FROM schema_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- jobs -------------------------------------------------------------------------------------------
    def next_job_seq(self) -> int:
        with self._lock:
            return (self._db.execute("SELECT MAX(seq) FROM jobs").fetchone()[0] or 0) + 1

    def insert_job(self, row: dict[str, Any]) -> None:
        cols = [c for c in JOB_COLUMNS if c in row]
        values = [_dump(row[c]) if c in _JSON_COLUMNS else row[c] for c in cols]
        with self._lock:
            self._db.execute(
                f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values
            )

    def update_job(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        unknown = set(fields) - set(JOB_COLUMNS)
        if unknown:
            raise ValueError(f"not job columns: {sorted(unknown)}")
        cols = list(fields)
        values = [_dump(fields[c]) if c in _JSON_COLUMNS else fields[c] for c in cols]
        with self._lock:
            self._db.execute(
                f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?", [*values, job_id]
            )

    def jobs(self) -> list[dict[str, Any]]:
        """Every job record, in submission order, JSON columns decoded except ``spec`` (its JSON text: a service
        with 10,000 finished jobs decodes only those it resumes or is asked about)."""
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq").fetchall()
        decoded = [i for i, c in enumerate(JOB_COLUMNS) if c in _JSON_COLUMNS and c != "spec"]
        out = []
        for row in rows:
            values = list(row)
            for i in decoded:
                if values[i] is not None:
                    values[i] = json.loads(values[i])
            out.append(dict(zip(JOB_COLUMNS, values, strict=True)))
        return out

    def delete_jobs(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM jobs WHERE id = ?", [(i,) for i in ids])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- sessions ---------------------------------------------------------------------------------------
    def insert_session(self, record: SessionRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO sessions (id, owner, state, reason, info, created_at, ended_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.id, record.owner, record.state, record.reason, _dump(record.info), record.created_at,
                 record.ended_at),
            )

    def delete_session(self, session_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def mark_sessions_lost(self, reason: str, when: float, ids: Iterable[str] | None = None) -> None:
        """Every live record (or those of ``ids``) becomes ``lost`` with ``reason``."""
        with self._lock:
            if ids is None:
                self._db.execute("UPDATE sessions SET state = 'lost', reason = ?, ended_at = ? WHERE state = 'live'",
                                 (reason, when))
            else:
                self._db.executemany(
                    "UPDATE sessions SET state = 'lost', reason = ?, ended_at = ? WHERE id = ? AND state = 'live'",
                    [(reason, when, i) for i in ids],
                )

    def sessions(self, state: str | None = None) -> list[SessionRecord]:
        query = "SELECT id, owner, state, reason, info, created_at, ended_at FROM sessions"
        with self._lock:
            rows = (self._db.execute(query + " WHERE state = ? ORDER BY created_at", (state,)) if state
                    else self._db.execute(query + " ORDER BY created_at")).fetchall()
        return [SessionRecord(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in rows]

    def expire_sessions(self, before: float) -> int:
        with self._lock:
            return self._db.execute("DELETE FROM sessions WHERE state = 'lost' AND ended_at < ?", (before,)).rowcount


def _statements(script: str) -> list[str]:
    """A migration script's statements (``executescript`` would commit the open transaction first)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
