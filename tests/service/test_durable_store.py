"""The records database and the data root's lock: migrations, refusals that touch nothing, one service per root.

The service-level refusals run real ``unirender serve`` processes (no player starts: a second or so each)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from durable_helpers import Service

from unirender.service.data_root import LOCK_FILE, DataRoot, DataRootInUse
from unirender.service.store import (
    DATABASE,
    MIGRATIONS,
    SCHEMA_VERSION,
    ServiceStore,
    SessionRecord,
    StoreError,
)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file() and p.name != LOCK_FILE}


def test_a_new_database_gets_every_migration_and_a_schema_version(tmp_path):
    store = ServiceStore(tmp_path / DATABASE)
    try:
        assert store.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
        assert store.jobs() == [] and store.sessions() == []
        mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
    finally:
        store.close()
    again = ServiceStore(tmp_path / DATABASE)  # opening an up-to-date database changes nothing
    try:
        assert again.schema_version() == SCHEMA_VERSION
    finally:
        again.close()


def test_job_rows_round_trip_and_sessions_become_lost(tmp_path):
    store = ServiceStore(tmp_path / DATABASE)
    try:
        row = {"id": "j1", "seq": 1, "owner": "alice", "kind": "ai2thor", "spec": {"name": "x", "output": {}},
               "output": "ds", "workers": 1, "state": "queued", "progress": {}, "errors": [],
               "cancel_requested": 0, "created_at": 1.0, "updated_at": 1.0}
        store.insert_job(row)
        store.update_job("j1", state="running", progress={"frames_done": 3}, started_at=2.0)
        (back,) = store.jobs()
        assert back["state"] == "running" and back["progress"] == {"frames_done": 3}
        assert json.loads(back["spec"]) == row["spec"]  # its text: decoded by whoever needs it
        with pytest.raises(ValueError, match="not job columns"):
            store.update_job("j1", **{"state = 'x'; --": 1})  # column names are never taken from input
        store.insert_session(SessionRecord("s1", "alice", "live", None, {"pid": 1}, 5.0, None))
        store.mark_sessions_lost("gone", 6.0)
        (lost,) = store.sessions("lost")
        assert lost.reason == "gone" and lost.ended_at == 6.0 and lost.info == {"pid": 1}
        assert store.expire_sessions(before=7.0) == 1 and store.sessions() == []
    finally:
        store.close()


def test_an_older_database_is_migrated_in_place_and_a_failed_migration_changes_nothing(tmp_path, monkeypatch):
    import unirender.service.store as store_module

    path = tmp_path / DATABASE
    store = ServiceStore(path)
    store.insert_session(SessionRecord("s1", "alice", "live", None, {}, 1.0, None))
    store.close()
    broken = (*MIGRATIONS, "ALTER TABLE jobs ADD COLUMN priority INTEGER; ALTER TABLE nowhere ADD COLUMN x TEXT")
    monkeypatch.setattr(store_module, "MIGRATIONS", broken)
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", len(broken))
    with pytest.raises(StoreError, match=f"to schema version {len(broken)} failed .*nowhere.*left at version 1"):
        ServiceStore(path)
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS)
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION)
    store = ServiceStore(path)
    try:  # rolled back whole: no half-added column, the version unchanged, the rows kept
        assert store.schema_version() == SCHEMA_VERSION
        assert "priority" not in {r[1] for r in store._db.execute("PRAGMA table_info(jobs)")}
        assert [r.id for r in store.sessions()] == ["s1"]
    finally:
        store.close()
    upgraded = (*MIGRATIONS, "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
    monkeypatch.setattr(store_module, "MIGRATIONS", upgraded)
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", len(upgraded))
    store = ServiceStore(path)
    try:
        assert store.schema_version() == len(upgraded)
        assert "priority" in {r[1] for r in store._db.execute("PRAGMA table_info(jobs)")}
        assert [r.id for r in store.sessions()] == ["s1"]
    finally:
        store.close()


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / DATABASE
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version "
                     f"VALUES ({SCHEMA_VERSION + 7}); CREATE TABLE jobs (id TEXT);")
    db.close()
    before = _files(tmp_path)
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 7}, written by a newer unirender"):
        ServiceStore(path)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign"])
def test_a_damaged_or_foreign_database_is_refused_and_left_untouched(tmp_path, damage):
    path = tmp_path / DATABASE
    if damage == "garbage":
        path.write_bytes(os.urandom(8192))
    else:
        store = ServiceStore(path)
        store.close()
        if damage == "truncated":
            data = path.read_bytes()
            path.write_bytes(data[:100] + b"\xff" * (len(data) - 100))  # header intact, pages destroyed
        else:
            path.unlink()
            db = sqlite3.connect(path)
            db.execute("CREATE TABLE photos (id INTEGER)")
            db.commit()
            db.close()
    before = _files(tmp_path)
    with pytest.raises(StoreError, match="Nothing was changed"):
        ServiceStore(path)
    assert _files(tmp_path) == before


def test_the_data_root_lock_admits_one_holder(tmp_path):
    first = DataRoot.open(tmp_path, holder="first")
    try:
        with pytest.raises(DataRootInUse, match=f"pid {os.getpid()}, first"):
            DataRoot.open(tmp_path)
    finally:
        first.close()
    DataRoot.open(tmp_path).close()  # released on close


def test_an_unusable_data_root_is_a_clear_error(tmp_path):
    from unirender.service.data_root import DataRootError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DataRootError, match="cannot use the data root"):
        DataRoot.open(blocker / "data")


def test_reloaded_specs_keep_their_content_hash(tmp_path):
    """A resumed job must be recognised by its own dataset (job.json holds the spec hash)."""
    from unirender.spec import load_spec
    from unirender.spec.mlagents import MLAgentsJobSpec

    ai2thor = load_spec({"environment": {"width": 32, "height": 24}, "workers": "auto",
                         "episodes": [{"scene": "FloorPlan1", "actions": ["Pass", {"action": "RotateRight",
                                                                                      "degrees": 30}]}],
                         "output": {"directory": "x", "format": "npz"}})
    mlagents = load_spec({"environment": {"protocol": "mlagents", "width": 32, "height": 24},
                          "episodes": [{"steps": 3}], "output": {"directory": "y"}})
    assert isinstance(mlagents, MLAgentsJobSpec)
    for spec in (ai2thor, mlagents):
        again = load_spec(spec.model_dump(mode="json"))
        assert type(again) is type(spec) and again.content_hash() == spec.content_hash()


def test_a_second_service_on_one_data_root_refuses_to_start(tmp_path):
    first = Service(tmp_path)
    try:
        second = Service(tmp_path, wait=False)
        assert second.wait_exit(60) == 2
        log = second.log()
        assert "is in use by another unirender service" in log and f"pid {first.process.pid}" in log
        assert "Traceback" not in log
        assert first.call("GET", "/healthz").status_code == 200  # the first one is untouched
    finally:
        first.stop()
    third = Service(tmp_path)  # the lock went with the first one
    third.stop()


@pytest.mark.parametrize("damage", ["corrupt", "newer"])
def test_the_service_refuses_a_database_it_cannot_use_and_writes_nothing(tmp_path, damage):
    data = tmp_path / "data"
    data.mkdir()
    path = data / DATABASE
    if damage == "corrupt":
        path.write_bytes(b"this is not a database" * 100)
    else:
        db = sqlite3.connect(path)
        db.executescript("CREATE TABLE schema_version (version INTEGER NOT NULL); "
                         "INSERT INTO schema_version VALUES (999);")
        db.close()
    before = _files(data)
    mtime = path.stat().st_mtime_ns
    service = Service(tmp_path, wait=False)
    assert service.wait_exit(60) == 2
    log = service.log()
    assert "unirender serve:" in log and "Nothing was changed" in log and "Traceback" not in log
    assert ("not a readable SQLite database" if damage == "corrupt" else "newer unirender") in log
    assert _files(data) == before and path.stat().st_mtime_ns == mtime  # it has exited: nothing can write now
