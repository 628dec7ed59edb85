"""The WebGL family's console adapter (a :class:`~unirender.service.ui.families.ConsoleFamily`, registered in
``service.ui.families.CONSOLE_FAMILIES``): the one view is the canvas, the event's ``rgb`` frame (as in a WebGL
document, ``service.webgl_sessions``); driving is the environment's declared actions, by name, as the API's step
takes them: a button each (``noop``, ``SendMessage`` ones, clicks, chords, keys), and the keyboard for those that
press one key (``{"key": "ArrowLeft"}`` named ``left`` is pressed by ArrowLeft on the page). The declaration is the
policy, as on the API: the page sends names only, and a key no action declares does nothing; the keys are not
remappable (a person's AI2-THOR key map, kept in the browser, does not apply here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unirender.jobs.webgl_episodes import FRAME_KEY
from unirender.service.errors import ApiError
from unirender.service.ui.families import UnknownView
from unirender.simulator import WEBGL, Description

VIEW = FRAME_KEY  # the canvas: "rgb", a WebGL document's and a dataset frame's name for it
# Keys that stay the page's: Tab moves the keyboard focus (a page driven from the keyboard needs it), and the page
# ignores a key pressed with Control or Alt held (browser shortcuts), so those two never arrive alone. An action
# on one of them keeps its button.
PAGE_KEYS = ("Tab", "Control", "Alt")


def page_key(key: str) -> str:
    """A declared key name as the page reads ``KeyboardEvent.key`` (session.js lowercases one character)."""
    if key == "Space":
        return " "
    return key.lower() if len(key) == 1 else key


def _input_label(action: dict) -> str:
    """What a declared action does, in words (the button's title)."""
    parts = []
    keys = ([action["key"]] if action.get("key") else []) + list(action.get("keys") or ())
    if keys:
        parts.append("key " + " + ".join("Space" if k == " " else k for k in keys))
    if action.get("move"):
        parts.append(f"pointer to {tuple(action['move'])}")
    if action.get("click"):
        parts.append(f"{action.get('button') or 'left'} click at {tuple(action['click'])}")
    message = action.get("send_message")
    if message:
        argument = f"({message[2]!r})" if len(message) > 2 else "()"
        parts.append(f"SendMessage {message[0]}.{message[1]}{argument}")
    return ", ".join(parts) or "no input"


class WebGLConsole:
    family = WEBGL
    template = "drive_webgl.html"

    def views(self, event: Any) -> list[tuple[str, str]]:
        return [(VIEW, "canvas")]

    def check_view(self, view: str) -> str:
        if view == VIEW:
            return view
        raise UnknownView(f"unknown view {view!r}: a WebGL session has one view, {VIEW!r} (the canvas)")

    def view_array(self, event: Any, view: str) -> np.ndarray | None:
        self.check_view(view)
        return getattr(event, "frame", None)

    def caption(self, event: Any) -> dict:
        return {"action": event.action if isinstance(event.action, str) else None, "success": None,
                "error": "; ".join(str(e) for e in event.errors), "reward": round(float(event.reward), 4),
                "done": bool(event.done)}  # fmt: skip

    def scene(self, event: Any) -> str | None:
        return None  # a WebGL build has no scene the port knows of; the page names its build

    def controls(self, description: Description | None, environment: dict) -> dict:
        """``{"actions": [{"name", "input", "key"}]}``: every declared action in the declaration's order (the
        session's ``describe()``: ``noop`` first), ``key`` the page's key for one that presses one key (the first
        action declaring a key has it; the others keep their buttons), else None."""
        names = description.actions.names if description is not None else ("noop",)
        declared = environment.get("actions") or {}
        actions, taken = [], set()
        for name in names:
            action = declared.get(name) or {}
            keys = ([action["key"]] if action.get("key") else []) + list(action.get("keys") or ())
            key = page_key(keys[0]) if len(keys) == 1 and keys[0] not in PAGE_KEYS else None
            if key in taken:
                key = None
            elif key is not None:
                taken.add(key)
            actions.append({"name": name, "input": _input_label(action), "key": key})
        return {"actions": actions}

    def action(self, body: Any, event: Any, description: Description | None) -> tuple[Any, str]:
        """``{"action": "<declared name>"}``, checked by the service's own WebGL check (the API's step body, a
        422 naming the declared actions otherwise)."""
        from unirender.service.models import validate_body
        from unirender.service.webgl_sessions import WebGLStep, check_declared

        if not isinstance(body, dict):
            raise ApiError(400, "invalid_action", 'the body must be {"action": "<a declared action>"}')
        name = validate_body(WebGLStep, body).action
        check_declared(name, description.actions.names if description is not None else ("noop",))
        return {"action": name}, name

    def transport(self, environment: dict) -> str:
        return "Chromium DevTools"

    def result(self, event: Any, label: str) -> dict:
        return {**self.caption(event), "action": label, "success": True}


CONSOLE = WebGLConsole()

__all__ = ["CONSOLE", "PAGE_KEYS", "VIEW", "WebGLConsole", "page_key"]
