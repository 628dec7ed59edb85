"""Safe extraction of build archives (``.zip``, ``.tar``, ``.tar.gz``, ``.tar.zst``) as Unity, AI2-THOR and ML-Agents
ship them.

A member is refused, with the member's name in the error, when it would land outside the build or is something a
build never needs: an absolute path, a ``..`` component, a symlink or hardlink whose target leaves the build, a
device file or FIFO, a setuid/setgid/sticky bit, a name that is not valid UTF-8. Decompression bombs are refused by
a total-size limit (checked on the declared sizes before anything is written where the format lists them up front,
and on the bytes actually written) and by comparing each member's declared size with what it decompresses to.
The caller extracts into a private staging folder and removes it on any error, so a refused archive leaves nothing.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from unirender.builds.errors import UnsafeArchiveError

DEFAULT_MAX_BYTES = 64 << 30  # more than any Unity build seen; --max-size raises it
_CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def safe_name(name: str) -> PurePosixPath:
    """The member's relative path, or UnsafeArchiveError."""
    if "\x00" in name:
        raise UnsafeArchiveError(f"{name!r}: a NUL byte in a member name")
    try:
        name.encode("utf-8")  # tarfile hands undecodable bytes over as lone surrogates
    except UnicodeEncodeError:
        raise UnsafeArchiveError(f"{name!r}: a member name that is not valid UTF-8") from None
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or name.startswith("\\"):
        raise UnsafeArchiveError(f"{name!r}: an absolute path (a build's members are relative to the build)")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{name!r}: a '..' component (it would write outside the build)")
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


def check_link(member: PurePosixPath, target: str, kind: str) -> None:
    """A link's target must stay inside the build: relative, and not climbing above the build's root."""
    if target.startswith("/") or not target:
        raise UnsafeArchiveError(f"{member}: a {kind} to {target!r}, outside the build")
    depth = len(member.parts) - 1 if kind == "symlink" else 0
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise UnsafeArchiveError(f"{member}: a {kind} to {target!r}, which leaves the build")
        elif part not in ("", "."):
            depth += 1


def check_mode(member: PurePosixPath, mode: int) -> None:
    if mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX):
        raise UnsafeArchiveError(
            f"{member}: setuid/setgid/sticky bits ({oct(mode & 0o7777)}); a build needs none"
        )


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, count: int, member: object) -> None:
        self.used += count
        if self.used > self.limit:
            raise UnsafeArchiveError(
                f"{member}: the archive unpacks to more than {self.limit} bytes (a decompression bomb, or raise "
                "the limit with --max-size)"
            )


