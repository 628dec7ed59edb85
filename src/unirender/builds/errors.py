"""The build store's errors: each says what was refused and what to do."""

from __future__ import annotations

from unirender.errors import UnirenderError


class BuildError(UnirenderError):
    """Base class of the build store's errors."""


class UnsafeArchiveError(BuildError, ValueError):
    """An archive member that would escape the build, or is not a plain file, folder or internal link."""


class BuildNotFoundError(BuildError, LookupError):
    """A reference (name:tag, sha256:digest, ai2thor:commit) that the store does not hold."""


class DigestMismatchError(BuildError, ValueError):
    """Bytes that are not the ones a digest names."""


class BuildChangedError(BuildError):
    """A dataset made with one build's bytes, resumed with another's."""


class BuildFetchError(BuildError):
    """A build a node's store lacks could not be fetched from its source (the message names the digest, the node
    and the source; what was verified so far is kept under the store's ``tmp/`` for the next try to resume)."""
