"""``/v1/builds/{digest}``: a service's build store over HTTP (issue 34; docs/builds.md, "A service's store").

- ``HEAD``/``GET``: whether the store holds the build / the build as the store's export tar (Range requests
  answered: a node or a mirror resumes a cut download), for builds the caller may launch;
- ``PUT`` (scope ``builds:write``): the build's export tar (``unirender builds export``) or a build archive
  (``.zip``/``.tar.gz``/``.tar.zst``, ``Content-Type`` says which), streamed to disk as it arrives, never whole in
  memory; the digest in the URL is checked before anything is published (422 ``digest_mismatch``), the store's
  unsafe-archive rules apply (422 ``unsafe_archive``), a body cut off midway publishes nothing, and two uploads of
  the same build at once leave one copy. Quotas: one upload, a token's uploads, the whole store (413);
- ``DELETE`` (scope ``admin``): removes it from the store;
- ``GET /v1/builds/{digest}/manifest`` and ``GET /v1/builds/{digest}/blobs/{sha256}`` (scope ``sessions``, builds the
  caller may launch): the build's manifest and each of its files by content (Range answered), what a node's
  ``unirender.builds.fetch`` asks for: only the blobs it lacks move, several at once, each checked on arrival, with
  no export tar made or unpacked on either side. A blob is served only as a file of that build.
  ``POST /v1/builds/{digest}/blobs`` (``{"blobs": [sha256, ...]}``): several small ones in one response.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from werkzeug.utils import send_file
from werkzeug.wrappers import Response

from unirender.service.errors import ApiError
from unirender.service.policy import UPLOADED

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
CHUNK = 1 << 20
ARCHIVES = {"application/x-tar": ".tar", "application/zip": ".zip", "application/gzip": ".tar.gz",
            "application/zstd": ".tar.zst"}  # fmt: skip
_export_lock = threading.Lock()


def _digest(digest: str) -> str:
    if not DIGEST.match(digest):
        raise ApiError(400, "invalid_digest", f"a build digest is sha256:<64 hex digits>, got {digest[:80]!r}")
    return digest


def _launchable(app, digest: str):
    from unirender.builds import BuildError

    try:
        stored = app.policy.build_store.get(_digest(digest))
    except BuildError:
        stored = None
    if stored is None or not app.policy.may_launch(digest, stored):
        raise ApiError(404, "build_not_found", f"no build {digest} that this token may launch here")
    return stored


def get_build(app, request, owner, digest):
    stored = _launchable(app, digest)
    if request.method == "HEAD":
        return Response(status=200, headers={"X-Build-Size": str(stored.size), "X-Build-Family":
                                             str(stored.info.family)})  # fmt: skip
    path = _export(app, stored)
    return send_file(str(path), request.environ, mimetype="application/x-tar", conditional=True,
                     download_name=f"{digest.removeprefix('sha256:')[:16]}.tar", etag=digest)  # fmt: skip


HEX = re.compile(r"^[0-9a-f]{64}$")
_blob_sets: dict[str, frozenset[str]] = {}  # digest -> its blobs' sha256s (a build is immutable: parsed once)
_blob_sets_lock = threading.Lock()


def get_build_manifest(app, request, owner, digest):
    stored = _launchable(app, digest)
    return send_file(str(stored.path / "manifest.json"), request.environ, mimetype="application/json",
                     conditional=True, etag=digest)  # fmt: skip


def _blob_file(app, stored, sha256: str) -> tuple[str, int]:
    """Where the store keeps blob ``sha256`` as a file of build ``stored``, and its size (404 when it is not one)."""
    if not HEX.match(sha256):
        raise ApiError(400, "invalid_digest", f"a blob is named by its sha256 (64 hex digits), got {sha256[:80]!r}")
    with _blob_sets_lock:
        blobs = _blob_sets.get(stored.digest)
    if blobs is None:
        from unirender.builds import manifest

        entries = manifest.parse((stored.path / "manifest.json").read_bytes())
        blobs = frozenset(e.sha256 for e in entries if e.type == "file")
        with _blob_sets_lock:
            _blob_sets[stored.digest] = blobs
    found = app.policy.build_store.stored_blob(sha256) if sha256 in blobs else None
    if found is None:
        raise ApiError(404, "blob_not_found", f"build {stored.digest} has no file with sha256 {sha256}")
    return found


def get_build_blob(app, request, owner, digest, sha256):
    path, _size = _blob_file(app, _launchable(app, digest), sha256)
    # No Range: waitress's file wrapper, which the service's channel sends with sendfile (service.server).
    return send_file(path, request.environ, mimetype="application/octet-stream", conditional=True,
                     etag=sha256)  # fmt: skip


def post_build_blobs(app, request, owner, digest):
    """Several small files of the build in one response, their bytes one after another in the order asked
    (the client knows each one's size from the manifest): a build's thousands of small files, one round trip
    each, cost more than its large ones (``unirender.builds.fetch.BATCH_BLOBS``/``BATCH_BYTES`` bound a batch)."""
    from unirender.builds.fetch import BATCH_BLOBS, BATCH_BYTES

    stored = _launchable(app, digest)
    body = app.read_body(request)
    shas = body.get("blobs") if isinstance(body, dict) else None
    if not isinstance(shas, list) or not shas or not all(isinstance(sha, str) for sha in shas):
        raise ApiError(400, "invalid_parameter", "send {\"blobs\": [<sha256>, ...]}: the files wanted, by sha256")
    if len(shas) > BATCH_BLOBS:
        raise ApiError(413, "batch_too_large", f"{len(shas)} blobs asked; at most {BATCH_BLOBS} in one request")
    found = [_blob_file(app, stored, sha) for sha in shas]
    total = sum(size for _path, size in found)
    if total > BATCH_BYTES:
        raise ApiError(413, "batch_too_large", f"{total} bytes asked; at most {BATCH_BYTES} in one request (ask for "
                       "large files one at a time: GET .../blobs/{sha256})")
    return Response(b"".join(_read(path, size) for path, size in found), mimetype="application/octet-stream")


def _read(path: str, size: int) -> bytes:
    """A blob's bytes, no more than the size it was checked at (the batch's bound holds whatever the file is)."""
    with open(path, "rb") as f:
        return f.read(size)


def _export(app, stored) -> Path:
    """The build's export tar, made once (atomically) in the store's own cache folder."""
    store = app.policy.build_store
    folder = Path(store.root) / "exports"
    path = folder / (stored.digest.removeprefix("sha256:") + ".tar")
    with _export_lock:
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            store.export(stored.digest, path)
    return path


def _owner_tag(owner: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", owner)[:100]


def _uploaded_bytes(store, owner: str) -> int:
    prefix = f"{UPLOADED}:{_owner_tag(owner)}-"
    return sum(b.size for b in store.list() if any(n.startswith(prefix) for n in b.names))


def put_build(app, request, owner, digest):
    from unirender.builds import BuildError, DigestMismatchError, StoreFullError, UnsafeArchiveError

    digest = _digest(digest)
    limits = app.config.limits
    length = request.content_length
    if length is None:
        raise ApiError(411, "length_required", "send the build with a Content-Length (no chunked uploads)")
    suffix = ARCHIVES.get((request.mimetype or "application/x-tar"), None)
    if suffix is None:
        raise ApiError(415, "unsupported_media_type", f"a build upload is one of {', '.join(ARCHIVES)}")
    store = app.policy.build_store
    try:
        existing = store.get(digest)
    except BuildError:
        existing = None
    if existing is not None:  # already here: nothing to receive (the client asks HEAD first, normally)
        store.tag(digest, f"{UPLOADED}:{_owner_tag(owner)}-{digest[7:19]}")
        return app.json_response({"digest": digest, "size": existing.size, "created": False})
    if _uploaded_bytes(store, owner) + length > limits.build_bytes_per_token:
        raise ApiError(413, "build_quota_exceeded", f"this token's uploads would exceed build_bytes_per_token "
                       f"({limits.build_bytes_per_token} bytes)")
    if store.disk_usage() + length > limits.build_store_bytes:
        raise ApiError(413, "build_store_full", f"the build store would exceed build_store_bytes "
                       f"({limits.build_store_bytes} bytes)")
    upload = store.open_upload(suffix=suffix, hint=f"upload{suffix}")
    received = 0
    try:
        stream = request.stream
        while received < length:
            data = stream.read(min(CHUNK, length - received))
            if not data:
                break
            upload.write(data)
            received += len(data)
    except BaseException:
        upload.abort()
        raise
    if received != length:  # the client went away midway: nothing is published
        upload.abort()
        raise ApiError(400, "upload_incomplete", f"the upload ended after {received} of {length} bytes")
    try:
        build = store.publish_upload(upload, sha256=digest, max_bytes=limits.build_bytes * 4)
    except DigestMismatchError as exc:
        raise ApiError(422, "digest_mismatch", f"the uploaded bytes are not build {digest}: {exc}") from None
    except UnsafeArchiveError as exc:
        raise ApiError(422, "unsafe_archive", str(exc)) from None
    except StoreFullError as exc:  # the store's bound (build_store_max_bytes), with nothing evictable enough
        raise ApiError(413, "build_store_full", str(exc)) from None
    except BuildError as exc:
        raise ApiError(422, "invalid_build", str(exc)) from None
    store.tag(build.digest, f"{UPLOADED}:{_owner_tag(owner)}-{digest[7:19]}")
    return app.json_response({"digest": build.digest, "size": build.size, "created": True}, status=201)


def delete_build(app, request, owner, digest):
    from unirender.builds import BuildError, BuildInUseError

    try:
        store = app.policy.build_store
        store.remove(_digest(digest))
    except BuildInUseError as exc:
        raise ApiError(409, "build_in_use", str(exc)) from None
    except BuildError:
        raise ApiError(404, "build_not_found", f"no build {digest}") from None
    return Response(status=204)