def _copy(source, target: Path, member: PurePosixPath, declared: int, budget: _Budget, mode: int) -> None:
    written = 0
    fd = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode & 0o111 else 0o644
    )
    with open(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > declared:
                raise UnsafeArchiveError(
                    f"{member}: unpacks to more than its declared {declared} bytes (a decompression bomb)"
                )
            budget.take(len(chunk), member)
            out.write(chunk)
    if written != declared:
        raise UnsafeArchiveError(f"{member}: declared {declared} bytes, unpacked {written}")


def _make_parent(root: Path, member: PurePosixPath) -> Path:
    target = root.joinpath(*member.parts)
    parent = target.parent
    # A parent created as a symlink by an earlier member must not redirect later writes.
    for ancestor in reversed([parent, *parent.parents]):
        if ancestor == root or root not in ancestor.parents:
            continue
        if ancestor.is_symlink():
            raise UnsafeArchiveError(f"{member}: written through the symlink {ancestor.relative_to(root)}")
    parent.mkdir(parents=True, exist_ok=True)
    return target


def extract(archive: Path, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Unpack ``archive`` into the existing empty folder ``root``; UnsafeArchiveError on the first unsafe member."""
    name = archive.name.lower()
    if name.endswith(".zip"):
        _extract_zip(archive, root, max_bytes)
    elif name.endswith((".tar.zst", ".tar.zstd")):
        import zstandard

        with open(archive, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                _extract_tar(tar, root, max_bytes)
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(archive, mode="r|*") as tar:
            _extract_tar(tar, root, max_bytes)
    else:
        raise UnsafeArchiveError(
            f"{archive.name}: not a build archive (expected one of {', '.join(ARCHIVE_SUFFIXES)})"
        )


def _zip_name(info: zipfile.ZipInfo) -> str:
    if info.flag_bits & 0x800:
        return info.filename
    # Without the UTF-8 flag zipfile decoded the name as cp437; Linux zip tools write UTF-8 (or ASCII) bytes.
    raw = info.orig_filename.encode("cp437")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeArchiveError(f"{raw!r}: a member name that is not valid UTF-8") from None


def _extract_zip(archive: Path, root: Path, max_bytes: int) -> None:
    try:
        bundle = zipfile.ZipFile(archive)
    except UnicodeDecodeError as exc:
        raise UnsafeArchiveError(f"{archive.name}: a member name that is not valid UTF-8 ({exc})") from None
    except zipfile.BadZipFile as exc:
        raise UnsafeArchiveError(f"{archive.name}: not a readable zip ({exc})") from None
    with bundle:
        plan = []
        declared_total = 0
        for info in bundle.infolist():  # every member is checked before one byte is written
            member = safe_name(_zip_name(info))
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            kind = stat.S_IFMT(mode)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
                raise UnsafeArchiveError(f"{member}: a device file, FIFO or socket; a build holds none")
            check_mode(member, mode)
            if kind == stat.S_IFLNK:
                if info.file_size > 4096:
                    raise UnsafeArchiveError(f"{member}: a symlink target of {info.file_size} bytes")
                check_link(member, bundle.read(info).decode("utf-8", "replace"), "symlink")
            declared_total += info.file_size
            plan.append((info, member, mode, kind))
        if declared_total > max_bytes:
            raise UnsafeArchiveError(
                f"{archive.name}: declares {declared_total} bytes unpacked, over the limit of {max_bytes} "
                "(a decompression bomb, or raise the limit with --max-size)"
            )
        budget = _Budget(max_bytes)
        for info, member, mode, kind in plan:
            if member == PurePosixPath("."):
                continue
            target = _make_parent(root, member)
            if info.is_dir() or kind == stat.S_IFDIR:
                target.mkdir(exist_ok=True)
            elif kind == stat.S_IFLNK:
                os.symlink(bundle.read(info).decode("utf-8"), target)
            else:
                try:
                    with bundle.open(info) as source:
                        _copy(source, target, member, info.file_size, budget, mode)
                except zipfile.BadZipFile as exc:  # a CRC or length mismatch: not the bytes declared
                    raise UnsafeArchiveError(
                        f"{member}: {exc} (declared size or checksum does not match)"
                    ) from None


def _extract_tar(tar: tarfile.TarFile, root: Path, max_bytes: int) -> None:
    budget = _Budget(max_bytes)
    try:
        for info in tar:
            member = safe_name(info.name)
            check_mode(member, info.mode)
            if (
                info.isdev()
                or info.isfifo()
                or not (info.isreg() or info.isdir() or info.issym() or info.islnk())
            ):
                raise UnsafeArchiveError(
                    f"{member}: a device file, FIFO or other special file; a build holds none"
                )
            if member == PurePosixPath("."):
                continue
            if info.size > max_bytes - budget.used:
                budget.take(
                    info.size, member
                )  # the declared size alone is over the limit: refuse before reading
            target = _make_parent(root, member)
            if info.isdir():
                target.mkdir(exist_ok=True)
            elif info.issym():
                check_link(member, info.linkname, "symlink")
                os.symlink(info.linkname, target)
            elif info.islnk():
                link = safe_name(info.linkname)
                check_link(member, str(link), "hardlink")
                source = root.joinpath(*link.parts)
                if source.is_symlink() or not source.is_file():
                    raise UnsafeArchiveError(
                        f"{member}: a hardlink to {info.linkname!r}, not a file of the build"
                    )
                os.link(source, target)
            else:
                _copy(tar.extractfile(info), target, member, info.size, budget, info.mode)
    except UnicodeDecodeError as exc:
        raise UnsafeArchiveError(f"a member name that is not valid UTF-8 ({exc})") from None
    except (tarfile.TarError, EOFError) as exc:
        raise UnsafeArchiveError(
            f"not a readable tar archive, or its sizes do not match its data ({exc})"
        ) from None
