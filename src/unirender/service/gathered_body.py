"""A response body of several buffers, handed to the socket as they are (one ``sendmsg``), never joined.

A msgpack frame response is a few small pieces around the frames, which are views of the player's own buffers:
joining them copies ~1 MB into fresh memory per 300x300 step (its pages faulted in) only for the kernel to copy
it again. :class:`GatheredBody` carries the pieces through waitress's ``Task.write`` (which slices the body to
``Content-Length`` and compares the slice with it) to the service's channel (``service.server``), which sends
them with the response head in one ``sendmsg`` and queues only what the socket did not take, as bytes.

Only for a channel that says it takes one (:func:`takes_gathered_body`); any other server gets bytes.
"""

from __future__ import annotations

from unirender.transport.serving import CONNECTION_KEY


class GatheredBody(bytes):
    """Looks like a ``bytes`` body of ``len(pieces)`` total length to waitress's ``Task.write`` (length, the
    full slice, comparison); its content is in ``pieces``. Empty as bytes: :meth:`join` gives the real ones."""

    pieces: list[bytes | memoryview]
    size: int

    def __new__(cls, pieces: list[bytes | memoryview]) -> GatheredBody:
        self = super().__new__(cls)
        self.pieces = [p if isinstance(p, bytes) else memoryview(p).cast("B") for p in pieces]
        self.size = sum(len(p) for p in self.pieces)
        return self

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __getitem__(self, key):
        if isinstance(key, slice) and key.step is None and (key.start or 0) == 0 and (
            key.stop is None or key.stop >= self.size
        ):
            return self  # Task.write's data[: Content-Length - written]: all of it
        return self.join()[key]

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, bytes | bytearray | memoryview) and self.join() == other)

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def join(self) -> bytes:
        """The body as one ``bytes`` (for any path that cannot send the pieces as they are)."""
        return b"".join(self.pieces)


def takes_gathered_body(environ: dict) -> bool:
    """The request arrived on a channel that sends a :class:`GatheredBody` as it is (the service's own)."""
    return getattr(environ.get(CONNECTION_KEY), "takes_gathered_body", False)


__all__ = ["GatheredBody", "takes_gathered_body"]
