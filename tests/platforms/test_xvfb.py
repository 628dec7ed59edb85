"""Xvfb lifecycle: nothing left behind after stop, after the owner is SIGKILLed or SIGTERMed, or after
Xvfb itself is killed; parallel starts get distinct displays."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from unirender.platforms import xvfb
from unirender.platforms.x11 import X11_SOCKET_DIR, handshake
from unirender.platforms.xvfb import (
    RECORD_DIR,
    ScreenSpec,
    acquire_virtual_display,
    clean_stale_displays,
    shared_displays,
    start_xvfb,
)

OWNER = """
import sys, time
from unirender.platforms.xvfb import acquire_virtual_display
d = acquire_virtual_display(320, 240)
print(d.number, d.process.pid, d.log_dir, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it no longer runs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, limit: float = 15.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _start_owner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)


def _read_owner(owner: subprocess.Popen) -> tuple[int, int, str]:
    ready, _, _ = select.select([owner.stdout], [], [], 60)
    assert ready, "owner process printed nothing"
    number, pid, log_dir = owner.stdout.readline().split()
    return int(number), int(pid), log_dir


def _assert_clean(number: int, xvfb_pid: int) -> None:
    assert _wait_gone(xvfb_pid), f"Xvfb {xvfb_pid} still running"
    assert not os.path.exists(f"{X11_SOCKET_DIR}/X{number}")
    assert not os.path.exists(f"/tmp/.X{number}-lock")


def test_stop_leaves_nothing():
    display = start_xvfb([ScreenSpec(320, 240)])
    number, pid = display.number, display.process.pid
    assert handshake(number) is None and os.path.exists(display.socket_path)
    assert os.path.exists(os.path.join(RECORD_DIR, f"X{number}"))
    display.stop()
    display.stop()  # idempotent
    _assert_clean(number, pid)
    assert not os.path.exists(os.path.join(RECORD_DIR, f"X{number}"))
    assert not os.path.exists(display.log_dir)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_owner_death_takes_xvfb_and_its_files_along(sig):
    owner = _start_owner()
    try:
        number, pid, log_dir = _read_owner(owner)
        assert handshake(number) is None and os.path.isdir(log_dir)
        owner.send_signal(sig)
        owner.wait(30)
        _assert_clean(number, pid)
        clean_stale_displays()  # what the next start does: the dead owner's log folder goes with its record
        assert not os.path.exists(log_dir)
        assert not os.path.exists(os.path.join(RECORD_DIR, f"X{number}"))
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()


def test_parallel_starts_get_distinct_displays():
    owners = [_start_owner(), _start_owner()]
    try:
        (n1, p1, _), (n2, p2, _) = [_read_owner(o) for o in owners]
        assert n1 != n2
        assert handshake(n1) is None and handshake(n2) is None
    finally:
        for o in owners:
            o.terminate()
            o.wait(30)
            o.stdout.close()
    _assert_clean(n1, p1)
    _assert_clean(n2, p2)


def test_killed_xvfb_leftovers_are_cleaned_on_next_start():
    display = start_xvfb([ScreenSpec(320, 240)])
    number = display.number
    os.kill(display.process.pid, signal.SIGKILL)  # Xvfb gets no chance to clean up
    display.process.wait()
    assert os.path.exists(display.socket_path) and handshake(number) is not None
    assert number in clean_stale_displays()
    assert not os.path.exists(display.socket_path) and not os.path.exists(display.log_dir)
    display.stop()


def test_stale_lock_of_a_dead_pid_is_cleaned(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    number = next(n for n in range(800, 900) if not os.path.exists(f"/tmp/.X{n}-lock")
                  and not os.path.exists(f"{X11_SOCKET_DIR}/X{n}"))  # fmt: skip
    with open(f"/tmp/.X{number}-lock", "w") as f:
        f.write(f"{dead.pid:10d}\n")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(f"{X11_SOCKET_DIR}/X{number}")
    sock.close()
    try:
        assert number in clean_stale_displays()
        assert not os.path.exists(f"/tmp/.X{number}-lock")
        assert not os.path.exists(f"{X11_SOCKET_DIR}/X{number}")
    finally:
        for path in (f"/tmp/.X{number}-lock", f"{X11_SOCKET_DIR}/X{number}"):
            if os.path.exists(path):
                os.unlink(path)


def test_shared_display_reference_counting():
    a = acquire_virtual_display(300, 300)
    b = acquire_virtual_display(200, 100)
    try:
        assert a is b and a.refs == 2 and a.width >= 1280
        big = acquire_virtual_display(1500, 1100)  # does not fit: a second server
        assert big is not a and big.width >= 1500
        big.release()
        assert not big.alive()
    finally:
        a.release()
        assert b.alive()
        b.release()
    assert not a.alive()


def test_forked_child_does_not_stop_the_parents_display():
    display = acquire_virtual_display(300, 300)
    try:
        pid = os.fork()
        if pid == 0:  # child: run our atexit hook (stop_all), without unwinding into pytest
            # Only our own hook: other libraries' atexit handlers (GL, Vulkan, Ray) may crash in a forked child.
            code = 1 if shared_displays() else 0
            try:
                xvfb.stop_all()
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert display.alive() and handshake(display.number) is None
    finally:
        display.release()


def test_a_reused_display_number_takes_the_old_records_log_folder_along():
    """A record overwritten for a reused display number (its server died before any sweep ran) must not orphan
    the old server's log folder."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    old_dir = tempfile.mkdtemp(prefix="unirender-xvfb-")
    new_dir = tempfile.mkdtemp(prefix="unirender-xvfb-")
    record = os.path.join(RECORD_DIR, "X9999")
    try:
        xvfb._write_record(9999, dead.pid, old_dir)
        xvfb._write_record(9999, os.getpid(), new_dir)
        assert not os.path.exists(old_dir) and os.path.isdir(new_dir)
        with open(record) as f:
            assert f.read().splitlines() == [str(os.getpid()), new_dir]
    finally:
        for path in (old_dir, new_dir):
            if os.path.isdir(path):
                os.rmdir(path)
        if os.path.exists(record):
            os.unlink(record)
