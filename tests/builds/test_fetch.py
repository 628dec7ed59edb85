"""Fetching a build a store lacks (issue 46, stage 1): ``unirender.builds.fetch`` on real stores, with a plain
in-test source (a real store behind a wrapper that counts, corrupts or cuts what it serves)."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from fixtures.unity_builds import asset_bytes, make_build
from unirender.builds import BuildError, BuildFetchError, BuildStore, manifest
from unirender.builds.fetch import FetchStats, StoreSource, fetch

ASSET = 200_000  # bytes per asset: several chunks each at the tests' chunk size
CHUNK = 64 * 1024


class Counting:
    """A source that counts the bytes it serves; ``corrupt``: how many reads of each blob to damage first;
    ``cut_after``: fail every read after this many (a connection that drops)."""

    def __init__(self, inner: StoreSource, corrupt: int = 0, cut_after: int | None = None):
        self.inner, self.name = inner, inner.name
        self.corrupt, self.cut_after = corrupt, cut_after
        self.bytes = self.reads = self.manifests = 0
        self._damaged: dict[str, int] = {}
        self._lock = threading.Lock()

    def manifest(self, digest: str) -> bytes:
        with self._lock:
            self.manifests += 1
        return self.inner.manifest(digest)

    def hint(self, digest: str) -> str:
        return self.inner.hint(digest)

    def read(self, sha: str, offset: int, length: int) -> bytes:
        with self._lock:
            if self.cut_after is not None and self.reads >= self.cut_after:
                raise ConnectionResetError("the source went away")
            self.reads += 1
            data = self.inner.read(sha, offset, length)
            self.bytes += len(data)
            if offset == 0 and self._damaged.get(sha, 0) < self.corrupt:  # flip a byte of the first chunk
                self._damaged[sha] = self._damaged.get(sha, 0) + 1
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            return data


@pytest.fixture
def origin(tmp_path):
    store = BuildStore(tmp_path / "origin")
    build = store.add(make_build(tmp_path / "src", family="ai2thor", player="reference", assets=4,
                                 asset_size=ASSET), name="kitchen:v1")  # fmt: skip
    return store, build


def blob_bytes(build) -> int:
    from unirender.builds import manifest

    entries = manifest.parse((build.path / "manifest.json").read_bytes())
    return sum(size for _sha, size in {(e.sha256, e.size) for e in entries if e.type == "file"})


def test_a_missing_build_is_fetched_verified_and_published(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    source = Counting(StoreSource(store))
    stats = FetchStats()
    fetched = fetch(node, build.digest, source, chunk=CHUNK, stats=stats)
    assert fetched.digest == build.digest and stats.fetched
    assert node.verify(build.digest) == []
    assert fetched.info.family == build.info.family == "ai2thor"
    assert fetched.info.ai2thor_commit == build.info.ai2thor_commit  # detection read the name it came by
    assert source.bytes == stats.bytes_moved == blob_bytes(build)
    assert not list((node.root / "tmp").glob("fetch-*/"))  # the work folder is gone once published
    # a second fetch moves nothing
    again = FetchStats()
    assert fetch(node, build.digest, source, stats=again).digest == build.digest
    assert not again.fetched and source.manifests == 1


def test_blobs_the_store_holds_are_not_moved_again(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    node.add(make_build(tmp_path / "older", family="ai2thor", player="reference", assets=4, asset_size=ASSET,
                        variant=1, changed=1))  # shares all but one asset  # fmt: skip
    source = Counting(StoreSource(store))
    fetch(node, build.digest, source, chunk=CHUNK)
    assert source.bytes == len(asset_bytes(0, ASSET))  # only the one asset the older build lacks
    assert node.verify(build.digest) == []


def test_a_corrupted_blob_is_discarded_and_fetched_again(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    source = Counting(StoreSource(store), corrupt=1)
    stats = FetchStats()
    fetch(node, build.digest, source, chunk=CHUNK, stats=stats)
    assert stats.corrupt == stats.blobs_moved > 0
    assert node.verify(build.digest) == []


def test_a_source_that_always_corrupts_gives_one_clear_error(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    source = Counting(StoreSource(store), corrupt=99)
    with pytest.raises(BuildFetchError) as caught:
        fetch(node, build.digest, source, chunk=CHUNK, node_id="node-7", attempts=2)
    message = str(caught.value)
    assert build.digest in message and "node-7" in message and str(store.root) in message
    assert "corrupted 2 times" in message
    assert node.digests() == []


def test_a_cut_fetch_resumes_without_moving_verified_bytes_again(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    total = blob_bytes(build)
    cut = Counting(StoreSource(store), cut_after=7)
    with pytest.raises(BuildFetchError, match="the source went away"):
        fetch(node, build.digest, cut, chunk=CHUNK)
    assert node.digests() == [] and 0 < cut.bytes < total
    rest = Counting(StoreSource(store))
    stats = FetchStats()
    fetch(node, build.digest, rest, chunk=CHUNK, stats=stats)
    assert cut.bytes + rest.bytes == total  # every byte moved once: verified blobs and the partial one kept
    assert stats.blobs_present > 0
    assert node.verify(build.digest) == []


def test_a_fetch_whose_publish_failed_publishes_on_the_next_try_without_moving_anything(origin, tmp_path):
    """A store too small for the build: the fetch verifies every blob and interns them, then its publish fails and
    publishes nothing. The next try (room made) finds every blob verified, moves nothing, and publishes exactly the
    manifest's tree (a blob interned by the failed try is the arrival itself: nothing is left beside it)."""
    store, build = origin
    root = tmp_path / "node"
    with pytest.raises(BuildFetchError, match="StoreFullError"):
        fetch(BuildStore(root, max_bytes=1000), build.digest, StoreSource(store), chunk=CHUNK)
    assert BuildStore(root, max_bytes=None).digests() == []
    again = Counting(StoreSource(store))
    stats = FetchStats()
    node = BuildStore(root, max_bytes=None)
    assert fetch(node, build.digest, again, chunk=CHUNK, stats=stats).digest == build.digest
    assert again.bytes == 0 and stats.blobs_moved == 0 and stats.blobs_present > 0
    assert node.verify(build.digest) == []
    assert not list(node.get(build.digest).root.rglob("*.~link"))


