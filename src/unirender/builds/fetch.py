"""Fetching a build a store lacks from somewhere that has it (a Ray node from the driver's store, or from a service).

``fetch(store, digest, source)`` is the one way in (docs/builds.md, "Fetching into a node's store"):

* **Once per store.** A per-digest file lock (``<store>/tmp/fetch-<hex>.lock``, ``flock``: across threads and
  processes) makes concurrent fetches of one digest on one node fetch it once; the others wait for the lock and
  find the build published.
* **Content-addressed.** The manifest's digest is checked first; then only the blobs the store does not hold are
  moved (a blob present, in either mode, is never moved again).
* **Verified on arrival.** Each blob is hashed as it arrives and checked against the manifest's sha256; a corrupted
  one is discarded and fetched again, up to ``attempts`` times.
* **Resumable.** Verified blobs and the partial one are kept in ``<store>/tmp/fetch-<hex>/``: a fetch cut midway
  (an error, a killed process) continues where it stopped on the next try.
* **Published as ``builds add`` publishes.** The files are staged as the manifest lists them (the store's safety
  rules applied to every path and link), interned as blobs, and published by the store's own ``_publish`` with the
  digest expected: every entry is checked against the manifest before the one atomic ``rename``.
* **One clear error.** Anything that makes a fetch impossible raises :class:`BuildFetchError` naming the digest,
  the node and the source.

A source serving blobs is anything with ``name`` (how errors name it), ``manifest(digest) -> bytes`` and
``read(sha256, offset, length) -> bytes``, and optionally ``hint(digest) -> str`` (the name it was added under,
which detection reads AI2-THOR commits from), ``read_many`` (several small blobs in one call) and
``stream(sha256, offset)`` (a blob to its end as it arrives): :class:`StoreSource` serves a local store;
:class:`ServiceSource` a service's blob routes (``/v1/builds/{digest}/manifest``, ``/blobs/{sha256}``, ``POST
/blobs``), and the driver's store, which the Ray backend serves with the same routes from an actor
(``unirender.cluster.ray_builds``). A service without those routes (an older one) serves its export tar, which
:func:`fetch` pulls (resumed with ``Range`` by :meth:`BuildStore.pull`) and imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from unirender.builds import archive, manifest
from unirender.builds.errors import BuildError, BuildFetchError, BuildNotFoundError, DigestMismatchError
from unirender.builds.manifest import Entry
from unirender.builds.store import BuildStore, StoredBuild, remove_tree

CHUNK = 8 << 20  # per read from a source that cannot stream (and per batch of small blobs): a round trip amortised
ATTEMPTS = 3  # tries per blob when what arrives does not hash to what the manifest says
# Reads in flight at once. One at a time, each Ray round trip (~15 ms under load) was paid in series: a 64 MiB build
# of 1,100 files took 17.7 s to reach two nodes against a 0.23 s TCP floor (benchmarks/builds.py --distribute).
# The driver's store server answers each connection on a thread of its own (ray_builds.StoreServer).
FETCH_THREADS = 8
# Blobs this small travel several to a read (``read_many``, where a source has it), up to CHUNK bytes a read:
# a Unity build has thousands of small files (assemblies, shaders), each a round trip on its own.
SMALL_BLOB = 1 << 20
# A source that can ``stream(sha256, offset)`` (an HTTP one) sends each blob in one response, read this much at a
# time straight into the hash and the file: one round trip per blob instead of one per CHUNK.
STREAM_READ = 1 << 20
# One batch of small blobs (``read_many``; over HTTP ``POST /v1/builds/{digest}/blobs``) holds at most this many
# blobs and bytes: each file of a build asked on its own costs a round trip (~1.5 ms through a loopback service),
# more than its bytes when there are thousands of small ones.
BATCH_BLOBS = 4096
BATCH_BYTES = 16 << 20


class BlobSource(Protocol):
    name: str

    def manifest(self, digest: str) -> bytes: ...

    def read(self, sha256: str, offset: int, length: int) -> bytes: ...

    # Optional: ``read_many([(sha256, offset, length), ...]) -> [bytes, ...]``, several small blobs in one call.


class StoreSource:
    """A local store as a source (the Ray backend's driver-side actor wraps one; tests use it directly)."""

    def __init__(self, store: BuildStore) -> None:
        self.store = store
        self.name = f"the build store {store.root} on {socket.gethostname()}"

    def manifest(self, digest: str) -> bytes:
        if not manifest.is_digest(digest):
            raise BuildNotFoundError(f"{digest!r} is not a build digest")
        try:
            return (self.store.builds_dir / digest.removeprefix("sha256:") / "manifest.json").read_bytes()
        except FileNotFoundError:
            raise BuildNotFoundError(f"no build {digest} in {self.name}") from None

    def hint(self, digest: str) -> str:
        # detection reads AI2-THOR's commit and platform from the name the build came by (thor-Linux64-<commit>)
        name = Path(self.store.get(digest, names=False).source).name
        return next((name[: -len(s)] for s in archive.ARCHIVE_SUFFIXES if name.lower().endswith(s)), name)

    def read(self, sha256: str, offset: int, length: int) -> bytes:
        if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
            raise BuildError(f"{sha256!r} is not a blob's sha256")
        for executable in (True, False):
            with (
                contextlib.suppress(FileNotFoundError),
                open(self.store.blob_path(sha256, executable), "rb") as f,
            ):
                f.seek(offset)
                return f.read(length)
        raise BuildNotFoundError(f"no blob {sha256} in {self.name}")

    def read_many(self, reads: list[tuple[str, int, int]]) -> list[bytes]:
        return [self.read(sha, offset, length) for sha, offset, length in reads]


class RouteMissing(Exception):
    """The service has no blob routes (an older one): fetch takes its export tar instead."""


class ServiceSource:
    """A service's store (``/v1/builds/{digest}/manifest`` and ``/blobs/{sha256}``), with a bearer token: a blob
    source like the driver's store, so only missing blobs move, FETCH_THREADS at once over keep-alive connections
    (one per thread), each checked on arrival. A service without those routes serves ``GET /v1/builds/{digest}``,
    the export tar, which :func:`fetch` then pulls (resumed with ``Range``) and imports."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0,
                 headers: dict[str, str] | None = None) -> None:  # fmt: skip
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout
        self.headers = dict(headers or {})  # sent with every request (the driver's blob server: the node's id)
        self.name = f"the service {self.url}"
        self._digest: str | None = None
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"ServiceSource({self.url!r})"

    def _open(self, path: str, headers: dict[str, str] | None = None, body: bytes | None = None):
        """A response to ``GET path`` (``POST`` with ``body``) on this thread's keep-alive connection (read it
        whole before the next)."""
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(self.url)
        base = parts.path.rstrip("/")
        head = {"User-Agent": "unirender-builds", **self.headers, **(headers or {})}
        if self.token:
            head["Authorization"] = f"Bearer {self.token}"
        for attempt in (1, 2):  # a keep-alive connection the server closed while idle: once more on a new one
            conn = getattr(self._local, "conn", None)
            if conn is None:
                kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
                conn = self._local.conn = kind(parts.netloc, timeout=self.timeout)
            try:
                conn.request("GET" if body is None else "POST", base + path, body=body, headers=head)
                return conn.getresponse()
            except (ConnectionError, http.client.HTTPException):
                self._drop()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def _request(self, path: str, headers: dict[str, str] | None = None,
                 body: bytes | None = None) -> tuple[int, bytes]:  # fmt: skip
        response = self._open(path, headers, body)
        try:
            return response.status, response.read()
        except BaseException:
            self._drop()
            raise

    def manifest(self, digest: str) -> bytes:
        status, body = self._request(f"/v1/builds/{digest}/manifest")
        if status == 200:
            self._digest = digest
            return body
        code = _error_code(body)
        if status == 404 and code != "build_not_found":
            raise RouteMissing(code)
        raise BuildFetchError(f"{status} {code}: {_error_message(body)}")

    def read(self, sha256: str, offset: int, length: int) -> bytes:
        status, body = self._request(f"/v1/builds/{self._digest}/blobs/{sha256}",
                                     {"Range": f"bytes={offset}-{offset + length - 1}"})  # fmt: skip
        if status == 206 or (status == 200 and offset == 0):
            return body[:length]
        raise BuildFetchError(f"blob {sha256}: {status} {_error_code(body)}: {_error_message(body)}")


    def read_many(self, reads: list[tuple[str, int, int]]) -> list[bytes]:
        """Several whole small blobs in one ``POST .../blobs`` (offsets are 0: :func:`_fetch_missing` batches only
        blobs nothing of which arrived yet); what comes back is cut by the lengths asked (a short or damaged
        answer fails each blob's hash, and the blob is fetched again on its own)."""
        import json

        body = json.dumps({"blobs": [sha for sha, _offset, _length in reads]}).encode()
        status, data = self._request(f"/v1/builds/{self._digest}/blobs", {"Content-Type": "application/json"}, body)
        if status in (404, 405) and _error_code(data) in ("not_found", "method_not_allowed"):
            return [self.read(sha, offset, length) for sha, offset, length in reads]  # a service without the route
        if status != 200:
            raise BuildFetchError(f"{len(reads)} blobs: {status} {_error_code(data)}: {_error_message(data)}")
        pieces, at = [], 0
        for _sha, _offset, length in reads:
            pieces.append(data[at : at + length])
            at += length
        return pieces

    def stream(self, sha256: str, offset: int) -> Iterator[memoryview]:
        """The blob from ``offset`` to its end in one response, as it arrives (``STREAM_READ`` bytes a read, into
        one reused buffer: each piece is valid until the next is asked for)."""
        response = self._open(f"/v1/builds/{self._digest}/blobs/{sha256}",
                              {"Range": f"bytes={offset}-"} if offset else None)  # fmt: skip
        try:
            if not (response.status == 206 or (response.status == 200 and offset == 0)):
                body = response.read()
                raise BuildFetchError(f"blob {sha256}: {response.status} {_error_code(body)}: {_error_message(body)}")
            view = memoryview(bytearray(STREAM_READ))
            while n := response.readinto(view):
                yield view[:n]
        finally:
            if not response.isclosed():  # not read to its end (an error, a consumer that stopped): not reusable
                self._drop()

def _error_code(body: bytes) -> str:
    import json

    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "error"


def _error_message(body: bytes) -> str:
    import json

    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


@dataclass
class FetchStats:
    """What one fetch moved (tests and logs read it)."""

    fetched: bool = False  # False: the store held the build already (or a concurrent fetch published it)
    bytes_moved: int = 0  # bytes read from the source (a retried blob counts twice)
    blobs_moved: int = 0
    blobs_present: int = 0  # blobs the store (or an earlier, cut fetch) held already
    corrupt: int = 0  # blobs discarded because they did not hash to the manifest's sha256


def node_name(node_id: str | None = None) -> str:
    host = socket.gethostname()
    return f"{host} (Ray node {node_id})" if node_id else host


@contextlib.contextmanager
def digest_lock(store: BuildStore, digest: str) -> Iterator[None]:
    """The per-digest fetch lock of ``store``: one fetch of a digest at a time, across threads and processes
    (``flock`` locks an open file description, so two threads opening the file exclude each other too)."""
    tmp = store.root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    with open(tmp / f"fetch-{digest.removeprefix('sha256:')}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch(store: BuildStore, digest: str, source: BlobSource | ServiceSource, *, node_id: str | None = None,
          attempts: int = ATTEMPTS, chunk: int = CHUNK, stats: FetchStats | None = None) -> StoredBuild:  # fmt: skip
    """The build ``digest`` in ``store``, fetched from ``source`` when the store lacks it (see the module doc).
    ``node_id``: named in the error (a Ray node's id). ``stats``: filled in with what was moved."""
    stats = stats if stats is not None else FetchStats()
    if not manifest.is_digest(digest):
        raise BuildFetchError(
            f"{digest!r} is not a build digest (sha256:<64 hex digits>); nothing was fetched"
        )
    with contextlib.suppress(BuildNotFoundError):
        return store.get(digest)  # the common case: a launch only reads
    try:
        with digest_lock(store, digest):
            with contextlib.suppress(BuildNotFoundError):
                return store.get(digest)  # a concurrent fetch published it while this one waited
            stats.fetched = True
            if isinstance(source, ServiceSource):
                try:
                    return _fetch_blobs(store, digest, source, attempts, chunk, stats)
                except RouteMissing:
                    return _pull(store, digest, source, attempts)
            return _fetch_blobs(store, digest, source, attempts, chunk, stats)
    except BuildFetchError as exc:
        raise BuildFetchError(
            f"could not fetch build {digest} into the store {store.root} on node {node_name(node_id)} from "
            f"{source.name}: {exc}"
        ) from exc.__cause__
    except Exception as exc:  # the source's own failures (a dead actor, a refused connection, a full disk)
        raise BuildFetchError(
            f"could not fetch build {digest} into the store {store.root} on node {node_name(node_id)} from "
            f"{source.name}: {type(exc).__name__}: {exc} (what was verified is kept under {store.root / 'tmp'}; "
            "the next try resumes)"
        ) from exc


def _pull(store: BuildStore, digest: str, source: ServiceSource, attempts: int) -> StoredBuild:
    url = f"{source.url.rstrip('/')}/v1/builds/{digest}"
    for attempt in range(1, attempts + 1):
        try:
            # pull resumes a cut download from tmp/ with Range; the import checks the digest before publishing
            return store.pull(url, sha256=digest, token=source.token, suffix=".tar")
        except DigestMismatchError as exc:  # corrupted in transit: pull discarded it; fetch it again
            if attempt == attempts:
                raise BuildFetchError(
                    f"what arrived was not the build, {attempts} times (last: {exc})"
                ) from exc
    raise AssertionError("unreachable")


def _fetch_blobs(store: BuildStore, digest: str, source: BlobSource, attempts: int, chunk: int,
                 stats: FetchStats) -> StoredBuild:  # fmt: skip
    hex_digest = digest.removeprefix("sha256:")
    work = store.root / "tmp" / f"fetch-{hex_digest}"
    (work / "blobs").mkdir(parents=True, exist_ok=True)
    blob = source.manifest(digest)
    if hashlib.sha256(blob).hexdigest() != hex_digest:
        raise BuildFetchError(f"the manifest it sent is not build {digest}'s (its sha256 differs)")
    entries = manifest.parse(blob)
    _check_paths(entries)
    hint = getattr(source, "hint", lambda d: "")(digest)

    # Content-addressed: a blob the store holds (in either mode) or an earlier fetch verified is not moved again.
    # One listing of each folder instead of three stats per blob (thousands of files in a Unity build): what an
    # earlier, cut fetch verified, and which shards of the store hold anything at all (none, in an empty store).
    arrived = {name for name in os.listdir(work / "blobs") if len(name) == 64}  # not the ``.part`` ones
    blobs_root = store.root / "blobs" / "sha256"
    shards = set(os.listdir(blobs_root)) if blobs_root.is_dir() else set()
    missing = []
    for sha, size in sorted({(e.sha256, e.size) for e in entries if e.type == "file"}):
        if sha in arrived or (sha[:2] in shards and store.stored_blob(sha) is not None):
            stats.blobs_present += 1
        else:
            missing.append((sha, size))
    _fetch_missing(source, missing, work / "blobs", attempts, chunk, stats)
    arrived.update(sha for sha, _size in missing)  # every one verified, or _fetch_missing raised

    # The store's shared lock: gc must not collect a blob while it is being linked into the build.
    with store._lock(exclusive=False), store._staging() as staging:  # fmt: skip
        files = f"{staging}/files"
        arrivals = f"{work}/blobs"
        linked: set[str] = set()  # the blobs linked into this build so far
        for entry in entries:
            target = f"{files}/{entry.path}"  # strings: a Path per file was a measurable share of the CPU
            if entry.type == "dir":
                os.mkdir(target)
            elif entry.type == "symlink":
                os.symlink(entry.target, target)
            else:
                executable = bool(entry.mode & 0o111)
                if entry.sha256 in arrived and entry.sha256 not in linked:
                    # Moved by this fetch (or verified by a cut one): the store did not hold it when this fetch
                    # looked, so it is linked from its arrival straight away (a blob another add stored meanwhile
                    # is found by _intern, which links the build to that one instead). Only its first use: the
                    # arrival is then that blob's inode, and a second use in the other mode must not chmod it.
                    os.link(f"{arrivals}/{entry.sha256}", target)
                    store._intern(target, entry.sha256, executable)
                elif not store._link_existing(entry.sha256, executable, target):
                    held = next((path for x in (not executable, executable)
                                 if os.path.exists(path := store._blob_file(entry.sha256, x))), None)  # fmt: skip
                    if held is not None:  # the store has it in the other mode: a local copy, nothing moved
                        with open(held, "rb") as src, open(target, "xb") as dst:
                            while data := src.read(1 << 20):
                                dst.write(data)
                    else:
                        # the verified arrival is kept until publishing (a build may list one blob twice)
                        os.link(f"{arrivals}/{entry.sha256}", target)
                    store._intern(target, entry.sha256, executable)  # its mode, read-only, set there
                linked.add(entry.sha256)
        files = Path(files)
        # Checked as an add checks: the store's safety rules on the staged tree, its entries (type, canonical
        # mode, size; each file's bytes were verified on arrival or are a blob named by its sha256) published
        # with this digest expected, so a tree that differs from the manifest in anything publishes nothing.
        listed = {e.path: e.sha256 for e in entries}
        staged = [store._entry(rel, path, st, listed.get(rel, "") if stat.S_ISREG(st.st_mode) else "")
                  for rel, path, st in store._walk(files)]  # fmt: skip
        build = store._publish(staging, staged, hint, f"fetched from {_source_name(source)}", digest)
    remove_tree(work)
    return build


def _source_name(source: object) -> str:
    return str(getattr(source, "name", source))


def _check_paths(entries: list[Entry]) -> None:
    """A manifest from elsewhere is untrusted: every path must be a plain relative one inside the build, under a
    folder the manifest lists before it, every link's target inside the build (the store's archive rules)."""
    folders = {""}
    for entry in entries:
        member = archive.safe_name(entry.path)
        if member.as_posix() != entry.path or entry.path == ".":
            raise BuildFetchError(f"the manifest lists {entry.path!r}, not a plain relative path")
        parent = member.parent.as_posix()
        if (parent if parent != "." else "") not in folders:
            raise BuildFetchError(f"the manifest lists {entry.path!r} before (or without) its folder")
        if entry.type == "dir":
            folders.add(entry.path)
        elif entry.type == "symlink":
            archive.check_link(member, entry.target, "symlink")
        elif entry.type == "file":
            if len(entry.sha256) != 64 or entry.size < 0:
                raise BuildFetchError(f"the manifest lists {entry.path!r} without a sha256 and size")
        else:
            raise BuildFetchError(f"the manifest lists {entry.path!r} of unknown type {entry.type!r}")
        archive.check_mode(member, entry.mode)


_STATS = threading.Lock()  # FetchStats is counted from the fetching threads


def _count(stats: FetchStats, **amounts: int) -> None:
    with _STATS:
        for field, amount in amounts.items():
            setattr(stats, field, getattr(stats, field) + amount)


def _fetch_missing(source: BlobSource, missing: list[tuple[str, int]], blobs: Path, attempts: int, chunk: int,
                   stats: FetchStats) -> None:  # fmt: skip
    """Every missing blob into ``blobs/<sha>``, FETCH_THREADS reads in flight; small blobs batched where the
    source reads several at once. The first failure stops the rest (what arrived is kept: the next try resumes)."""
    batches: list[list[tuple[str, int]]] = []
    singles: list[tuple[str, int]] = []
    batched = callable(getattr(source, "read_many", None))
    batched_bytes = 0
    for sha, size in missing:
        if batched and size <= SMALL_BLOB and not (blobs / f"{sha}.part").exists():
            if not batches or batched_bytes + size > chunk or len(batches[-1]) >= BATCH_BLOBS:
                batches.append([])
                batched_bytes = 0
            batches[-1].append((sha, size))
            batched_bytes += size
        else:
            singles.append((sha, size))
    with ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="unirender-fetch") as pool:
        futures = [pool.submit(_fetch_batch, source, batch, blobs, attempts, chunk, stats) for batch in batches]
        futures += [pool.submit(_fetch_blob, source, sha, size, blobs / sha, attempts, chunk, stats)
                    for sha, size in singles]  # fmt: skip
        try:
            for future in futures:
                future.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _fetch_batch(source: BlobSource, batch: list[tuple[str, int]], blobs: Path, attempts: int, chunk: int,
                 stats: FetchStats) -> None:  # fmt: skip
    """Several small blobs in one read; one that arrives damaged is fetched again on its own."""
    datas = source.read_many([(sha, 0, size) for sha, size in batch])  # type: ignore[attr-defined]
    for (sha, size), data in zip(batch, datas, strict=True):
        _count(stats, bytes_moved=len(data))
        if len(data) == size and hashlib.sha256(data).hexdigest() == sha:
            part = blobs / f"{sha}.part"
            part.write_bytes(data)
            os.replace(part, blobs / sha)
            _count(stats, blobs_moved=1)
        else:
            _count(stats, corrupt=1)
            _fetch_blob(source, sha, size, blobs / sha, attempts - 1 or 1, chunk, stats)


