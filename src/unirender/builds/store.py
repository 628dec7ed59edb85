"""The content-addressed build store: a build's files stored once by content, published atomically, read-only.

Layout (docs/builds.md)::

    <root>/blobs/sha256/<ab>/<hex>[.x]     each distinct file once (``.x``: executable), read-only
    <root>/builds/<hex>/manifest.json      the canonical manifest: sha256 of these bytes is the build's digest
    <root>/builds/<hex>/info.json          what was detected, size, file count, source, when added
    <root>/builds/<hex>/files/...          the build as a tree of hard links to its blobs, read-only
    <root>/tags/<name>/<tag>               a mutable name over an immutable digest
    <root>/tmp/                            downloads and uploads in progress

A build is published by one ``rename`` of its staged folder (``builds/.staging-*``) to ``builds/<hex>``: before it
nothing is visible, after it everything is; a second add of the same bytes finds the folder there (or loses the
rename) and drops its copy. Launching only reads (a tag file, ``info.json``): a store on a read-only mount or a
shared file system serves launches, and a stored build is never re-hashed to launch it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tarfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from unirender.builds import archive, bounds, manifest
from unirender.builds.cache import DigestCache, sha256_file
from unirender.builds.detect import AI2THOR_NAME, BuildInfo, detect
from unirender.builds.errors import BuildError, BuildNotFoundError, DigestMismatchError, UnsafeArchiveError
from unirender.builds.manifest import Entry

_CHUNK = 1 << 20
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
EXPORT_MANIFEST = "unirender-build.json"
AI2THOR = "ai2thor"
# A platform's preferred AI2-THOR build when ``ai2thor:<commit>`` is named without one.
AI2THOR_PLATFORM_ORDER = ("CloudRendering", "Linux64", "LinuxHeadlessSimulation", "OSXIntel64")


def default_root() -> Path:
    if configured := os.environ.get("UNIRENDER_BUILDS"):
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "unirender" / "builds"


def split_reference(reference: str) -> tuple[str, str]:
    """``name[:tag]`` -> (name, tag); the tag defaults to ``latest``."""
    name, _, tag = reference.partition(":")
    tag = tag or "latest"
    if not NAME.match(name):
        raise BuildError(
            f"{reference!r}: a build name is lower-case letters, digits, '.', '_' or '-' (got {name!r})"
        )
    if not TAG.match(tag):
        raise BuildError(
            f"{reference!r}: a tag is letters, digits, '.', '_' or '-', at most 128 (got {tag!r})"
        )
    return name, tag


def is_reference(text: str) -> bool:
    """Whether ``text`` names a stored build (``sha256:<hex>``, ``name:tag``, ``ai2thor:<commit>``) rather than a
    path: a path has a ``/`` (or is an existing file), a reference has a ``:`` and no ``/``."""
    text = str(text)
    return ":" in text and "/" not in text and not os.path.exists(text)


@dataclass(frozen=True)
class StoredBuild:
    digest: str
    path: Path  # builds/<hex>
    info: BuildInfo
    size: int
    files: int
    added: float
    source: str = ""
    names: tuple[str, ...] = field(default=())

    @property
    def root(self) -> Path:
        """The build's folder, as Unity wrote it."""
        return self.path / "files"

    @property
    def executable(self) -> Path | None:
        return self.root / self.info.executable if self.info.executable else None

    def as_json(self) -> dict:
        return {"digest": self.digest, "names": list(self.names), "size": self.size, "files": self.files,
                "added": self.added, "source": self.source, "path": str(self.root),
                **self.info.as_json()}  # fmt: skip


def _make_writable(root: Path) -> None:
    for directory, dirs, _files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in dirs:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)


def remove_tree(root: Path) -> None:
    """Remove a (read-only) staged or published tree."""
    if not os.path.lexists(root):
        return
    with contextlib.suppress(FileNotFoundError):
        _make_writable(root)
    shutil.rmtree(root, ignore_errors=True)


def _seal(root: Path) -> None:
    """Directories read-only, bottom-up (files are read-only blobs already)."""
    for directory, _dirs, _files in os.walk(root, topdown=False):
        os.chmod(directory, 0o555)