def test_concurrent_fetches_in_threads_fetch_once(origin, tmp_path):
    store, build = origin
    node_root = tmp_path / "node"
    source = Counting(StoreSource(store))
    results, errors = [], []

    def one():
        try:
            results.append(fetch(BuildStore(node_root), build.digest, source, chunk=CHUNK).digest)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [build.digest] * 4
    assert source.manifests == 1 and source.bytes == blob_bytes(build)


def _fetch_in_process(origin_root: str, node_root: str, digest: str, queue) -> None:
    stats = FetchStats()
    fetch(BuildStore(node_root), digest, StoreSource(BuildStore(origin_root)), chunk=CHUNK, stats=stats)
    queue.put((stats.fetched, stats.bytes_moved))


def test_concurrent_fetches_in_processes_fetch_once(origin, tmp_path):
    store, build = origin
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_fetch_in_process, args=(str(store.root), str(tmp_path / "node"),
                                                             build.digest, queue)) for _ in range(3)]  # fmt: skip
    for p in procs:
        p.start()
    try:
        outcomes = [queue.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    assert sorted(outcomes) == [(False, 0), (False, 0), (True, blob_bytes(build))]
    assert all(p.exitcode == 0 for p in procs)
    assert BuildStore(tmp_path / "node").verify(build.digest) == []


def test_an_impossible_fetch_names_digest_node_and_source(origin, tmp_path):
    store, _build = origin
    missing = "sha256:" + "ab" * 32
    with pytest.raises(BuildFetchError) as caught:
        fetch(BuildStore(tmp_path / "node"), missing, StoreSource(store), node_id="n1")
    message = str(caught.value)
    assert missing in message and "n1" in message and str(store.root) in message
    assert isinstance(caught.value, BuildError)


def test_a_manifest_that_is_not_the_digests_is_refused(origin, tmp_path):
    store, build = origin
    other = store.add(make_build(tmp_path / "other", family="mlagents"))

    class Lying(StoreSource):
        def manifest(self, digest):
            return super().manifest(other.digest)

    with pytest.raises(BuildFetchError, match="manifest it sent is not build"):
        fetch(BuildStore(tmp_path / "node"), build.digest, Lying(store))


def test_an_unsafe_manifest_writes_nothing_outside(origin, tmp_path):
    import hashlib
    import json

    store, _build = origin
    document = {"version": 1, "entries": [{"path": "../escape", "type": "file", "mode": 420, "size": 1,
                                           "sha256": hashlib.sha256(b"x").hexdigest()}]}  # fmt: skip
    blob = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()

    class Evil:
        name = "an evil source"

        def manifest(self, d):
            return blob

        def read(self, sha, offset, length):
            return b"x"

    node = BuildStore(tmp_path / "node")
    with pytest.raises(BuildFetchError, match="escape"):
        fetch(node, digest, Evil())
    assert not (tmp_path / "node" / "escape").exists() and node.digests() == []
    assert not Path(tmp_path / "escape").exists()


def test_pin_build_names_the_build_by_digest(origin, tmp_path):
    from fixtures.unity_builds import COMMIT, executable_of
    from unirender.builds.fetch import pin_build

    store, build = origin
    kwargs = {"build": "kitchen:v1", "width": 64}
    assert pin_build(kwargs, store) == ({"build": build.digest, "width": 64}, build.digest)
    assert pin_build({"executable": "kitchen:v1"}, store) == ({"build": build.digest}, build.digest)
    assert pin_build({"executable": str(build.executable)}, store) == ({"build": build.digest}, build.digest)
    store.tag(build.digest, f"ai2thor:{COMMIT}")
    assert pin_build({"commit_id": COMMIT}, store) == ({"build": build.digest}, build.digest)
    outside = make_build(tmp_path / "outside", family="mlagents")
    for unpinned in ({"executable": "builtin"}, {"executable": str(executable_of(outside))}, {"width": 64},
                     {"commit_id": "f" * 40}):  # fmt: skip
        assert pin_build(unpinned, store) == (unpinned, None)
    held_nowhere = "sha256:" + "12" * 32  # a full digest pins itself; the node's fetch says if no one has it
    assert pin_build({"build": held_nowhere}, store) == ({"build": held_nowhere}, held_nowhere)
    with pytest.raises(BuildError, match="nope:v1"):
        pin_build({"build": "nope:v1"}, store)


class Batching(Counting):
    """A source that reads several small blobs a call (as the driver's store does through Ray)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = 0

    def read_many(self, reads):
        with self._lock:
            self.batches += 1
        return [self.read(sha, offset, length) for sha, offset, length in reads]


def test_small_blobs_travel_several_to_a_read_and_a_damaged_one_is_fetched_again(origin, tmp_path):
    store, build = origin
    node = BuildStore(tmp_path / "node")
    source = Batching(StoreSource(store), corrupt=1)
    stats = FetchStats()
    fetch(node, build.digest, source, chunk=CHUNK, stats=stats)
    blobs = {(e.sha256, e.size) for e in manifest.parse((build.path / "manifest.json").read_bytes())
             if e.type == "file"}  # fmt: skip
    assert 0 < source.batches < len(blobs)  # several blobs a read
    assert stats.corrupt == stats.blobs_moved > 0  # every blob's first copy was damaged, and fetched again
    assert node.verify(build.digest) == []
