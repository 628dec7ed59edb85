"""Suite-wide settings: keep everything local and quiet."""

import atexit
import os
import shutil
import tempfile

# Before anything imports grpc: its fork handlers would restart threads in a forked child that close_fds then
# pulls the descriptors from under (SIGABRT before exec). unirender.mlagents sets the same default.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Ray keeps a folder per session (logs, sockets) under $RAY_TMPDIR/ray, /tmp/ray by default: the suite's local
# clusters get a short one of their own (socket paths must stay under 108 bytes), removed at exit.
# One per process, xdist workers included: they inherit the controller's environment, and a folder shared by two
# workers let a test that joins "the cluster already running here" (Ray's ray_current_cluster file in that folder)
# join the other worker's cluster. A RAY_TMPDIR the user set stays.
_OURS = "UNIRENDER_TEST_RAY_TMPDIR_PID"
if not os.environ.get("RAY_TMPDIR") or os.environ.get(_OURS, str(os.getpid())) != str(os.getpid()):
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="unirender-ray-")
    os.environ[_OURS] = str(os.getpid())
    atexit.register(shutil.rmtree, os.environ["RAY_TMPDIR"], ignore_errors=True)
if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="unirender-xdg-")
    os.chmod(os.environ["XDG_RUNTIME_DIR"], 0o700)
    atexit.register(shutil.rmtree, os.environ["XDG_RUNTIME_DIR"], ignore_errors=True)

import pytest  # noqa: E402

# Under CI a skip for a missing dependency fails the run; every remaining skip is listed by reason at the end.
# A stuck test ends the run with every thread's stack (fixtures/hang_guard.py).
# What ./dev test-fast leaves out is marked in one place (fixtures/suite_marks.py).
pytest_plugins = ["fixtures.dependency_skips", "fixtures.hang_guard", "fixtures.suite_marks"]


@pytest.fixture(scope="session", autouse=True)
def _player_logs_in_pytest_tmp(tmp_path_factory):
    """Player logs of the whole run go under pytest's temp dir (pytest keeps the last three runs), not into
    the user's ~/.unirender/log; so do Stable-Baselines3's logger folders (else a /tmp/SB3-<time> per model)."""
    os.environ.setdefault("UNIRENDER_LOG_DIR", str(tmp_path_factory.mktemp("player-logs")))
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))


@pytest.fixture
def killed_job_tmp():
    """A temp folder with a short path (under /tmp), removed after the test: the TMPDIR of a job the test SIGKILLs,
    whose temp files (its FIFO dir, a browser's profile) only the test can remove. Short because a browser's
    socket must fit under it: under a pytest tmp_path (too long) webgl.browser.profile_root would fall back to /tmp
    itself, where a killed job's profile would be left behind."""
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="ur-killed-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _foreign_x_displays():
    """``UNIRENDER_TEST_FOREIGN_X=1``: run the whole session while two X displays that belong to somebody else
    are up (a real Xvfb of another process, and a server that resets every connection), as on a developer's
    machine. Tests must own their displays and ignore foreign ones. On by default under CI (issue 23)."""
    from fixtures.dependency_skips import ci_enabled

    if os.environ.get("UNIRENDER_TEST_FOREIGN_X", "1" if ci_enabled() else "0") != "1":
        yield None
        return
    from fixtures.foreign_x import foreign_displays

    with foreign_displays() as displays:
        yield displays

