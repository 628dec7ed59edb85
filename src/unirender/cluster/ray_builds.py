"""How a build reaches a Ray node that lacks it (docs/cluster.md, "How builds reach players").

The driver pins a session's build to its digest (``unirender.builds.fetch.pin_build``); the session's actor, before
starting its player, asks its node's store (``UNIRENDER_BUILDS`` of that node, or the default) for the digest and
fetches it when missing (``unirender.builds.fetch.fetch``: per-digest lock, blobs verified, resumable):

* by default from the **driver's store through Ray**: one :class:`StoreServer` actor per backend, pinned to the
  driver's node (``NodeAffinitySchedulingStrategy``), serving the manifest and blob chunks (8 MiB) through Ray's
  object store; it counts what it served per node (``RayBackend.build_fetches()``);
* from a **service** when the backend is given ``build_source=URL`` (and ``token=``): its
  ``GET /v1/builds/{digest}``, resumed with ``Range``.
"""

from __future__ import annotations

import threading
from typing import Any

from unirender.builds import BuildStore
from unirender.builds.fetch import FetchStats, ServiceSource, StoreSource, fetch

# Calls a StoreServer serves at once: nodes fetching at the same time do not queue behind one another's chunks.
SERVER_CONCURRENCY = 8


class StoreServer:
    """The driver's store, served to nodes (a plain class: the backend wraps it with ``ray.remote``)."""

    def __init__(self, root: str) -> None:
        self._source = StoreSource(BuildStore(root))
        self._served: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def name(self) -> str:
        return self._source.name

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

    def read_many(self, reads: list[tuple[str, int, int]], node: str | None = None) -> list[bytes]:
        datas = self._source.read_many(reads)
        self._count(node, "bytes", sum(map(len, datas)))
        return datas

    def served(self) -> dict[str, dict[str, int]]:
        """Per node id: manifests asked (one per fetch) and blob bytes sent."""
        with self._lock:
            return {node: dict(counts) for node, counts in self._served.items()}


class RayStoreSource:
    """A :class:`StoreServer` as a ``unirender.builds.fetch`` source, in the fetching node's actor."""

    def __init__(self, server: Any, name: str, node_id: str | None, timeout: float) -> None:
        self.server, self.name, self.node_id, self.timeout = server, name, node_id, timeout

    def _get(self, ref: Any) -> Any:
        import ray

        try:
            return ray.get(ref, timeout=self.timeout)
        except ray.exceptions.RayTaskError as exc:  # the server's own error (no such build), as itself
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def manifest(self, digest: str) -> bytes:
        return self._get(self.server.manifest.remote(digest, self.node_id))

    def hint(self, digest: str) -> str:
        return self._get(self.server.hint.remote(digest))

    def read(self, sha256: str, offset: int, length: int) -> bytes:
        return self._get(self.server.read.remote(sha256, offset, length, self.node_id))

    def read_many(self, reads: list[tuple[str, int, int]]) -> list[bytes]:
        return self._get(self.server.read_many.remote(reads, self.node_id))


def ensure_build(spec: dict) -> FetchStats:
    """In a session's actor, before its player starts: the pinned build in this node's store, fetched if missing
    (``spec``: ``digest`` and either ``server``/``server_name`` or ``url``/``token``; ``timeout`` per call)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    if spec.get("url"):
        source: Any = ServiceSource(spec["url"], spec.get("token"))
    else:
        source = RayStoreSource(spec["server"], spec["server_name"], node_id, spec.get("timeout", 120.0))
    stats = FetchStats()
    fetch(BuildStore(), spec["digest"], source, node_id=node_id, stats=stats)
    return stats
