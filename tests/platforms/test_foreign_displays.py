"""Foreign X displays on the machine (a real Xvfb of another process, and a server that resets every
connection) are reported as reasons and otherwise ignored: probing, scanning, the doctor, starting our own
Xvfb and resolving a platform all work with them present. (``UNIRENDER_TEST_FOREIGN_X=1`` runs the whole suite
that way.)"""

from __future__ import annotations

import io

import pytest

from fixtures import foreign_x
from unirender.platforms.doctor import build_report, render_report
from unirender.platforms.request import PlatformRequest
from unirender.platforms.resolve import resolve
from unirender.platforms.x11 import find_screen, probe_display
from unirender.platforms.xvfb import start_xvfb


@pytest.fixture(scope="module")
def foreign():
    with foreign_x.foreign_displays() as (xvfb, resetting):
        yield xvfb, resetting


def test_a_resetting_server_is_a_reason_not_a_crash(foreign):
    _, resetting = foreign
    before = resetting.connections
    probe = probe_display(resetting.number, 300, 300)
    assert probe.screens == [] and "ConnectionClosedError" in probe.error
    assert resetting.connections >= before + 2  # the raw handshake passed, python-xlib was then cut off


def test_a_scan_skips_the_resetting_server_and_finds_a_screen(foreign):
    xvfb, resetting = foreign
    search = find_screen(300, 300)
    assert search.chosen is not None
    chosen_number = int(search.chosen.display[1:].split(".")[0])
    if resetting.number < chosen_number:  # scanned (in number order) before the screen that was chosen
        assert any(resetting.display in r and "ConnectionClosedError" in r for r in search.reasons)
    assert find_screen(300, 300, xvfb).chosen.display == f"{xvfb}.0"


def test_our_xvfb_gets_a_number_of_its_own(foreign):
    xvfb, resetting = foreign
    with start_xvfb() as mine:
        assert mine.display not in (xvfb, resetting.display)
        assert find_screen(300, 300, mine.display).chosen is not None


def test_doctor_lists_the_resetting_server_and_still_renders(foreign):
    _, resetting = foreign
    report = build_report(300, 300)
    bad = next(x for x in report["x_displays"] if x["display"] == resetting.display)
    assert "ConnectionClosedError" in bad["error"]
    out = io.StringIO()
    from rich.console import Console

    render_report(report, Console(file=out, width=80))
    assert resetting.display in out.getvalue()


def test_linux64_resolves_on_a_display_that_works(foreign):
    with resolve(PlatformRequest(system="Linux"), "Linux64") as r:
        assert r.name == "Linux64" and r.env["DISPLAY"] != f"{foreign[1].display}.0"
