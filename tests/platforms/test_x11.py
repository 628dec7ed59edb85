"""X screen validation against real Xvfb servers (protocol.md 7.1 ``_validate_screen``)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import struct

import pytest

from unirender.platforms import Linux64, PlatformRequest
from unirender.platforms.x11 import X11_SOCKET_DIR, find_screen, handshake, probe_display
from unirender.platforms.xvfb import ScreenSpec, start_xvfb


def _free_display_number(start: int = 700) -> int:
    for n in range(start, start + 200):
        if not os.path.exists(f"{X11_SOCKET_DIR}/X{n}") and handshake(n, timeout=0.5) is not None:
            return n
    raise RuntimeError("no free display number")


@pytest.fixture
def stale_socket():
    """A socket file in /tmp/.X11-unix with no server behind it (bound, never listening)."""
    number = _free_display_number()
    path = f"{X11_SOCKET_DIR}/X{number}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    yield number
    os.unlink(path)


@pytest.mark.parametrize("form", ["{n}", ":{n}", ":{n}.0"])
def test_valid_screen_in_every_display_form(xvfb_two_screens, form):
    search = find_screen(300, 300, form.format(n=xvfb_two_screens.number))
    assert search.chosen is not None, search.reasons
    assert search.chosen.display == f"{xvfb_two_screens.display}.0"
    assert (search.chosen.width, search.chosen.height, search.chosen.root_depth, search.chosen.glx) == (
        640, 480, 24, True
    )  # fmt: skip


def test_second_screen_too_small(xvfb_two_screens):
    search = find_screen(300, 300, f"{xvfb_two_screens.display}.1")
    assert search.chosen is None
    assert search.reasons == [
        f"{xvfb_two_screens.display}.1: screen is 200x200, smaller than the requested 300x300"
    ]
    assert find_screen(150, 150, f"{xvfb_two_screens.display}.1").chosen.display.endswith(".1")


def test_screen_larger_than_the_server(xvfb_two_screens):
    search = find_screen(1000, 300, xvfb_two_screens.display)
    assert search.chosen is None
    assert "smaller than the requested 1000x300" in search.reasons[0]


def test_nonexistent_screen_index(xvfb_two_screens):
    search = find_screen(100, 100, f"{xvfb_two_screens.display}.5")
    assert search.chosen is None
    assert search.reasons == [f"display {xvfb_two_screens.display} has no screen 5 (it has 2)"]


def test_no_glx(xvfb_no_glx):
    search = find_screen(300, 300, xvfb_no_glx.display)
    assert search.chosen is None
    assert any("no GLX extension" in r for r in search.reasons), search.reasons


def test_depth_16(xvfb_depth16):
    search = find_screen(300, 300, xvfb_depth16.display)
    assert search.chosen is None
    assert search.reasons == [f"{xvfb_depth16.display}.0: root depth is 16, 24 is required"]


def test_linux64_validate_explicit_display(xvfb_two_screens, xvfb_no_glx):
    ok = PlatformRequest(system="Linux", x_display=xvfb_two_screens.display)
    assert Linux64().validate(ok) == []
    assert Linux64().launch_env(ok) == {"DISPLAY": f"{xvfb_two_screens.display}.0"}
    bad = PlatformRequest(system="Linux", x_display=xvfb_no_glx.display)
    assert any("GLX" in r for r in Linux64().validate(bad))


def test_stale_socket_is_reported_not_fatal(stale_socket, xvfb_no_glx):
    assert "unreachable" in handshake(stale_socket)
    # An impossible size: nothing qualifies, so the scan visits (and reports) every display.
    search = find_screen(9000, 9000)
    assert search.chosen is None
    assert any(f"X{stale_socket} is unreachable" in r for r in search.reasons), search.reasons
    assert any(r.startswith(f"{xvfb_no_glx.display}.0: the X server has no GLX") for r in search.reasons)
    errors = Linux64().validate(PlatformRequest(system="Linux", x_display=f":{stale_socket}"))
    assert len(errors) == 1 and "stale socket" in errors[0]


def test_server_that_does_not_answer_is_bounded():
    """A stopped Xvfb accepts connections but never answers: the probe gives up instead of hanging."""
    with start_xvfb([ScreenSpec(320, 240)]) as display:
        os.kill(display.process.pid, signal.SIGSTOP)
        try:
            probe = probe_display(display.number, 100, 100, timeout=0.5)
        finally:
            os.kill(display.process.pid, signal.SIGCONT)
        assert probe.screens == []
        assert "did not answer within 0.5 s" in probe.error
        assert probe_display(display.number, 100, 100).screens[0].valid


def test_abstract_socket_only():
    """With its socket file gone, a server is still reached through its abstract socket, as python-xlib does."""
    with start_xvfb([ScreenSpec(400, 300)]) as display:
        os.unlink(display.socket_path)
        probe = probe_display(display.number, 300, 300)
        assert probe.error is None and probe.socket_path is None
        assert probe.screens[0].valid


def test_linux64_tries_dollar_display_first_then_scans(xvfb_two_screens, xvfb_depth16, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb_two_screens.display)
    a = Linux64().assess(PlatformRequest(system="Linux"))
    assert a.env == {"DISPLAY": f"{xvfb_two_screens.display}.0"} and a.reasons == []
    monkeypatch.setenv("DISPLAY", xvfb_depth16.display)  # invalid: reported, then the scan finds another
    a = Linux64().assess(PlatformRequest(system="Linux", width=600, height=400))
    assert a.usable and a.env["DISPLAY"] != f"{xvfb_depth16.display}.0"
    assert f"{xvfb_depth16.display}.0: root depth is 16, 24 is required" in a.notes


def _xauth_entry(cookie: bytes) -> bytes:
    """One Xauthority record (FamilyLocal, this host, any display number, MIT-MAGIC-COOKIE-1)."""
    out = struct.pack(">H", 256)
    for part in (socket.gethostname().encode(), b"", b"MIT-MAGIC-COOKIE-1", cookie):
        out += struct.pack(">H", len(part)) + part
    return out


def test_server_with_authorisation(tmp_path, monkeypatch):
    """The liveness handshake carries no cookie; the real check uses the user's Xauthority like any client."""
    auth = tmp_path / "Xauthority"
    auth.write_bytes(_xauth_entry(secrets.token_bytes(16)))
    with start_xvfb([ScreenSpec(640, 480)], extra_args=["-auth", str(auth)]) as display:
        monkeypatch.setenv("XAUTHORITY", str(auth))
        assert find_screen(300, 300, display.display).chosen is not None
        monkeypatch.setenv("XAUTHORITY", str(tmp_path / "missing"))
        search = find_screen(300, 300, display.display)
        assert search.chosen is None and "Authorization required" in search.reasons[0]
