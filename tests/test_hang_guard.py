"""The hang guard itself (tests/fixtures/hang_guard.py, issue 45): a test stuck in a native call, where a Python
signal handler never runs, ends the run within its timeout with every thread's stack printed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# Stuck in C with SIGALRM blocked: what a test waiting in Ray's core worker or a GL driver looks like to Python
# (the interpreter never runs again until the call returns). A second thread waits too: its stack must be printed.
STUCK = '''
import ctypes, signal, threading

def waiting_helper_thread(release):
    release.wait()

def test_stuck_in_native_code():
    release = threading.Event()
    threading.Thread(target=waiting_helper_thread, args=(release,), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    ctypes.CDLL(None).sleep(600)
'''
FINE = '''
def test_fine():
    pass
'''


def _suite(tmp_path: Path, guard: bool) -> Path:
    (tmp_path / "test_stuck.py").write_text(STUCK)
    (tmp_path / "test_fine.py").write_text(FINE)
    plugins = '["fixtures.hang_guard"]' if guard else "[]"
    (tmp_path / "conftest.py").write_text(f"pytest_plugins = {plugins}\n")
    return tmp_path


def _run(folder: Path, method_args: list[str], limit: float) -> subprocess.CompletedProcess | None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "timeout=3", *method_args,
           "-n", "2", "--dist", "loadfile", "--max-worker-restart=0", "test_stuck.py", "test_fine.py"]
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        return subprocess.CompletedProcess(cmd, proc.returncode, out)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_a_test_stuck_in_native_code_ends_the_run_with_every_threads_stack(tmp_path):
    result = _run(_suite(tmp_path, guard=True), [], limit=90)
    assert result is not None, "the run did not end: the hang guard did not fire"
    out = result.stdout
    assert result.returncode != 0, out
    assert "crashed while running 'test_stuck.py::test_stuck_in_native_code'" in out, out
    assert "Timeout (0:00:03)!" in out, out
    # Every thread: the stuck main thread (in the test function) and the helper thread, by name of function.
    assert "in test_stuck_in_native_code" in out, out
    assert "in waiting_helper_thread" in out, out
    assert "1 passed" in out, out  # the other file ran


@pytest.mark.slow
def test_pytest_timeouts_signal_method_cannot_end_it(tmp_path):
    """Why the guard exists: pytest-timeout's default method never gets to run (the test can fail)."""
    result = _run(_suite(tmp_path, guard=False), ["-o", "timeout_method=signal"], limit=12)
    assert result is None, f"the signal method ended the stuck test after all:\n{result.stdout}"
