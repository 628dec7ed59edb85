"""A bounded store (issue 46, stage 2): leases held by real processes (a SIGKILLed holder leaves none), least
recently used builds evicted first, a leased build never, an unreachable bound refused with the store as it was,
``gc --max-bytes`` and ``rm`` honouring leases, and the use time a launch records (builds.bounds)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import no_leaks  # noqa: F401
from fixtures.unity_builds import make_build
from unirender import Controller
from unirender.builds import BuildError, BuildNotFoundError, BuildStore, bounds
from unirender.builds.bounds import StoreFullError
from unirender.builds.resolve import controller_build
from unirender.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"
ASSET = (
    64 << 10
)  # each build's own bytes: 4 assets of 64 KiB; the rest of its files it shares with the others

HOLDER = """
import sys
from unirender.builds import BuildStore
leases = [BuildStore(sys.argv[1]).lease(d) for d in sys.argv[2:]]
print("held", flush=True)
sys.stdin.read()  # until the test closes the pipe (or kills us)
"""


@pytest.fixture(autouse=True)
def _clean(no_leaks):  # noqa: F811
    yield


@pytest.fixture
def holders():
    """Start a child process holding leases on builds; every one is killed and reaped at the end."""
    started: list[subprocess.Popen] = []

    def hold(root: Path, *digests: str) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        child = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), *digests], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env, text=True)  # fmt: skip
        started.append(child)
        assert child.stdout.readline() == "held\n"  # the leases are held from here on
        return child

    yield hold
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            stream.close()


def build_folder(tmp_path: Path, variant: int) -> Path:
    return make_build(tmp_path / f"src{variant}", assets=4, asset_size=ASSET, variant=variant, changed=4)


def blob_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "blobs").rglob("*") if p.is_file())  # (an emptied shard folder may stay)


def add_builds(tmp_path: Path, store: BuildStore, count: int) -> list[str]:
    """Builds 1..count, added in that order (so, never launched, least recently used in that order)."""
    return [store.add(build_folder(tmp_path, i), name=f"game:v{i}").digest for i in range(1, count + 1)]


def test_a_lease_is_held_across_processes_and_a_sigkill_releases_it(tmp_path, holders):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    (digest,) = add_builds(tmp_path, store, 1)
    assert not bounds.is_leased(store.root, digest)
    child = holders(store.root, digest)
    assert bounds.is_leased(store.root, digest)
    with pytest.raises(BuildError, match="in use by a running player"):
        store.remove("game:v1")
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not bounds.is_leased(store.root, digest)  # the kernel dropped the lock with the process
    store.remove("game:v1")
    with pytest.raises(BuildNotFoundError):
        store.lease(digest)


def test_a_lease_in_this_process_and_its_release(tmp_path):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    (digest,) = add_builds(tmp_path, store, 1)
    with store.lease("game:v1") as held, store.lease(digest) as second:  # leases share a build
        assert held.held and second.held and bounds.is_leased(store.root, digest)
    assert not bounds.is_leased(store.root, digest)
    # A launch's cost: printed for docs/builds.md (about 10-30 us on a laptop's tmpfs/ext4; well under 1 ms).
    seconds = bounds.measure_lease_seconds(store.root, digest, rounds=200)
    print(f"lease + release: {seconds * 1e6:.1f} us")
    assert seconds < 1e-3


def test_least_recently_used_builds_are_evicted_first(tmp_path):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    first, second, third = add_builds(tmp_path, store, 3)
    store.lease(first).release()  # build 1 was launched: now the most recently used
    bound = store.disk_usage()  # room for exactly three builds
    bounded = BuildStore(store.root, max_bytes=bound)
    fourth = bounded.add(build_folder(tmp_path, 4), name="game:v4").digest
    assert set(bounded.digests()) == {first, third, fourth}  # build 2: added before 3, never launched
    assert "game:v2" not in bounded.tags() and bounded.disk_usage() <= bound
    fifth = bounded.add(build_folder(tmp_path, 5)).digest
    assert set(bounded.digests()) == {first, fourth, fifth}
    assert not list((store.root / "builds").glob(".*"))  # no staging or evicted folder left
    for digest in bounded.digests():
        assert bounded.verify(digest) == []  # blobs shared with the evicted builds are still there


def test_a_leased_build_is_never_evicted(tmp_path, holders):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    first, second, third = add_builds(tmp_path, store, 3)
    child = holders(store.root, first)  # the least recently used one runs a player
    bounded = BuildStore(store.root, max_bytes=store.disk_usage())
    fourth = bounded.add(build_folder(tmp_path, 4)).digest
    assert set(bounded.digests()) == {first, third, fourth}
    child.kill()
    child.wait()
    os.utime(bounds.lease_path(store.root, first), (1000, 1000))  # its launch long ago: the oldest use now
    fifth = bounded.add(build_folder(tmp_path, 5)).digest  # no lease any more: the oldest goes
    assert set(bounded.digests()) == {third, fourth, fifth}


def test_an_unreachable_bound_fails_the_publish_and_changes_nothing(tmp_path, holders):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    digests = add_builds(tmp_path, store, 3)
    holders(store.root, *digests[:2])
    usage, blobs = store.disk_usage(), blob_files(store.root)
    bounded = BuildStore(
        store.root, max_bytes=usage - ASSET
    )  # evicting build 3 alone is not enough for a 4th
    with pytest.raises(
        StoreFullError, match=r"bounded to .* 2 build\(s\) in use by running players were spared"
    ):
        bounded.add(build_folder(tmp_path, 4), name="game:v4")
    assert bounded.digests() == sorted(digests) and "game:v4" not in bounded.tags()
    assert bounded.disk_usage() == usage and blob_files(store.root) == blobs
    assert not list((store.root / "builds").glob(".*"))
    # A build larger than the bound on its own: the same refusal, even with nothing leased.
    with pytest.raises(StoreFullError):
        BuildStore(tmp_path / "small", max_bytes=ASSET).add(build_folder(tmp_path, 5))
    assert BuildStore(tmp_path / "small").digests() == [] and BuildStore(tmp_path / "small").disk_usage() == 0


def test_the_bound_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(bounds.MAX_BYTES_ENV, "2M")
    assert BuildStore(tmp_path / "store").max_bytes == 2 << 20
    monkeypatch.setenv(bounds.MAX_BYTES_ENV, "")
    assert BuildStore(tmp_path / "store").max_bytes is None
    monkeypatch.setenv(bounds.MAX_BYTES_ENV, "lots")
    with pytest.raises(BuildError, match="byte count"):
        BuildStore(tmp_path / "store")


def test_gc_max_bytes_and_rm_honour_leases(tmp_path, holders, capsys):
    store = BuildStore(tmp_path / "store", max_bytes=None)
    first, second, third = add_builds(tmp_path, store, 3)
    holders(store.root, first)

    def cli(*argv: str) -> tuple[int, str, str]:
        rc = main(["builds", "--store", str(store.root), *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, _out, err = cli("gc", "--max-bytes", "1")
    assert rc == 1 and "bounded to 1 bytes" in err and "Nothing was removed" in err
    assert store.digests() == sorted([first, second, third])
    rc, _out, err = cli("rm", "game:v1")
    assert rc == 1 and "in use by a running player" in err and "--force" in err
    one_build = store.disk_usage() - 2 * 4 * ASSET  # the shared bytes and one build's own
    rc, out, _err = cli("gc", "--max-bytes", str(one_build))
    assert rc == 0 and "freed" in out
    assert store.digests() == [first]  # 2 and 3 evicted; the leased 1 kept, though the least recently used
    assert store.verify(first) == [] and store.disk_usage() <= one_build
    rc, _out, _err = cli("rm", "--force", "game:v1")
    assert rc == 0 and store.digests() == []


def test_a_launch_records_the_use_time_and_holds_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIRENDER_BUILDS", str(tmp_path / "store"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FAKE_PLAYER_FLAVOUR", "Linux64")
    store = BuildStore()
    build = store.add(make_build(tmp_path, family="ai2thor"), name="kitchen:v1")
    lease_file = bounds.lease_path(store.root, build.digest)
    assert bounds.last_used(store.root, build.digest, build.added) == build.added  # never launched
    resolved = controller_build(build="kitchen:v1")
    with resolved.lease():
        assert lease_file.stat().st_mtime > build.added - 1
    os.utime(lease_file, (1000, 1000))  # as if last launched long ago
    controller = Controller(build="kitchen:v1", log_dir=tmp_path, width=32, height=24, platform="Linux64",
                            server_start_timeout=60, server_timeout=30)  # fmt: skip
    try:
        assert lease_file.stat().st_mtime > 1000  # the launch recorded its use
        assert bounds.is_leased(store.root, build.digest)
        with pytest.raises(BuildError, match="in use"):
            store.remove("kitchen:v1")
        assert controller.step("MoveAhead").metadata["lastActionSuccess"]
    finally:
        controller.stop()
    assert not bounds.is_leased(store.root, build.digest)  # stop() released it
    # A path inside the store (what the drop-in and the registry launch) is leased as its build.
    with controller_build(str(build.executable)).lease() as held:
        assert held.digest == build.digest and bounds.is_leased(store.root, build.digest)
    assert controller_build("builtin").lease() is None
    store.close()
