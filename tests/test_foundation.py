import signal
import sys
import time

import pytest

from unirender._process import ManagedProcess, describe_exit, signal_name
from unirender.errors import PlayerCrashedError


def test_managed_process_logs_and_reaps(tmp_path):
    log = tmp_path / "child.log"
    p = ManagedProcess([sys.executable, "-c", "print('hello from child')"], log_path=log)
    assert p.wait(10) == 0
    p.terminate()
    assert "hello from child" in p.log_tail()


def test_managed_process_terminate_escalates_to_sigkill(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    p = ManagedProcess([sys.executable, "-c", code], log_path=tmp_path / "l.log")
    deadline = time.monotonic() + 10
    while "ready" not in p.log_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    rc = p.terminate(grace=0.3)
    assert rc == -signal.SIGKILL
    assert time.monotonic() - t0 < 5
    assert not p.alive()


def test_exit_descriptions():
    assert signal_name(-11) == "SIGSEGV"
    assert signal_name(0) is None
    assert "SIGSEGV" in describe_exit(-11)
    assert "code 3" in describe_exit(3)


def test_error_message_carries_log(tmp_path):
    err = PlayerCrashedError("player died", returncode=-9, log_path="/x/log", log_tail="line1\nline2")
    assert "/x/log" in str(err) and "line2" in str(err)


def test_cli_help_runs():
    from unirender.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0


def test_child_started_from_short_lived_thread_outlives_the_thread(tmp_path):
    # PDEATHSIG is tied to the forking *thread*: children must be forked from the long-lived spawner thread.
    import threading

    box = {}
    t = threading.Thread(
        target=lambda: box.setdefault(
            "p", ManagedProcess([sys.executable, "-c", "import time; time.sleep(30)"], log_path=tmp_path / "l")
        )
    )
    t.start()
    t.join()
    p = box["p"]
    # A window for a PDEATHSIG to land had it been tied to that (exited) thread: an absence is what is tested,
    # so it is a time, not a race.
    time.sleep(0.5)
    try:
        assert p.alive(), p.describe()
    finally:
        p.terminate(grace=0.5)
    assert not p.alive()
