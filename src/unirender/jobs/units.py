"""What every family's episode driver shares: the error for an episode that cannot be rendered as specified, and
how a unit's frame range is cut (``on_total`` may shorten it so other players take the rest)."""

from __future__ import annotations

from collections.abc import Callable

from unirender.errors import UnirenderError


class EpisodeFailed(UnirenderError):
    """The episode cannot be rendered as specified (a pose the player refuses, no reachable positions, ...).

    Not a crash: redoing it would fail the same way, so the job stops with this message."""


def limit_end(total: int, end: int | None, on_total: Callable[[int], int | None] | None) -> int:
    """The end of a frame range: the unit's ``total``, ``end`` if smaller, or what ``on_total(total)`` asks."""
    limits = [total] + ([end] if end is not None else [])
    if on_total is not None:
        asked = on_total(total)
        if asked is not None:
            limits.append(asked)
    return min(limits)
