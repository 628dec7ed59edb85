"""The console's view of each family: which views an event has, a view's pixels, the driving controls.

Looked up once per session from ``session.family`` (:func:`console_family`); the live view and the action
endpoint then call the adapter's methods (:class:`ConsoleFamily`), never ask which family they hold. Each family's
adapter lives in its own module (``service/ui/ai2thor_console.py``, ``service/ui/mlagents_console.py``,
``service/ui/webgl_console.py``); a family adds its module and one line in :data:`CONSOLE_FAMILIES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from unirender.service.errors import ApiError
from unirender.simulator import AI2THOR, MLAGENTS, WEBGL, load_registered, moved_names

if TYPE_CHECKING:
    import numpy as np

    from unirender.simulator import Description

# Keyboard -> action: the page's default key map (a person may change it; kept in the browser's localStorage).
DEFAULT_KEYS = {
    "w": "MoveAhead", "a": "MoveLeft", "s": "MoveBack", "d": "MoveRight",
    "ArrowLeft": "RotateLeft", "ArrowRight": "RotateRight", "ArrowUp": "LookUp", "ArrowDown": "LookDown",
}  # fmt: skip


class UnknownView(ValueError):
    pass


class ConsoleFamily(Protocol):
    """What the console knows of one family: the console's code (``ui.console``, ``ui.stream``,
    ``service.session_video``) is written against this and nothing else of a family."""

    family: str  # the family's name (``unirender.simulator``)
    template: str  # the page's driving controls: a template of ``ui/templates`` (``drive_<family>.html``)

    def views(self, event: Any) -> list[tuple[str, str]]:
        """``[(view, label)]`` for every view this event has (``event`` may be None: before the first one)."""

    def check_view(self, view: str) -> str:
        """``view`` if it is a view of this family, else :class:`UnknownView` (naming the views' form)."""

    def view_array(self, event: Any, view: str) -> np.ndarray | None:
        """The pixels of one view of ``event`` (None when the event lacks it)."""

    def caption(self, event: Any) -> dict:
        """What the live view shows beside a frame (``action``, ``success``, ``error``, ...)."""

    def scene(self, event: Any) -> str | None:
        """What the session shows, for the session's page (a scene name, the game's behaviors); None if unknown."""

    def controls(self, description: Description | None, environment: dict) -> dict:
        """The page's driving controls, from the session's description and the ``environment`` it was created
        with (what a family declares there beyond the description: WebGL's actions' keys)."""

    def action(self, body: Any, event: Any, description: Description | None) -> tuple[Any, str]:
        """``(what the session's step takes, a label for the page)`` from the page's POST body (an ``ApiError``
        when it is not an action of this session)."""

    def transport(self, environment: dict) -> str:
        """The transport to show for a session started with ``environment``."""

    def result(self, event: Any, label: str) -> dict:
        """The page's answer to one driven step."""


# family -> "module:attribute" of its ConsoleFamily (imported on first use; a third family adds its line)
CONSOLE_FAMILIES: dict[str, str] = {
    AI2THOR: "unirender.service.ui.ai2thor_console:CONSOLE",
    MLAGENTS: "unirender.service.ui.mlagents_console:CONSOLE",
    WEBGL: "unirender.service.ui.webgl_console:CONSOLE",
}
_loaded: dict[str, ConsoleFamily] = {}


def console_family(family: str) -> ConsoleFamily:
    """The console adapter of ``family`` (imported once); a 422 ``not_supported`` for a family it has none of."""
    found = _loaded.get(family)
    if found is not None:
        return found
    found = _loaded[family] = load_registered(CONSOLE_FAMILIES, family, lambda: ApiError(
        422, "not_supported", f"the console has no view of {family!r} sessions"))
    return found


# The adapters' old home: their classes and AI2-THOR's labels, from the family modules on first use.
__getattr__ = moved_names(__name__, {
    "AI2ThorConsole": "unirender.service.ui.ai2thor_console:AI2ThorConsole",
    "LABELS": "unirender.service.ui.ai2thor_console:LABELS",
    "MLAgentsConsole": "unirender.service.ui.mlagents_console:MLAgentsConsole",
})


__all__ = ["CONSOLE_FAMILIES", "DEFAULT_KEYS", "ConsoleFamily", "UnknownView", "console_family"]
