"""X11 screen discovery and validation (protocol.md 7.1 ``_validate_screen``), every probe bounded in time.

python-xlib has no connect timeout: a server that accepts but never answers (stopped, wedged, or a
socket of something that is not an X server) would hang it forever. So each display first gets a raw X
connection handshake on a socket with a timeout, over the same address python-xlib will use; only a
display that answered it is opened with python-xlib.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import struct
from dataclasses import dataclass, field

from unirender.platforms.request import parse_x_display

log = logging.getLogger(__name__)

X11_SOCKET_DIR = "/tmp/.X11-unix"
DEFAULT_PROBE_TIMEOUT = 2.0
REQUIRED_DEPTH = 24


@dataclass
class ScreenInfo:
    display: str  # ":1.0"
    width: int
    height: int
    root_depth: int
    glx: bool
    errors: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass
class DisplayProbe:
    """One X display (``:N``): reachable or not, with its screens."""

    number: int
    socket_path: str | None
    screens: list[ScreenInfo] = field(default_factory=list)
    error: str | None = None  # unreachable / not answering / refused


def socket_address(number: int) -> str:
    """The address python-xlib connects to: the file socket when it exists, else the abstract one."""
    path = f"{X11_SOCKET_DIR}/X{number}"
    return path if os.path.exists(path) else "\0" + path


def list_display_numbers(socket_dir: str = X11_SOCKET_DIR) -> list[int]:
    """Display numbers with a socket file, sorted (abstract sockets cannot be listed portably)."""
    try:
        names = os.listdir(socket_dir)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"X(\d+)", n)))


def handshake(number: int, timeout: float = DEFAULT_PROBE_TIMEOUT) -> str | None:
    """A raw X11 connection setup with a deadline: None when a server answered, else why not."""
    address = socket_address(number)
    shown = address.replace("\0", "@")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
        # byte order 'l', protocol 11.0, no authorisation (X11 protocol, "Connection Setup")
        sock.sendall(struct.pack("<cxHHHHxx", b"l", 11, 0, 0, 0))
        # Any reply (Success, Failed or Authenticate) proves a live server; python-xlib then connects with
        # the user's Xauthority cookie, which this probe deliberately does not read.
        _recv_exactly(sock, 8)
        return None
    except TimeoutError:
        return f"X socket {shown} accepted the connection but did not answer within {timeout:g} s"
    except OSError as exc:
        return f"X socket {shown} is unreachable ({exc.strerror or exc}); stale socket with no server?"
    finally:
        sock.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(0, "connection closed during the X handshake")
        data += chunk
    return data


def probe_display(
    number: int, width: int, height: int, timeout: float = DEFAULT_PROBE_TIMEOUT
) -> DisplayProbe:
    """Every screen of display ``:number`` checked against a width x height request."""
    path = f"{X11_SOCKET_DIR}/X{number}"
    probe = DisplayProbe(number=number, socket_path=path if os.path.exists(path) else None)
    probe.error = handshake(number, timeout)
    if probe.error:
        return probe
    from Xlib import display as xdisplay  # imported late: only needed when a server answered

    try:
        conn = xdisplay.Display(f":{number}")
    except Exception as exc:  # DisplayError, ConnectionClosedError, a malformed setup reply: all mean "not usable"
        probe.error = f"python-xlib cannot open :{number}: {_describe_x_error(exc)}"
        return probe
    try:
        glx = "GLX" in conn.list_extensions()
        for index, root in enumerate(conn.display.info.roots):
            screen = ScreenInfo(
                display=f":{number}.{index}",
                width=root.width_in_pixels,
                height=root.height_in_pixels,
                root_depth=root.root_depth,
                glx=glx,
            )
            screen.errors = screen_errors(screen, width, height)
            probe.screens.append(screen)
    except Exception as exc:  # the server went away or misbehaved mid-conversation: a reason, not a crash
        probe.screens = []
        probe.error = f"X server :{number} failed while being queried: {_describe_x_error(exc)}"
    finally:
        try:
            conn.close()
        except Exception:  # closing a connection the server already dropped
            pass
    return probe


def _describe_x_error(exc: Exception) -> str:
    """``ConnectionClosedError: Display connection closed by server`` (python-xlib's messages lack the type)."""
    return f"{type(exc).__name__}: {exc}"


def screen_errors(screen: ScreenInfo, width: int, height: int) -> list[str]:
    errors = []
    if not screen.glx:
        errors.append(f"{screen.display}: the X server has no GLX extension (start it with +extension GLX)")
    if screen.root_depth != REQUIRED_DEPTH:
        errors.append(f"{screen.display}: root depth is {screen.root_depth}, {REQUIRED_DEPTH} is required")
    if screen.width < width or screen.height < height:
        errors.append(
            f"{screen.display}: screen is {screen.width}x{screen.height}, smaller than the requested {width}x{height}"
        )
    return errors


@dataclass
class ScreenSearch:
    """The outcome of looking for a usable X screen: the first valid one and why the others were not."""

    chosen: ScreenInfo | None
    displays: list[DisplayProbe]
    reasons: list[str]


def find_screen(
    width: int, height: int, x_display: str | None = None, timeout: float = DEFAULT_PROBE_TIMEOUT
) -> ScreenSearch:
    """A requested ``x_display`` is checked on its own; otherwise every ``/tmp/.X11-unix/X*`` in order."""
    if x_display is not None:
        number, screen_index = parse_x_display(x_display)
        probe = probe_display(number, width, height, timeout)
        if probe.error:
            return ScreenSearch(None, [probe], [probe.error])
        wanted = 0 if screen_index is None else screen_index
        if wanted >= len(probe.screens):
            reason = f"display :{number} has no screen {wanted} (it has {len(probe.screens)})"
            return ScreenSearch(None, [probe], [reason])
        screen = probe.screens[wanted]
        return ScreenSearch(screen if screen.valid else None, [probe], list(screen.errors))

    numbers = list_display_numbers()
    if not numbers:
        return ScreenSearch(None, [], [f"no X display found (no sockets in {X11_SOCKET_DIR})"])
    probes, reasons = [], []
    for number in numbers:
        probe = probe_display(number, width, height, timeout)
        probes.append(probe)
        if probe.error:
            reasons.append(probe.error)
            continue
        for screen in probe.screens:
            if screen.valid:
                log.debug("X screen %s is valid (%dx%d)", screen.display, screen.width, screen.height)
                return ScreenSearch(screen, probes, reasons)
            reasons.extend(screen.errors)
    return ScreenSearch(None, probes, reasons)
