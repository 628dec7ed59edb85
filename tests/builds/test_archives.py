"""Unsafe archives are refused with a clear error, and nothing is written to the store."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from unirender.builds import BuildStore, UnsafeArchiveError


@pytest.fixture
def store(tmp_path):
    built = BuildStore(tmp_path / "store")
    yield built
    built.close()


def assert_nothing_written(store: BuildStore) -> None:
    assert store.digests() == []
    assert not list(store.builds_dir.glob(".*")), "a staging folder was left behind"
    assert not [p for p in (store.root / "blobs").rglob("*") if p.is_file()], "blobs were left behind"


def tar_with(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


GOOD = [
    (member("Game_Data", tarfile.DIRTYPE, 0o755), None),
    (member("Game.x86_64", mode=0o755), b"#!/bin/sh\n"),
]

UNSAFE_TARS = {
    "absolute": ([(member("/etc/cron.d/evil"), b"x")], "an absolute path"),
    "dotdot": ([(member("Game_Data/../../evil"), b"x")], "a '..' component"),
    "symlink out": (
        [(member("Game_Data/link", tarfile.SYMTYPE, link="../../etc/passwd"), None)],
        "leaves the build",
    ),
    "absolute symlink": ([(member("link", tarfile.SYMTYPE, link="/etc/passwd"), None)], "outside the build"),
    "hardlink out": ([(member("link", tarfile.LNKTYPE, link="../etc/passwd"), None)], "a '..' component"),
    "device": ([(member("dev", tarfile.CHRTYPE), None)], "a device file"),
    "fifo": ([(member("pipe", tarfile.FIFOTYPE), None)], "a device file, FIFO"),
    "setuid": ([(member("Game.x86_64", mode=0o4755), b"x")], "setuid"),
    "setgid": ([(member("Game.x86_64", mode=0o2755), b"x")], "setuid/setgid"),
    "not utf-8": ([(member("Game_Data/caf\udce9"), b"x")], "not valid UTF-8"),
}


@pytest.mark.parametrize("kind", sorted(UNSAFE_TARS))
def test_unsafe_tar_members_are_refused(kind, tmp_path, store):
    members, message = UNSAFE_TARS[kind]
    archive = tar_with(tmp_path / "build.tar.gz", GOOD + members)
    with pytest.raises(UnsafeArchiveError, match=message):
        store.add(archive)
    assert_nothing_written(store)
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_a_symlink_then_a_write_through_it_is_refused(tmp_path, store):
    archive = tar_with(tmp_path / "build.tar.gz", GOOD + [
        (member("Game_Data/inner", tarfile.SYMTYPE, link="."), None),
        (member("Game_Data/inner/file"), b"x"),
    ])  # fmt: skip
    with pytest.raises(UnsafeArchiveError, match="through the symlink"):
        store.add(archive)
    assert_nothing_written(store)


def test_zstd_tars_are_read_and_checked_the_same_way(tmp_path, store):
    plain = tar_with(tmp_path / "build.tar", GOOD, mode="w")
    (tmp_path / "build.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert store.add(tmp_path / "build.tar.zst").files == 1
    bad = tar_with(tmp_path / "bad.tar", GOOD + [(member("../x"), b"x")], mode="w")
    (tmp_path / "bad.tar.zst").write_bytes(zstandard.ZstdCompressor().compress(bad.read_bytes()))
    other = BuildStore(tmp_path / "other")
    with pytest.raises(UnsafeArchiveError, match=r"\.\."):
        other.add(tmp_path / "bad.tar.zst")
    assert_nothing_written(other)


def zip_with(path: Path, members: list[tuple[str, int, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, mode, data in members:
            info = zipfile.ZipInfo(name)
            info.create_system, info.external_attr = 3, mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, data)
    return path


ZIP_GOOD = [("Game.x86_64", stat.S_IFREG | 0o755, b"#!/bin/sh\n")]
UNSAFE_ZIPS = {
    "absolute": ([("/tmp/evil", stat.S_IFREG | 0o644, b"x")], "an absolute path"),
    "dotdot": ([("a/../../evil", stat.S_IFREG | 0o644, b"x")], "a '..' component"),
    "symlink out": ([("link", stat.S_IFLNK | 0o777, b"../outside")], "leaves the build"),
    "fifo": ([("pipe", stat.S_IFIFO | 0o644, b"")], "a device file, FIFO"),
    "device": ([("dev", stat.S_IFBLK | 0o644, b"")], "a device file"),
    "setuid": ([("su", stat.S_IFREG | 0o4755, b"x")], "setuid"),
}


@pytest.mark.parametrize("kind", sorted(UNSAFE_ZIPS))
def test_unsafe_zip_members_are_refused(kind, tmp_path, store):
    members, message = UNSAFE_ZIPS[kind]
    with pytest.raises(UnsafeArchiveError, match=message):
        store.add(zip_with(tmp_path / "build.zip", ZIP_GOOD + members))
    assert_nothing_written(store)


def test_a_zip_name_that_is_not_utf8(tmp_path, store):
    archive = zip_with(tmp_path / "build.zip", ZIP_GOOD + [("Game_Data/cafX", stat.S_IFREG | 0o644, b"x")])
    raw = archive.read_bytes()
    assert raw.count(b"Game_Data/cafX") == 2  # local header and central directory; the UTF-8 flag is unset
    archive.write_bytes(raw.replace(b"Game_Data/cafX", b"Game_Data/caf\xe9"))
    with pytest.raises(UnsafeArchiveError, match="not valid UTF-8"):
        store.add(archive)
    assert_nothing_written(store)


def test_a_zip_bomb_over_the_size_limit_is_refused_before_unpacking(tmp_path, store):
    archive = zip_with(
        tmp_path / "bomb.zip", ZIP_GOOD + [("Game_Data/zeros", stat.S_IFREG | 0o644, bytes(8 << 20))]
    )
    assert archive.stat().st_size < 100 << 10
    with pytest.raises(UnsafeArchiveError, match="declares .* bytes unpacked, over the limit"):
        store.add(archive, max_bytes=1 << 20)
    assert_nothing_written(store)


def test_a_zip_member_larger_than_it_declares_is_refused(tmp_path, store):
    archive = zip_with(
        tmp_path / "liar.zip", ZIP_GOOD + [("Game_Data/zeros", stat.S_IFREG | 0o644, bytes(1 << 20))]
    )
    raw = bytearray(archive.read_bytes())
    declared = (1 << 20).to_bytes(4, "little")
    # Every header's uncompressed size of that member says 1 KiB; the data still inflates to 1 MiB.
    for offset in [i for i in range(len(raw) - 4) if raw[i : i + 4] == declared]:
        raw[offset : offset + 4] = (1024).to_bytes(4, "little")
    archive.write_bytes(bytes(raw))
    with pytest.raises(UnsafeArchiveError, match="declared|more than its declared"):
        store.add(archive)
    assert_nothing_written(store)


def test_a_tar_bomb_over_the_size_limit_is_refused(tmp_path, store):
    archive = tar_with(tmp_path / "bomb.tar.gz", GOOD + [(member("Game_Data/zeros"), bytes(4 << 20))])
    with pytest.raises(UnsafeArchiveError, match="more than 1048576 bytes"):
        store.add(archive, max_bytes=1 << 20)
    assert_nothing_written(store)


def test_a_truncated_tar_is_refused(tmp_path, store):
    archive = tar_with(
        tmp_path / "cut.tar", GOOD + [(member("Game_Data/big"), os.urandom(64 << 10))], mode="w"
    )
    archive.write_bytes(archive.read_bytes()[: 40 << 10])
    with pytest.raises(UnsafeArchiveError, match="sizes do not match|declared"):
        store.add(archive)
    assert_nothing_written(store)
