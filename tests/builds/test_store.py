"""The build store: digests, dedup, atomic read-only publication, names, verify, gc, export/import, detection."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from fixtures.unity_builds import COMMIT, UNITY_VERSION, make_build
from unirender.builds import BuildNotFoundError, BuildStore, DigestMismatchError, detect


@pytest.fixture
def store(tmp_path):
    built = BuildStore(tmp_path / "store")
    yield built
    built.close()


def zip_folder(folder: Path, out: Path, *, prefix: str = "") -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob("*")):
            rel = prefix + path.relative_to(folder).as_posix()
            info = zipfile.ZipInfo(rel + ("/" if path.is_dir() else ""))
            if path.is_dir():
                info.create_system, info.external_attr = 3, (stat.S_IFDIR | 0o755) << 16 | 0x10
                bundle.writestr(info, b"")
                continue
            info.create_system = 3
            info.external_attr = (stat.S_IFREG | (path.stat().st_mode & 0o777)) << 16
            bundle.writestr(info, path.read_bytes())
    return out


def test_add_a_folder_detects_what_it_is_and_publishes_it_read_only(tmp_path, store):
    folder = make_build(tmp_path, family="mlagents")
    build = store.add(folder, name="reach:v1")
    assert build.digest.startswith("sha256:") and len(build.digest) == 71
    assert build.info.family == "mlagents" and build.info.unity_version == UNITY_VERSION
    assert build.info.target == "Linux64" and build.info.executable == "Game.x86_64"
    assert (build.info.mlagents_package, build.info.communicator_version) == ("2.0.1", "1.5.0")
    assert build.names == ("reach:v1",) and build.files == 11
    assert os.access(build.executable, os.X_OK)
    for path in [build.path, build.root, *build.root.rglob("*")]:
        assert not path.stat().st_mode & 0o222, f"{path} is writable in the store"
    assert (
        store.resolve("reach:v1") == build == store.resolve(build.digest) == store.resolve(build.digest[:19])
    )
    assert store.verify("reach:v1") == []


def test_the_digest_is_the_bytes_not_where_or_when(tmp_path, store):
    first = make_build(tmp_path / "a", family="mlagents")
    second = make_build(tmp_path / "b", family="mlagents")
    os.utime(second / "UnityPlayer.so", (0, 0))
    assert store.digest_folder(first) == store.digest_folder(second)
    (second / "Game_Data" / "sharedassets0.assets").write_bytes(b"rebuilt")
    assert store.digest_folder(first) != store.digest_folder(second)  # cached digests re-checked on a change
    before = store.digest_folder(first)
    (first / "UnityPlayer.so").chmod(0o755)
    assert store.digest_folder(first) != before  # the same bytes, now executable: another build
    assert store.add(first).digest == store.digest_folder(first)


def test_adding_again_or_concurrently_leaves_one_copy(tmp_path, store):
    folder = make_build(tmp_path, family="mlagents", assets=8, asset_size=64 << 10)
    archive = zip_folder(folder, tmp_path / "Game.zip", prefix="Game/")
    results: list = []
    errors: list = []

    def add(source):
        try:
            results.append(BuildStore(store.root).add(source).digest)
        except Exception as exc:  # noqa: BLE001 (reported by the assert below)
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(s,)) for s in (folder, archive, folder, archive)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and len(set(results)) == 1 and len(results) == 4
    assert store.digests() == [results[0]]
    assert not list(store.builds_dir.glob(".staging-*"))
    blobs = sorted(p for p in (store.root / "blobs").rglob("*") if p.is_file())
    assert len(blobs) == 15  # every distinct file once
    assert store.gc() == (0, 0)


def test_concurrent_adds_from_separate_processes(tmp_path, store):
    folder = make_build(tmp_path, family="ai2thor")
    code = ("import sys; from unirender.builds import BuildStore; "
            "print(BuildStore(sys.argv[1]).add(sys.argv[2]).digest)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path])}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(store.root), str(folder)], stdout=subprocess.PIPE,
                              env=env, text=True) for _ in range(3)]  # fmt: skip
    digests = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(digests) == 1
    assert store.digests() == list(digests)


def test_two_commits_sharing_90_percent_of_files_share_their_bytes(tmp_path, store):
    first = make_build(tmp_path / "one", family="ai2thor", assets=20, asset_size=32 << 10)
    second = make_build(
        tmp_path / "two", family="ai2thor", assets=20, asset_size=32 << 10, variant=1, changed=2
    )
    a = store.add(first)
    used = store.disk_usage()
    b = store.add(second)
    assert a.digest != b.digest
    growth = store.disk_usage() - used
    assert growth == 2 * (32 << 10)  # only the two changed assets are new
    assert growth <= 0.15 * b.size


def test_names_tags_rm_and_gc(tmp_path, store):
    a = store.add(make_build(tmp_path / "a", family="mlagents"), name="game")
    b = store.add(make_build(tmp_path / "b", family="mlagents", variant=1, changed=1), name="game:v2")
    assert store.resolve("game").digest == a.digest and store.resolve("game:latest") == store.resolve("game")
    store.tag(b.digest, "game:latest")
    assert store.resolve("game").digest == b.digest
    with pytest.raises(BuildNotFoundError, match="no build named game:v9"):
        store.resolve("game:v9")
    store.remove("game:v2")
    assert store.digests() == [a.digest] and "game:latest" not in store.tags()
    files, freed = store.gc()
    assert files == 1 and freed == 4096  # the one asset only b had
    assert store.verify(a.digest) == []


def test_verify_names_every_changed_file(tmp_path, store):
    build = store.add(make_build(tmp_path, family="mlagents"))
    asset = build.root / "Game_Data" / "sharedassets1.assets"
    asset.chmod(0o644)
    asset.write_bytes(b"tampered")
    (build.root / "Game_Data" / "Managed").chmod(0o755)
    (build.root / "Game_Data" / "Managed" / "Grpc.Core.dll").unlink()
    assert store.verify(build.digest) == ["Game_Data/Managed/Grpc.Core.dll (missing)",
                                          "Game_Data/sharedassets1.assets (content)"]  # fmt: skip


def test_export_and_import_keep_the_digest(tmp_path, store):
    build = store.add(make_build(tmp_path, family="ai2thor"), name="thor:test")
    tar = tmp_path / "build.tar"
    store.export("thor:test", tar)
    other = BuildStore(tmp_path / "other")
    imported = other.import_(tar, name="thor:test")
    assert imported.digest == build.digest and imported.info == build.info
    assert other.verify("thor:test") == []


def test_an_exported_tar_with_a_false_manifest_is_refused(tmp_path, store):
    import tarfile

    build = store.add(make_build(tmp_path, family="mlagents"))
    tar = tmp_path / "build.tar"
    store.export(build.digest, tar)
    forged = tmp_path / "forged.tar"
    with tarfile.open(tar) as src, tarfile.open(forged, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isreg() else None
            if member.name.endswith("sharedassets0.assets"):
                payload = b"x" * member.size
                import io

                data = io.BytesIO(payload)
            dst.addfile(member, data)
    other = BuildStore(tmp_path / "other")
    with pytest.raises(DigestMismatchError, match="nothing was stored"):
        other.import_(forged)
    assert other.digests() == []


def test_an_expected_digest_is_checked_before_publishing(tmp_path, store):
    with pytest.raises(DigestMismatchError):
        store.add(make_build(tmp_path, family="mlagents"), expect="sha256:" + "0" * 64)
    assert store.digests() == [] and not list(store.builds_dir.glob(".staging-*"))


def test_detection_of_targets_and_families(tmp_path):
    thor = make_build(tmp_path / "t", family="ai2thor", platform="CloudRendering")
    info = detect(thor)
    assert (info.family, info.target, info.ai2thor_commit) == ("ai2thor", "CloudRendering", COMMIT)
    assert info.executable == thor.name and info.unity_version == UNITY_VERSION
    webgl = tmp_path / "web"
    (webgl / "Build").mkdir(parents=True)
    (webgl / "index.html").write_text("<canvas></canvas>")
    (webgl / "Build" / "web.loader.js").write_text("/* Unity 2021.3.8f1 */ function createUnityInstance(){}")
    assert (detect(webgl).target, detect(webgl).unity_version, detect(webgl).executable) == (
        "WebGL",
        "2021.3.8f1",
        "",
    )
    app = tmp_path / "mac" / "Game.app" / "Contents"
    (app / "MacOS").mkdir(parents=True)
    (app / "MacOS" / "Game").write_bytes(b"\xcf\xfa\xed\xfe")
    (app / "Resources" / "Data").mkdir(parents=True)
    (app / "Resources" / "Data" / "globalgamemanagers").write_bytes(b"\x00" * 20 + b"6000.0.30f1\x00")
    mac = detect(tmp_path / "mac")
    assert (mac.target, mac.executable, mac.unity_version) == ("StandaloneOSX", "Game.app/Contents/MacOS/Game",
                                                               "6000.0.30f1")  # fmt: skip
    windows = tmp_path / "win"
    (windows / "Game_Data").mkdir(parents=True)
    (windows / "Game.exe").write_bytes(b"MZ")
    (windows / "UnityPlayer.dll").write_bytes(b"MZ")
    assert (detect(windows).target, detect(windows).family) == ("Windows", "unknown")


def test_a_full_disk_during_add_publishes_nothing_and_the_next_add_succeeds(tmp_path):
    """A real full disk, for any user: a tmpfs in a user and mount namespace of the test's own."""
    import contextlib

    from fixtures.private_tmpfs import private_tmpfs_or_skip
    from unirender.builds import BuildError

    folder = make_build(tmp_path, family="mlagents", assets=16, asset_size=64 << 10)  # ~1 MiB
    mount = tmp_path / "small"
    mount.mkdir()
    with contextlib.ExitStack() as stack:
        disk = private_tmpfs_or_skip(stack, mount, "512k")
        store = BuildStore(disk.path / "store")
        stack.callback(store.close)
        with pytest.raises(BuildError, match="no space left in the build store .*nothing was published"):
            store.add(folder, name="game:v1")
        assert store.digests() == [] and "game:v1" not in store.tags()
        assert not list(store.builds_dir.glob(".*"))
        assert not [p for p in (store.root / "blobs").rglob("*") if p.is_file()]
        disk.resize("4m")
        build = store.add(folder, name="game:v1")
        assert store.verify("game:v1") == [] and build.files == 23