def _fetch_blob(source: BlobSource, sha: str, size: int, arrived: Path, attempts: int, chunk: int,
                stats: FetchStats) -> None:  # fmt: skip
    """One blob into ``arrived``, through ``arrived.part`` (kept on any error: the next fetch resumes after it)."""
    part = arrived.with_name(arrived.name + ".part")
    for attempt in range(1, attempts + 1):
        digest = hashlib.sha256()
        if part.exists():  # a cut fetch's bytes: hashed here, not moved again
            with open(part, "rb") as f:
                while data := f.read(1 << 20):
                    digest.update(data)
        # Unbuffered: each piece is written as it arrives, so what arrived survives this process (the next fetch
        # resumes after it).
        with open(part, "ab", buffering=0) as out:
            offset = out.tell()
            if offset < size and callable(getattr(source, "stream", None)):
                for data in source.stream(sha, offset):  # type: ignore[attr-defined]
                    data = data[: size - offset]  # more than the manifest's size: what follows fails the hash
                    out.write(data)
                    digest.update(data)
                    offset += len(data)
                    _count(stats, bytes_moved=len(data))
                    if offset >= size:
                        break
            while offset < size:
                data = source.read(sha, offset, min(chunk, size - offset))
                if not data:
                    raise BuildFetchError(f"blob {sha} ended at {offset:,} of its {size:,} bytes")
                out.write(data)
                digest.update(data)
                offset += len(data)
                _count(stats, bytes_moved=len(data))
        if offset == size and digest.hexdigest() == sha:
            os.replace(part, arrived)
            _count(stats, blobs_moved=1)
            return
        _count(stats, corrupt=1)
        part.unlink()  # corrupted at the source or on the way: discarded, fetched again
        if attempt == attempts:
            raise BuildFetchError(
                f"blob {sha} ({size:,} bytes) arrived corrupted {attempts} times (last sha256 "
                f"{digest.hexdigest()}); the source's copy may be damaged"
            )


