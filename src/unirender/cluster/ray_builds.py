"""How a build reaches a Ray node that lacks it (docs/cluster.md, "How builds reach players").

The driver pins a session's build to its digest (``unirender.builds.fetch.pin_build``); the session's actor, before
starting its player, asks its node's store (``UNIRENDER_BUILDS`` of that node, or the default) for the digest and
fetches it when missing (``unirender.builds.fetch.fetch``: per-digest lock, blobs verified, resumable):

* by default from the **driver's store**: one :class:`StoreServer` actor per backend, pinned to the driver's node
  (``NodeAffinitySchedulingStrategy``). Ray carries only where to ask: the actor serves the manifest and the blobs
  over HTTP on the driver node's address (the service's two routes, ``/v1/builds/{digest}/manifest`` and
  ``/blobs/{sha256}`` with ``Range``, behind a bearer token made per actor and handed out through Ray), so each blob
  crosses in one response on a keep-alive connection, read straight into the hash and the file. Through Ray's
  object store each 8 MiB chunk was copied into the driver's store, moved and copied out: 1 GiB to two nodes took
  8.0 s against a 1.8 s hashing floor (benchmarks/README.md). It counts what it served per node
  (``RayBackend.build_fetches()``);
* from a **service** when the backend is given ``build_source=URL`` (and ``token=``): its
  ``GET /v1/builds/{digest}``, resumed with ``Range``.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from unirender.builds import BuildStore, manifest
from unirender.builds.errors import BuildError, BuildNotFoundError
from unirender.builds.fetch import BATCH_BLOBS, BATCH_BYTES, FetchStats, ServiceSource, StoreSource, fetch

# Ray calls a StoreServer serves at once (endpoint, hint, served): sessions starting together do not queue behind
# one another. The blobs themselves go over its HTTP server, a thread per connection.
SERVER_CONCURRENCY = 8
NODE_HEADER = "X-Unirender-Node"  # the fetching node's id: what was served is counted per node
_ROUTE = re.compile(r"^/v1/builds/(sha256:[0-9a-f]{64})/(?:(manifest)|blobs/([0-9a-f]{64}))$")
_BATCH_ROUTE = re.compile(r"^/v1/builds/(sha256:[0-9a-f]{64})/blobs$")
_BATCH_BODY = 1 << 20  # a batch's request: BATCH_BLOBS sha256s in JSON fit well within it
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
# Seconds a connection may stay silent (a head, a body or a read of what is sent that stalls; an idle keep-alive
# one): without it, anyone reaching the driver's address held a thread of the actor per connection for ever. A
# node's client opens a new connection when an idle one was closed (``ServiceSource``).
IDLE_S = 60.0


class StoreServer:
    """The driver's store, served to nodes (a plain class: the backend wraps it with ``ray.remote``)."""

    def __init__(self, root: str) -> None:
        self._source = StoreSource(BuildStore(root))
        self._served: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._token = secrets.token_urlsafe(32)
        self._blob_sets: dict[str, frozenset[str]] = {}  # digest -> its blobs (a build is immutable: parsed once)

    def name(self) -> str:
        return self._source.name

    def endpoint(self, host: str | None = None) -> dict[str, str]:
        """Where nodes fetch from: this store's name, the HTTP server's URL (started on the first call, on
        ``host``, by default this Ray node's address, until :meth:`close`) and its bearer token."""
        with self._lock:
            if self._http is None:
                if host is None:
                    import ray

                    host = ray.util.get_node_ip_address()
                self._http = ThreadingHTTPServer((host, 0), _blob_handler(self))
                self._http.daemon_threads = True
                threading.Thread(target=self._http.serve_forever, name="unirender-build-blobs", daemon=True).start()
            host, port = self._http.server_address[:2]
        return {"name": self._source.name, "url": f"http://{host}:{port}", "token": self._token}

    def close(self) -> None:
        """Stop serving (the actor's process ending stops it too)."""
        with self._lock:
            http, self._http = self._http, None
        if http is not None:
            http.shutdown()
            http.server_close()

    def authorized(self, header: str | None) -> bool:
        return header is not None and hmac.compare_digest(header.encode(), f"Bearer {self._token}".encode())

    def blob_file(self, digest: str, sha256: str) -> tuple[str, int]:
        """The stored file of blob ``sha256`` as a file of build ``digest``, and its size (BuildNotFoundError: not
        one of its files)."""
        with self._lock:
            blobs = self._blob_sets.get(digest)
        if blobs is None:
            blobs = frozenset(e.sha256 for e in manifest.parse(self._source.manifest(digest)) if e.type == "file")
            with self._lock:
                self._blob_sets[digest] = blobs
        found = self._source.store.stored_blob(sha256) if sha256 in blobs else None
        if found is None:
            raise BuildNotFoundError(f"build {digest} has no file with sha256 {sha256} in {self._source.name}")
        return found

    def _count(self, node: str | None, what: str, amount: int) -> None:
        with self._lock:
            counts = self._served.setdefault(node or "?", {"manifests": 0, "bytes": 0})
            counts[what] += amount

    def manifest(self, digest: str, node: str | None = None) -> bytes:
        blob = self._source.manifest(digest)
        self._count(node, "manifests", 1)
        return blob

    def hint(self, digest: str) -> str:
        return self._source.hint(digest)

    def read(self, sha256: str, offset: int, length: int, node: str | None = None) -> bytes:
        data = self._source.read(sha256, offset, length)
        self._count(node, "bytes", len(data))
        return data

    def read_files(self, found: list[tuple[str, int]], node: str | None = None) -> bytes:
        """Whole blobs as :meth:`blob_file` found them (path, size), one after another: a batch. Each read from the
        file found, no more than its size: no second look-up of the blob, and memory bounded by the sizes checked."""
        pieces = []
        for path, size in found:
            with open(path, "rb") as f:
                pieces.append(f.read(size))
        data = b"".join(pieces)
        self._count(node, "bytes", len(data))
        return data

    def send(self, sock: socket.socket, digest: str, sha256: str, offset: int, count: int,
             node: str | None = None) -> int:  # fmt: skip
        """Send ``count`` bytes of blob ``sha256`` from ``offset`` on ``sock`` with ``sendfile``, straight from the
        page cache; the bytes sent (fewer: the file shrank). Read into this process 4 MiB at a time instead, every
        byte was copied once more and each read opened the blob again: a measurable share of the CPU two nodes'
        fetches of a 1 GiB build cost (benchmarks/README.md, "Builds reaching render hosts")."""
        with open(self.blob_file(digest, sha256)[0], "rb") as f:
            sent = sock.sendfile(f, offset, count)
        self._count(node, "bytes", sent)
        return sent

    def served(self) -> dict[str, dict[str, int]]:
        """Per node id: manifests asked (one per fetch) and blob bytes sent."""
        with self._lock:
            return {node: dict(counts) for node, counts in self._served.items()}


