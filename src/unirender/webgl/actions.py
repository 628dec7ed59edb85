"""The webgl family's actions: what a spec may declare, checked once, and the DevTools input events each means.

An action is a mapping with any of (all optional; ``{}`` is a no-op step):

- ``key``: a key name (``ArrowLeft``, ``Space``, ``a``, ``Enter``, ...) or ``keys``: several, held down for the
  step's frames (pressed before the first, released after the readback);
- ``click``: ``[x, y]`` in canvas pixels (origin top left), with ``button`` (``left``/``middle``/``right``):
  pressed before the frames, released after;
- ``move``: ``[x, y]``: the pointer moves there before the frames;
- ``send_message``: ``[gameObject, method]`` or ``[gameObject, method, argument]`` (a string or number):
  Unity's ``SendMessage``, called before the frames.

A spec declares named actions (``{"left": {"key": "ArrowLeft"}, ...}``); ``step("left")`` takes one by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from unirender.errors import ActionError

FIELDS = ("key", "keys", "click", "button", "move", "send_message")
BUTTONS = ("left", "middle", "right")

# DOM key -> (code, Windows virtual key code): Unity's WebGL input reads keyCode and code.
_NAMED_KEYS = {
    "ArrowLeft": ("ArrowLeft", 37), "ArrowUp": ("ArrowUp", 38), "ArrowRight": ("ArrowRight", 39),
    "ArrowDown": ("ArrowDown", 40), "Space": ("Space", 32), " ": ("Space", 32), "Enter": ("Enter", 13),
    "Escape": ("Escape", 27), "Tab": ("Tab", 9), "Backspace": ("Backspace", 8), "Shift": ("ShiftLeft", 16),
    "Control": ("ControlLeft", 17), "Alt": ("AltLeft", 18),
}


def key_event_fields(key: str) -> dict:
    """``Input.dispatchKeyEvent`` fields (without ``type``) for a key name."""
    if key in _NAMED_KEYS:
        code, vk = _NAMED_KEYS[key]
        dom_key = " " if code == "Space" else key
    elif len(key) == 1 and key.isalnum():
        code = f"Key{key.upper()}" if key.isalpha() else f"Digit{key}"
        vk, dom_key = ord(key.upper()), key
    else:
        raise ActionError(f"unknown key {key!r}: use a DOM key name ({', '.join(k for k in _NAMED_KEYS if k != ' ')}) "
                          "or one letter or digit")
    fields = {"key": dom_key, "code": code, "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk}
    if len(dom_key) == 1:
        fields["text"] = dom_key
    return fields


@dataclass(frozen=True)
class Input:
    """One checked action."""

    keys: tuple[str, ...] = ()
    click: tuple[float, float] | None = None
    button: str = "left"
    move: tuple[float, float] | None = None
    send_message: tuple | None = None


def _point(value, name: str, width: int, height: int) -> tuple[float, float]:
    if (not isinstance(value, list | tuple) or len(value) != 2
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
        raise ActionError(f"{name} must be [x, y] in canvas pixels, got {value!r}")
    x, y = float(value[0]), float(value[1])
    if not (0 <= x < width and 0 <= y < height):
        raise ActionError(f"{name} {value!r} is outside the {width}x{height} canvas")
    return x, y


def parse_action(action: Mapping | None, width: int, height: int) -> Input:
    """An action mapping checked (ActionError says what is wrong)."""
    if action is None:
        return Input()
    if not isinstance(action, Mapping):
        raise ActionError(f"a webgl action is a mapping ({', '.join(FIELDS)}), got {type(action).__name__}")
    unknown = sorted(set(action) - set(FIELDS))
    if unknown:
        raise ActionError(f"unknown webgl action field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    keys = []
    if "key" in action:
        keys.append(action["key"])
    keys += list(action.get("keys") or ())
    for key in keys:
        if not isinstance(key, str):
            raise ActionError(f"a key is a string, got {key!r}")
        key_event_fields(key)
    button = action.get("button", "left")
    if button not in BUTTONS:
        raise ActionError(f"button must be one of {', '.join(BUTTONS)}, got {button!r}")
    message = action.get("send_message")
    if message is not None:
        if (not isinstance(message, list | tuple) or len(message) not in (2, 3)
                or not all(isinstance(m, str) for m in message[:2])
                or (len(message) == 3 and not isinstance(message[2], str | int | float))):
            raise ActionError(f"send_message is [gameObject, method] or [gameObject, method, argument], got {message!r}")
        message = tuple(message)
    return Input(
        keys=tuple(keys),
        click=_point(action["click"], "click", width, height) if "click" in action else None,
        button=button,
        move=_point(action["move"], "move", width, height) if "move" in action else None,
        send_message=message,
    )


def parse_declared(actions: Mapping[str, Mapping] | None, width: int, height: int) -> dict[str, Input]:
    """A spec's named actions, each checked; ``noop`` is always there."""
    declared = {"noop": Input()}
    for name, action in (actions or {}).items():
        if not isinstance(name, str) or not name:
            raise ActionError(f"an action name is a non-empty string, got {name!r}")
        try:
            declared[name] = parse_action(action, width, height)
        except ActionError as exc:
            raise ActionError(f"action {name!r}: {exc}") from None
    return declared


def press_events(step: Input) -> list[tuple[str, dict]]:
    """The DevTools commands before the frames: moves, presses."""
    events: list[tuple[str, dict]] = []
    if step.move is not None:
        events.append(("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": step.move[0], "y": step.move[1]}))
    for key in step.keys:
        events.append(("Input.dispatchKeyEvent", {"type": "keyDown", **key_event_fields(key)}))
    if step.click is not None:
        x, y = step.click
        events.append(("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}))
        events.append(("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x, "y": y, "button": step.button,
                                                    "clickCount": 1}))
    return events


def release_events(step: Input) -> list[tuple[str, dict]]:
    """The DevTools commands after the readback: releases, in reverse order."""
    events: list[tuple[str, dict]] = []
    if step.click is not None:
        x, y = step.click
        events.append(("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x, "y": y, "button": step.button,
                                                    "clickCount": 1}))
    for key in reversed(step.keys):
        fields = key_event_fields(key)
        fields.pop("text", None)
        events.append(("Input.dispatchKeyEvent", {"type": "keyUp", **fields}))
    return events