class Upload:
    """Bytes arriving for the store (a pull, or another process's upload: issue 34's service and Ray fetches):
    written to ``tmp/``, hashed as they come, published by :meth:`BuildStore.publish_upload` only when checked.

    Resumable: an upload opened again with the same ``key`` continues after the bytes already there."""

    def __init__(self, store: BuildStore, key: str, suffix: str, hint: str = "") -> None:
        self.store = store
        self.hint = (
            hint  # the name it came by (an archive's file name): detection reads AI2-THOR commits from it
        )
        self.path = store.root / "tmp" / f"upload-{key}{suffix}"
        self._hash = hashlib.sha256()
        if self.path.exists():
            with open(self.path, "rb") as f:
                hashlib.file_digest(f, lambda: self._hash)
        self._file = open(self.path, "ab")  # noqa: SIM115 (closed by close/publish/abort)
        self.size = self._file.tell()

    def restart(self) -> None:
        """Drop the bytes so far (a server that does not resume)."""
        self._file.close()
        self._hash = hashlib.sha256()
        self._file = open(self.path, "wb")  # noqa: SIM115
        self.size = 0

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def close(self) -> None:
        self._file.close()

    def abort(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


_FROM_ENV = object()


class BuildStore:
    def __init__(
        self, root: str | os.PathLike | None = None, *, max_bytes: int | str | None = _FROM_ENV
    ) -> None:
        """``max_bytes``: the store's bound (its blobs' bytes; builds.bounds): a publish past it evicts least
        recently used builds no player leases. Default ``$UNIRENDER_BUILDS_MAX_BYTES``; None: unbounded. (Not
        ``add(max_bytes=)``, which limits what one archive may unpack to.)"""
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.max_bytes = (
            bounds.default_max_bytes() if max_bytes is _FROM_ENV else bounds.parse_size(max_bytes)
        )
        self._cache: DigestCache | None = None
        self._created = threading.local()  # the blobs the add in progress on this thread created

    # ------------------------------------------------------------------ layout
    @property
    def builds_dir(self) -> Path:
        return self.root / "builds"

    def _ensure(self) -> None:
        for sub in ("blobs/sha256", "builds", "tags", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def cache(self) -> DigestCache:
        if self._cache is None:
            path = self.root / "digests.sqlite"
            writable = os.access(self.root, os.W_OK) if self.root.exists() else True
            if writable:
                with contextlib.suppress(OSError):
                    self.root.mkdir(parents=True, exist_ok=True)
            self._cache = DigestCache(path if writable and self.root.is_dir() else None)
        return self._cache

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def blob_path(self, sha: str, executable: bool) -> Path:
        return self.root / "blobs" / "sha256" / sha[:2] / (sha + (".x" if executable else ""))

    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        """Adds share the store; rm and gc hold it alone (gc must not collect a blob an add is linking)."""
        self._ensure()
        with open(self.root / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _staging(self) -> Iterator[Path]:
        """A private folder to build in; removed afterwards (published: renamed away already). On an error the
        blobs it created that no build links are removed too: a failed add (a full disk) leaves nothing."""
        staging = self.builds_dir / f".staging-{secrets.token_hex(8)}"
        (staging / "files").mkdir(parents=True)
        self._created.blobs = []
        # The blob shard folders (blobs/sha256/<ab>) known to exist: one mkdir per shard per add, not one per file.
        self._created.shards = set()
        try:
            yield staging
        except BaseException as exc:
            remove_tree(staging)
            for blob in self._created.blobs:
                with contextlib.suppress(OSError):
                    if os.lstat(blob).st_nlink == 1:
                        os.unlink(blob)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise BuildError(
                    f"no space left in the build store {self.root} ({exc}); nothing was published"
                ) from exc
            raise
        finally:
            remove_tree(staging)
            self._created.blobs = []
            self._created.shards = set()

    # ------------------------------------------------------------------ adding
    def add(self, source: str | os.PathLike, name: str | None = None, *, max_bytes: int = archive.DEFAULT_MAX_BYTES,
            expect: str | None = None, hint: str = "") -> StoredBuild:  # fmt: skip
        """Add a build folder or archive; returns the stored build (the existing one if these bytes are there).

        ``expect``: a build digest (``sha256:<hex>``) the result must have, checked before it is published."""
        source = Path(source).expanduser()
        if not source.exists():
            raise BuildError(f"{source}: no such build folder or archive")
        if source.is_dir() and (known := self._known_digest(source.resolve())) and expect in (None, known):
            if (self.builds_dir / known.removeprefix("sha256:")).is_dir():  # stored already: stat only
                if name:
                    self.tag(known, name)
                return self.get(known)
        with self._lock(exclusive=False), self._staging() as staging:
            if source.is_dir():
                entries = self._copy_in(source.resolve(), staging / "files")
                self.cache.flush()
                hint = hint or source.resolve().name
            elif archive.is_archive(source):
                archive.extract(source, staging / "files", max_bytes=max_bytes)
                self._unwrap_single_folder(staging / "files")
                entries = self._intern_in_place(staging / "files")
                hint = hint or re.sub(r"\.(zip|tar|tgz|tar\.gz|tar\.zstd?)$", "", source.name, flags=re.I)
            else:
                raise BuildError(
                    f"{source}: neither a build folder nor an archive ({', '.join(archive.ARCHIVE_SUFFIXES)})"
                )
            build = self._publish(staging, entries, hint, str(source), expect)
        if name:
            self.tag(build.digest, name)
        return self.get(build.digest)

    def _unwrap_single_folder(self, files: Path) -> None:
        """Archives often hold the build inside one top folder (``Game/Game.x86_64``): the build is that folder."""
        children = list(files.iterdir())
        if len(children) == 1 and children[0].is_dir() and not children[0].is_symlink():
            inner = children[0]
            if inner.name.endswith(("_Data", ".app")) or inner.name in ("Build", "Managed"):
                return  # that folder is part of the build itself
            hold = files.parent / f".unwrap-{secrets.token_hex(4)}"
            inner.rename(hold)
            files.rmdir()
            hold.rename(files)

    def _walk(self, root: Path, strict: bool = True) -> Iterator[tuple[str, Path, os.stat_result]]:
        """Every entry under ``root`` (sorted), with the store's safety rules applied to a folder as to an archive.
        ``strict=False`` (a digest of a folder outside the store, which stays where it is): links are recorded
        wherever they point, and special files (a FIFO, a socket) are left out."""
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = Path(directory) / name
                rel = path.relative_to(root).as_posix()
                st = path.lstat()
                special = not (
                    stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)
                )
                if not strict:
                    if not special:
                        yield rel, path, st
                    continue
                member = archive.safe_name(rel)
                if stat.S_ISLNK(st.st_mode):
                    archive.check_link(member, os.readlink(path), "symlink")
                elif special:
                    raise UnsafeArchiveError(f"{rel}: a device file, FIFO or socket; a build holds none")
                archive.check_mode(member, st.st_mode)
                yield rel, path, st

    def _entry(self, rel: str, path: Path, st: os.stat_result, sha: str = "") -> Entry:
        if stat.S_ISLNK(st.st_mode):
            return Entry(rel, "symlink", 0o777, target=os.readlink(path))
        if stat.S_ISDIR(st.st_mode):
            return Entry(rel, "dir", 0o755)
        return Entry(rel, "file", manifest.canonical_mode("file", st.st_mode), st.st_size, sha)

    def _copy_in(self, source: Path, files: Path) -> list[Entry]:
        """Copy a folder into staging, hashing as it reads; a file whose digest is known (cache) and stored is
        linked without being read."""
        entries = []
        for rel, path, st in self._walk(source):
            target = files / rel
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(path), target)
            elif stat.S_ISDIR(st.st_mode):
                target.mkdir()
            else:
                executable = bool(st.st_mode & 0o111)
                sha = self.cache.lookup(str(path), st)
                if sha is None or not self._link_existing(sha, executable, target):
                    sha = self._copy_hashing(path, target)
                    if os.stat(path).st_mtime_ns == st.st_mtime_ns:
                        self.cache.remember(str(path), st, sha)
                    self._intern(target, sha, executable)
            entries.append(self._entry(rel, path, st, sha if stat.S_ISREG(st.st_mode) else ""))
        return entries

    def _copy_hashing(self, source: Path, target: Path) -> str:
        digest = hashlib.sha256()
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        with open(source, "rb", buffering=0) as src, open(target, "xb", buffering=0) as dst:
            while count := src.readinto(buffer):
                digest.update(view[:count])
                dst.write(view[:count])
        return digest.hexdigest()

    def _intern_in_place(self, files: Path) -> list[Entry]:
        """Hash the files already in staging (an extracted archive) and swap each for its blob."""
        entries = []
        for rel, path, st in list(self._walk(files)):
            sha = ""
            if stat.S_ISREG(st.st_mode):
                sha = sha256_file(path)
                self._intern(path, sha, bool(st.st_mode & 0o111))
            entries.append(self._entry(rel, path, st, sha))
        return entries

    def _link_existing(self, sha: str, executable: bool, target: Path) -> bool:
        try:
            os.link(self.blob_path(sha, executable), target)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.EMLINK:
                return False
            raise

    def _blob_file(self, sha: str, executable: bool) -> str:
        """:meth:`blob_path` as a string: interning a build of thousands of files made a ``Path`` per file in
        several places, a measurable share of a fetch's CPU (benchmarks/README.md, "Builds reaching render hosts")."""
        return f"{self.root}/blobs/sha256/{sha[:2]}/{sha}{'.x' if executable else ''}"

    def stored_blob(self, sha: str) -> tuple[str, int] | None:
        """The file holding blob ``sha`` (a checked sha256), in either mode, and its size; None when the store has
        no such blob. One ``stat`` for most blobs (most of a build's files are not executable): the routes serving a
        build's blobs ask for thousands of small ones at a time."""
        for executable in (False, True):
            try:
                info = os.stat(path := self._blob_file(sha, executable))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                return path, info.st_size
        return None

    def _intern(self, path: str | os.PathLike, sha: str, executable: bool) -> None:
        """Make staged file ``path`` the blob of ``sha``, or a link to the blob already stored."""
        os.chmod(path, 0o555 if executable else 0o444)
        blob = self._blob_file(sha, executable)
        shards = getattr(self._created, "shards", None)
        if shards is None or sha[:2] not in shards:
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.dirname(blob))
            if shards is not None:
                shards.add(sha[:2])
        try:
            os.link(path, blob)
            self._created.blobs.append(blob)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.lstat(path), os.lstat(blob)):
                    # It is that blob already (a fetch's verified arrival that an earlier, failed publish interned):
                    # renaming one link over another of the same file would do nothing and leave the spare behind.
                    return None
            spare = f"{os.fspath(path)}.~link"
            try:
                os.link(blob, spare)
            except FileNotFoundError:
                # An evictor freed that blob just now (builds.bounds): this file becomes the blob.
                return self._intern(path, sha, executable)
            except OSError as exc:
                if exc.errno == errno.EMLINK:
                    return  # the blob has all the links it may: this build keeps its own copy
                raise
            os.replace(spare, path)

    def _publish(
        self, staging: Path, entries: list[Entry], hint: str, source: str, expect: str | None
    ) -> StoredBuild:
        blob = manifest.canonical_bytes(entries)
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        if expect is not None and expect != digest:
            raise DigestMismatchError(
                f"the build's digest is {digest}, not the expected {expect}; nothing was stored"
            )
        final = self.builds_dir / digest.removeprefix("sha256:")
        if final.exists():
            return self.get(digest)
        info = detect(staging / "files", hint)
        files = [e for e in entries if e.type == "file"]
        record = {"info": info.as_json(), "size": sum(e.size for e in files), "files": len(files),
                  "added": time.time(), "source": source}  # fmt: skip
        for name, data in (("manifest.json", blob), ("info.json", json.dumps(record, indent=1).encode())):
            with open(staging / name, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(staging / name, 0o444)
        if self.max_bytes is not None:  # its blobs are in already: make room, or fail with nothing published
            bounds.evict(self.root, self.max_bytes, reason=f"with {digest} staged")
        _seal(staging)
        os.chmod(staging, 0o755)  # the folder itself stays renamable until it is in place
        try:
            os.rename(staging, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return self.get(digest)  # a concurrent add of the same bytes won: one copy
        os.chmod(final, 0o555)
        with contextlib.suppress(OSError):
            fd = os.open(self.builds_dir, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        return self.get(digest)

    def _known_digest(self, folder: Path) -> str | None:
        """The folder's digest when every file's sha256 is in the cache with an unchanged stat; else None."""
        entries = []
        try:
            for rel, path, st in self._walk(folder):
                sha = ""
                if stat.S_ISREG(st.st_mode):
                    sha = self.cache.lookup(str(path), st)
                    if sha is None:
                        return None
                entries.append(self._entry(rel, path, st, sha))
        except (OSError, BuildError):
            return None
        return manifest.digest_of(entries)

    def digest_folder(self, folder: str | os.PathLike) -> str:
        """The digest a build folder outside the store would be stored under, its files' sha256 remembered by
        (path, size, mtime): a second call on an unchanged folder only stats it."""
        folder = Path(folder).resolve()
        entries = []
        for rel, path, st in self._walk(folder, strict=False):
            sha = self.cache.sha256(str(path)) if stat.S_ISREG(st.st_mode) else ""
            entries.append(self._entry(rel, path, st, sha))
        self.cache.flush()
        return manifest.digest_of(entries)

    # ------------------------------------------------------------------ reading
    def get(self, digest: str, names: bool = True) -> StoredBuild:
        if not manifest.is_digest(digest):
            raise BuildNotFoundError(f"{digest!r} is not a build digest (sha256:<64 hex digits>)")
        path = self.builds_dir / digest.removeprefix("sha256:")
        try:
            record = json.loads((path / "info.json").read_bytes())
        except FileNotFoundError:
            raise BuildNotFoundError(f"no build {digest} in the store {self.root}") from None
        known_names = tuple(self.names_of(digest)) if names else ()
        return StoredBuild(digest, path, BuildInfo(**record["info"]), record["size"], record["files"],
                           record["added"], record.get("source", ""), known_names)  # fmt: skip

    def digests(self) -> list[str]:
        if not self.builds_dir.is_dir():
            return []
        return sorted("sha256:" + p.name for p in self.builds_dir.iterdir()
                      if not p.name.startswith(".") and (p / "info.json").exists())  # fmt: skip

    def list(self) -> list[StoredBuild]:
        return [self.get(d) for d in self.digests()]

    def tags(self) -> dict[str, str]:
        """Every ``name:tag`` -> digest."""
        found = {}
        tags = self.root / "tags"
        if tags.is_dir():
            for name_dir in sorted(tags.iterdir()):
                for tag_file in sorted(name_dir.iterdir()):
                    if not tag_file.name.startswith("."):
                        found[f"{name_dir.name}:{tag_file.name}"] = tag_file.read_text().strip()
        return found

    def names_of(self, digest: str) -> list[str]:
        return [name for name, target in self.tags().items() if target == digest]

    def resolve(self, reference: str, platform: str | None = None, names: bool = True) -> StoredBuild:
        """A reference -> the stored build: ``sha256:<hex>`` (or a unique prefix of 12+ digits), ``name[:tag]``,
        ``ai2thor:<commit>`` (the build for ``platform`` where the store holds several). Reads two small files
        (``names=False``: launching needs not the build's other names)."""
        reference = str(reference).strip()
        if reference.startswith("sha256:"):
            if manifest.is_digest(reference):
                return self.get(reference, names)
            prefix = reference.removeprefix("sha256:")
            matches = (
                [d for d in self.digests() if d.removeprefix("sha256:").startswith(prefix)]
                if len(prefix) >= 12
                else []
            )
            if len(matches) == 1:
                return self.get(matches[0], names)
            raise BuildNotFoundError(
                f"{reference}: {'ambiguous' if matches else 'no such build in ' + str(self.root)}"
            )
        name, tag = split_reference(reference)
        candidates = [tag]
        if name == AI2THOR:
            preferred = [platform] if platform and platform != "auto" else []
            candidates = [f"{tag}-{p}" for p in [*preferred, *AI2THOR_PLATFORM_ORDER]] + [tag]
            if preferred:
                candidates.insert(1, tag)
        for candidate in candidates:
            tag_file = self.root / "tags" / name / candidate
            with contextlib.suppress(FileNotFoundError):
                return self.get(tag_file.read_text().strip(), names)
        if name == AI2THOR:
            raise BuildNotFoundError(
                f"AI2-THOR commit {tag} is not in the build store {self.root}: import AI2-THOR's download cache "
                "with `unirender builds import-ai2thor` (after ai2thor fetched it once), or fetch its archive with "
                f"`unirender builds pull <url of thor-<Platform>-{tag}.zip> --sha256 <its .sha256>`"
            )
        raise BuildNotFoundError(
            f"no build named {name}:{tag} in the store {self.root} (`unirender builds list`)"
        )

    # ------------------------------------------------------------------ names
    def tag(self, digest: str, reference: str) -> None:
        if not (self.builds_dir / digest.removeprefix("sha256:")).is_dir():
            raise BuildNotFoundError(f"no build {digest} in the store {self.root}")
        name, tag = split_reference(reference)
        folder = self.root / "tags" / name
        folder.mkdir(parents=True, exist_ok=True)
        spare = folder / f".{tag}.{secrets.token_hex(4)}"
        spare.write_text(digest + "\n")
        os.replace(spare, folder / tag)

    def untag(self, reference: str) -> None:
        name, tag = split_reference(reference)
        (self.root / "tags" / name / tag).unlink()

    # ------------------------------------------------------------------ checking and removing
    def verify(self, reference: str) -> list[str]:
        """Re-hash a stored build; the paths whose bytes, mode or presence differ from its manifest."""
        build = self.resolve(reference)
        changed = []
        for entry in manifest.parse((build.path / "manifest.json").read_bytes()):
            path = build.root / entry.path
            try:
                st = path.lstat()
            except FileNotFoundError:
                changed.append(f"{entry.path} (missing)")
                continue
            if entry.type == "file":
                if (
                    not stat.S_ISREG(st.st_mode)
                    or st.st_size != entry.size
                    or sha256_file(path) != entry.sha256
                ):
                    changed.append(f"{entry.path} (content)")
                elif manifest.canonical_mode("file", st.st_mode) != entry.mode:
                    changed.append(f"{entry.path} (mode)")
            elif entry.type == "symlink" and (
                not stat.S_ISLNK(st.st_mode) or os.readlink(path) != entry.target
            ):
                changed.append(f"{entry.path} (link)")
            elif entry.type == "dir" and not stat.S_ISDIR(st.st_mode):
                changed.append(f"{entry.path} (type)")
        if manifest.digest_of(manifest.parse((build.path / "manifest.json").read_bytes())) != build.digest:
            changed.append("manifest.json (content)")
        return changed

    def lease(self, reference: str, platform: str | None = None) -> bounds.Lease:
        """Hold the build for a running player (a context manager; ``.release()``): no eviction, ``gc`` or
        ``rm`` removes it meanwhile, across processes; its use time is recorded (builds.bounds)."""
        digest = (
            reference if manifest.is_digest(reference) else self.resolve(reference, platform, False).digest
        )
        return bounds.lease(self.root, digest)

    def remove(self, reference: str, *, force: bool = False) -> StoredBuild:
        """Remove a build and its names; a build a running player leases is refused unless ``force``."""
        build = self.resolve(reference)
        if not force and bounds.is_leased(self.root, build.digest):
            raise bounds.BuildInUseError(
                f"{reference} ({build.digest}) is in use by a running player (it holds a lease); stop the player, "
                "or remove it anyway with --force (the running player keeps its open files)"
            )
        with self._lock(exclusive=True):
            for name in self.names_of(build.digest):
                self.untag(name)
            remove_tree(build.path)
        return build

    def gc(self, max_bytes: int | None = None) -> tuple[int, int]:
        """Remove blobs no build links and abandoned staging folders; (files, bytes) freed. ``max_bytes``: first
        evict least recently used builds no player leases until the store fits (builds.bounds.evict)."""
        freed_files = freed_bytes = 0
        with self._lock(exclusive=True):
            if max_bytes is not None:
                freed_bytes += bounds.evict(self.root, max_bytes, reason="(gc --max-bytes)").freed_bytes
            for stale in [*self.builds_dir.glob(".staging-*"), *self.builds_dir.glob(".evicted-*")]:
                remove_tree(stale)
            bounds.collect_leftovers(self.root)
            for shard in (self.root / "blobs" / "sha256").iterdir():
                for blob in shard.iterdir():
                    st = blob.lstat()
                    if st.st_nlink == 1:  # only the blob's own link: no build's tree holds it
                        blob.unlink()
                        freed_files += 1
                        freed_bytes += st.st_size
        return freed_files, freed_bytes

    def disk_usage(self) -> int:
        """Bytes of file content the store holds (each blob once)."""
        blobs = self.root / "blobs" / "sha256"
        if not blobs.is_dir():
            return 0
        return sum(b.lstat().st_size for shard in blobs.iterdir() for b in shard.iterdir())

    # ------------------------------------------------------------------ moving builds between machines
    def export(self, reference: str, output: str | os.PathLike) -> StoredBuild:
        """A tar of the build with its manifest (``unirender-build.json``): ``import`` on another machine gives
        the same digest."""
        build = self.resolve(reference)
        output = Path(output)
        spare = output.with_name(f".{output.name}.{secrets.token_hex(4)}")
        try:
            with tarfile.open(spare, "w", format=tarfile.PAX_FORMAT) as tar:
                tar.add(build.path / "manifest.json", EXPORT_MANIFEST)
                for entry in manifest.parse((build.path / "manifest.json").read_bytes()):
                    info = tar.gettarinfo(build.root / entry.path, "files/" + entry.path)
                    info.mode, info.uid, info.gid, info.uname, info.gname = entry.mode, 0, 0, "", ""
                    if info.isreg():
                        with open(build.root / entry.path, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        tar.addfile(info)
            os.replace(spare, output)
        finally:
            with contextlib.suppress(FileNotFoundError):
                spare.unlink()
        return build

    def import_(self, source: str | os.PathLike, name: str | None = None, *,
                max_bytes: int = archive.DEFAULT_MAX_BYTES, expect: str | None = None) -> StoredBuild:  # fmt: skip
        """Import an exported tar; the digest its manifest names must be the digest of what it holds (and
        ``expect``, when given: checked before anything is published)."""
        source = Path(source)
        with self._lock(exclusive=False), self._staging() as staging:
            unpacked = staging / "unpacked"
            unpacked.mkdir()
            archive.extract(source, unpacked, max_bytes=max_bytes)
            claimed = unpacked / EXPORT_MANIFEST
            if not claimed.is_file() or not (unpacked / "files").is_dir():
                raise BuildError(
                    f"{source}: not a build exported by `unirender builds export` (no {EXPORT_MANIFEST})"
                )
            claimed_digest = "sha256:" + hashlib.sha256(claimed.read_bytes()).hexdigest()
            if expect is not None and claimed_digest != expect:
                raise DigestMismatchError(f"{source.name}: holds build {claimed_digest}, not {expect}")
            (staging / "files").rmdir()
            (unpacked / "files").rename(staging / "files")
            remove_tree(unpacked)
            entries = self._intern_in_place(staging / "files")
            build = self._publish(staging, entries, source.stem, str(source), claimed_digest)
        if name:
            self.tag(build.digest, name)
        return self.get(build.digest)

    # ------------------------------------------------------------------ downloads and uploads
    def open_upload(self, key: str | None = None, suffix: str = ".zip", hint: str = "") -> Upload:
        """Bytes for the store from elsewhere; ``key`` names a resumable upload (a URL's hash, say)."""
        if key is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key):
            raise BuildError(f"upload key {key!r}: letters, digits, '_' or '-', at most 64")
        if suffix not in archive.ARCHIVE_SUFFIXES:
            raise BuildError(f"upload suffix {suffix!r}: one of {', '.join(archive.ARCHIVE_SUFFIXES)}")
        self._ensure()
        return Upload(self, key or secrets.token_hex(8), suffix, hint)

    def publish_upload(self, upload: Upload, *, name: str | None = None, sha256: str | None = None,
                       max_bytes: int = archive.DEFAULT_MAX_BYTES) -> StoredBuild:  # fmt: skip
        """Check and publish what an upload holds (an archive, or an exported tar). ``sha256``: the archive's own
        sha256 (as AI2-THOR publishes it) or the build's digest; either is checked before anything is published."""
        upload.close()
        try:
            expected_build = None
            if sha256:
                given = sha256.strip().lower()
                if given.removeprefix("sha256:") != upload.sha256:
                    expected_build = given if given.startswith("sha256:") else "sha256:" + given
            if _is_export(upload.path):  # the digest is checked before anything is published
                build = self.import_(upload.path, max_bytes=max_bytes, expect=expected_build)
            else:
                build = self.add(upload.path, max_bytes=max_bytes, expect=expected_build, hint=upload.hint)
        except DigestMismatchError as exc:
            upload.abort()
            raise DigestMismatchError(
                f"{exc}; the downloaded archive's sha256 is {upload.sha256} (neither matches {sha256})"
            ) from None
        except BaseException:
            upload.abort()
            raise
        upload.abort()  # published: the archive itself is not kept
        if name:
            self.tag(build.digest, name)
        return self.get(build.digest)

    def pull(self, url: str, *, sha256: str | None = None, name: str | None = None, timeout: float = 60.0,
             max_bytes: int = archive.DEFAULT_MAX_BYTES, token: str | None = None,
             suffix: str | None = None) -> StoredBuild:  # fmt: skip
        """Download an archive (http, https or file URL), resuming a cut download with ``Range``, and add it.

        ``token``: sent as ``Authorization: Bearer`` (a protected service's ``GET /v1/builds/{digest}``).
        ``suffix``: the archive's kind where the URL's path does not end with one (that route's export tar)."""
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https", "file"):
            raise BuildError(f"{url}: pull takes http, https or file URLs")
        if suffix is None and manifest.is_digest(urllib.parse.unquote(Path(parsed.path).name)):
            suffix = ".tar"  # a service's GET /v1/builds/{digest}: the store's export tar
        suffix = suffix or next((s for s in sorted(archive.ARCHIVE_SUFFIXES, key=len, reverse=True)
                                 if parsed.path.lower().endswith(s)), ".zip")  # fmt: skip
        filename = Path(parsed.path).name
        hint = re.sub(r"\.(zip|tar|tgz|tar\.gz|tar\.zstd?)$", "", filename, flags=re.I)
        upload = self.open_upload(hashlib.sha256(url.encode()).hexdigest()[:32], suffix, hint)
        try:
            _download(url, upload, timeout, max_bytes, token)
        except BaseException:
            upload.close()  # kept for the next pull of the same URL to resume
            raise
        if name is None and (thor := AI2THOR_NAME.search(hint)):
            name = f"{AI2THOR}:{thor.group('commit')}-{thor.group('platform')}"
        build = self.publish_upload(upload, name=name, sha256=sha256, max_bytes=max_bytes)
        if name and name.startswith(f"{AI2THOR}:"):
            self._tag_ai2thor_commit(build)
        return build

    def import_ai2thor(self, releases: str | os.PathLike | None = None) -> list[StoredBuild]:
        """AI2-THOR's download cache (``~/.ai2thor/releases/thor-<Platform>-<commit>/``) into the store, each as
        ``ai2thor:<commit>-<Platform>`` (and ``ai2thor:<commit>`` for the platform preferred for that commit)."""
        releases = Path(releases or Path.home() / ".ai2thor" / "releases").expanduser()
        if not releases.is_dir():
            raise BuildError(f"{releases}: no AI2-THOR releases folder (ai2thor downloads builds there)")
        added = []
        for folder in sorted(releases.iterdir()):
            match = AI2THOR_NAME.fullmatch(folder.name)
            if not folder.is_dir() or not match or folder.name.endswith((".lock", ".tmp")):
                continue
            build = self.add(folder, name=f"{AI2THOR}:{match.group('commit')}-{match.group('platform')}")
            self._tag_ai2thor_commit(build)
            added.append(self.get(build.digest))
        return added

    def _tag_ai2thor_commit(self, build: StoredBuild) -> None:
        commit = build.info.ai2thor_commit
        if not commit:
            return
        current = self.root / "tags" / AI2THOR / commit
        if current.exists():
            with contextlib.suppress(BuildNotFoundError):
                held = self.get(current.read_text().strip())
                order = {p: i for i, p in enumerate(AI2THOR_PLATFORM_ORDER)}
                mine = next(
                    (p for p in AI2THOR_PLATFORM_ORDER if p in build.source or p == build.info.target), ""
                )
                theirs = next(
                    (p for p in AI2THOR_PLATFORM_ORDER if p in held.source or p == held.info.target), ""
                )
                if order.get(theirs, 99) <= order.get(mine, 99):
                    return
        self.tag(build.digest, f"{AI2THOR}:{commit}")


def _is_export(path: Path) -> bool:
    if not path.name.endswith(".tar"):
        return False
    try:
        with tarfile.open(path, "r|") as tar:
            first = tar.next()
            return first is not None and first.name == EXPORT_MANIFEST
    except tarfile.TarError:
        return False


def _download(url: str, upload: Upload, timeout: float, max_bytes: int, token: str | None = None) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "unirender-builds"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    have = upload.size
    if have and not url.startswith("file:"):
        request.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
        status = getattr(response, "status", 200)
        if have and (url.startswith("file:") or status != 206):
            upload.restart()  # the server sends it whole: start over
        length = response.headers.get("Content-Length")
        expected = upload.size + int(length) if length and length.isdigit() else None
        while chunk := response.read(_CHUNK):
            if upload.size + len(chunk) > max_bytes:
                raise UnsafeArchiveError(
                    f"{url}: larger than {max_bytes} bytes (raise the limit with --max-size)"
                )
            upload.write(chunk)
    upload.close()
    if expected is not None and upload.size != expected:
        raise BuildError(
            f"{url}: the download was cut at {upload.size:,} of {expected:,} bytes; nothing was published "
            "(pull again to resume where it stopped)"
        )