def _blob_handler(owner: StoreServer) -> type[BaseHTTPRequestHandler]:
    """The HTTP routes of ``owner``: ``GET /v1/builds/{digest}/manifest`` and ``/blobs/{sha256}`` (``Range``:
    ``bytes=N-`` or ``bytes=N-M``), each behind the bearer token, errors as the service writes them."""

    class BlobHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a node's fetching thread asks for blob after blob on one
        disable_nagle_algorithm = True  # a head and its body are two writes: never wait for the ACK between
        timeout = IDLE_S  # on each read and write of the socket: a silent peer's connection is closed

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": {"code": code, "message": message}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            """Several small blobs in one response, one after another (the service's ``POST .../blobs``)."""
            if not owner.authorized(self.headers.get("Authorization")):
                self.close_connection = True  # its body is not read: nothing more on this connection
                return self._error(401, "unauthorized", "this store's blobs need the token the driver handed out")
            route = _BATCH_ROUTE.match(self.path)
            length = self.headers.get("Content-Length") or "0"
            length = int(length) if length.isdigit() else -1  # not a length: refused below, unread
            if route is None or not 0 < length <= _BATCH_BODY:
                self.close_connection = True  # the body is not read
                return self._error(404 if route is None else 413, "not_found" if route is None else
                                   "batch_too_large", f"POST /v1/builds/{{digest}}/blobs with a JSON body of at "
                                   f"most {_BATCH_BODY} bytes")  # fmt: skip
            try:
                shas = json.loads(self.rfile.read(length))["blobs"]
                if not isinstance(shas, list) or not 0 < len(shas) <= BATCH_BLOBS:
                    raise ValueError(f"1 to {BATCH_BLOBS} blobs")
                found = [owner.blob_file(route.group(1), sha) for sha in shas]
            except (ValueError, KeyError, TypeError) as exc:
                return self._error(400, "invalid_parameter", f"send {{\"blobs\": [<sha256>, ...]}}: {exc}")
            except BuildNotFoundError as exc:
                return self._error(404, "blob_not_found", str(exc))
            if (total := sum(size for _path, size in found)) > BATCH_BYTES:
                return self._error(413, "batch_too_large", f"{total} bytes asked; at most {BATCH_BYTES}")
            return self._send(owner.read_files(found, self.headers.get(NODE_HEADER)), "application/octet-stream")

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not owner.authorized(self.headers.get("Authorization")):
                return self._error(401, "unauthorized", "this store's blobs need the token the driver handed out")
            route = _ROUTE.match(self.path)
            if route is None:
                return self._error(404, "not_found", f"no route {self.path[:100]!r}")
            digest, is_manifest, sha256 = route.groups()
            node = self.headers.get(NODE_HEADER)
            try:
                if is_manifest:
                    return self._send(owner.manifest(digest, node), "application/json")
                size = owner.blob_file(digest, sha256)[1]
            except BuildNotFoundError as exc:
                code = "blob_not_found" if sha256 else "build_not_found"
                return self._error(404, code, str(exc))
            except BuildError as exc:
                return self._error(400, "invalid_digest", str(exc))
            start, end = 0, size
            if (asked := self.headers.get("Range")) is not None:
                match = _RANGE.match(asked.strip())
                if match is not None:
                    start = int(match.group(1))
                    end = min(size, int(match.group(2)) + 1) if match.group(2) else size
                if match is None or start >= end:  # past the end, or an end before its start (bytes=10-5)
                    return self._error(416, "range_not_satisfiable", f"{asked[:100]!r} of a {size}-byte blob")
            self.send_response(206 if asked is not None else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            if asked is not None:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            # The headers are out (wfile is unbuffered); the body through owner.send, which counts what it sent.
            # (An empty blob has no body: sendfile refuses a count of 0.)
            if end > start and owner.send(self.connection, digest, sha256, start, end - start, node) < end - start:
                self.close_connection = True  # the file shrank under us (a store is read-only: damage): cut short
            return None

    return BlobHandler


class RayStoreSource(ServiceSource):
    """A :class:`StoreServer` as a ``unirender.builds.fetch`` source, in the fetching node's actor: the manifest
    and blobs over its HTTP endpoint (as from a service), the name the build came by through Ray."""

    def __init__(self, server: Any, name: str, endpoint: dict[str, str], node_id: str | None,
                 timeout: float) -> None:  # fmt: skip
        super().__init__(endpoint["url"], endpoint["token"], timeout, headers={NODE_HEADER: node_id or "?"})
        self.server, self.name, self.node_id = server, name, node_id

    def _get(self, ref: Any) -> Any:
        import ray

        try:
            return ray.get(ref, timeout=self.timeout)
        except ray.exceptions.RayTaskError as exc:  # the server's own error (no such build), as itself
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def hint(self, digest: str) -> str:
        return self._get(self.server.hint.remote(digest))

def ensure_build(spec: dict) -> FetchStats:
    """In a session's actor, before its player starts: the pinned build in this node's store, fetched if missing
    (``spec``: ``digest`` and either ``server``/``server_name``/``endpoint`` or ``url``/``token``; ``timeout`` per
    call)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    if spec.get("url"):
        source: Any = ServiceSource(spec["url"], spec.get("token"))
    else:
        source = RayStoreSource(spec["server"], spec["server_name"], spec["endpoint"], node_id,
                                spec.get("timeout", 120.0))
    stats = FetchStats()
    fetch(BuildStore(), spec["digest"], source, node_id=node_id, stats=stats)
    return stats