def pin_build(kwargs: dict, store: BuildStore | None = None) -> tuple[dict, str | None]:
    """Controller kwargs naming a stored build -> the same kwargs naming it by digest (``build="sha256:..."``), and
    the digest; ``(kwargs, None)`` when they name none (``builtin``, a path outside any store, an AI2-THOR commit the
    store lacks: launched as before). Done once where a session is placed, so that a tag moved afterwards cannot
    change what runs, and so that a node can fetch exactly those bytes.

    Named by ``build=`` (a reference), ``executable=`` (a reference, or a path inside this store's ``builds/``) or
    AI2-THOR's ``commit_id=``; a full ``sha256:`` digest pins itself (this store need not hold it)."""
    from unirender.builds.resolve import BUILTIN, build_platform_name
    from unirender.builds.store import is_reference

    store = store or BuildStore()
    build, executable, commit = kwargs.get("build"), kwargs.get("executable"), kwargs.get("commit_id")
    platform = build_platform_name(kwargs.get("platform"))
    digest = None
    if build is not None:
        key, reference = "build", str(build)
    elif executable is not None and str(executable) != BUILTIN and is_reference(str(executable)):
        key, reference = "executable", str(executable)
    elif commit is not None:
        key, reference = "commit_id", f"ai2thor:{commit}"
    elif executable is not None and str(executable) != BUILTIN:
        key, reference = "executable", None
        path = Path(os.fspath(executable)).resolve()
        builds = store.builds_dir.resolve()
        if not path.is_relative_to(builds) or len(path.relative_to(builds).parts) < 3:
            return kwargs, None  # a path outside the store: every node must have it there, as before
        digest = "sha256:" + path.relative_to(builds).parts[0]
        store.get(digest)  # a path into a build folder being staged or removed: not a build
    else:
        return kwargs, None
    if reference is not None:
        if manifest.is_digest(reference):
            digest = reference
        else:
            try:
                digest = store.resolve(reference, platform=platform, names=False).digest
            except BuildNotFoundError:
                if key == "commit_id":
                    return (
                        kwargs,
                        None,
                    )  # AI2-THOR's own download cache may have it (resolve.controller_build)
                raise
    pinned = {k: v for k, v in kwargs.items() if k not in ("build", "executable", "commit_id")}
    pinned["build"] = digest
    return pinned, digest
