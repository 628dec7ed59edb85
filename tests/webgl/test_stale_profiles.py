"""A browser profile left by a SIGKILLed process is removed by the next browser started on the machine
(``webgl.browser.remove_stale_profiles``); a live browser's, one still starting (no lock yet) and another host's
are kept."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from unirender.webgl.browser import PROFILE_PREFIX, remove_stale_profiles


def _profile(root, name: str, owner: str | None):
    path = root / f"{PROFILE_PREFIX}{name}"
    (path / "Default").mkdir(parents=True)
    (path / "Default" / "Preferences").write_text("{}")
    if owner is not None:
        os.symlink(owner, path / "SingletonLock")  # as Chromium makes it: <hostname>-<pid>
    return path


def test_only_the_profiles_of_gone_processes_on_this_host_are_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process
    host = socket.gethostname()
    stale = _profile(tmp_path, "stale", f"{host}-{gone.pid}")
    live = _profile(tmp_path, "live", f"{host}-{os.getpid()}")
    starting = _profile(tmp_path, "starting", None)
    elsewhere = _profile(tmp_path, "elsewhere", f"another-host-{gone.pid}")
    other = tmp_path / "not-a-profile"
    other.mkdir()

    assert remove_stale_profiles(str(tmp_path)) == [str(stale)]
    assert not stale.exists()
    assert live.exists() and starting.exists() and elsewhere.exists() and other.exists()
