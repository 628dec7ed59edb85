"""LocalBackend with real reference players (EGL, 64x64): isolation, budgets, crashes, cleanup."""

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cluster_support import PLAYER, process_gone

from unirender.cluster import CapacityError, LocalBackend, Resources, SessionClosedError, SessionLostError
from unirender.errors import PlayerCrashedError, RestartError


@pytest.fixture(scope="module")
def backend():
    with LocalBackend(max_sessions=4) as b:
        yield b


def _yaw(event) -> float:
    return round(float(event.metadata["agent"]["rotation"]["y"])) % 360


def test_concurrent_sessions_never_see_each_others_frames(backend):
    views = ["RotateRight", "RotateLeft", "LookDown"]
    with ThreadPoolExecutor(3) as pool:
        sessions = list(pool.map(lambda _: backend.create_session(PLAYER), range(3)))
    try:
        for session, view in zip(sessions, views, strict=True):
            session.step(view)
        reference = [np.array(s.last_event.frame) for s in sessions]
        yaws = [_yaw(s.last_event) for s in sessions]
        for i in range(3):
            for j in range(i + 1, 3):
                assert not np.array_equal(reference[i], reference[j]), (
                    "views must differ for the test to mean much"
                )

        mismatches = []

        def hammer(i: int) -> None:
            for _ in range(8):
                event = sessions[i].step("Pass")
                if not np.array_equal(event.frame, reference[i]) or _yaw(event) != yaws[i]:
                    mismatches.append(i)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not mismatches
        assert [s.steps for s in sessions] == [9, 9, 9]
        assert len({s.info()["pid"] for s in sessions}) == 3
    finally:
        pids = [s.info()["pid"] for s in sessions]
        for s in sessions:
            s.stop()
    assert all(process_gone(pid) for pid in pids)
    assert backend.sessions() == []


def test_session_info_and_lifecycle(backend):
    session = backend.create_session(PLAYER, session_id="mine")
    info = session.info()
    assert info["id"] == "mine" and info["backend"] == "local" and info["state"] == "ready"
    assert isinstance(info["pid"], int) and info["platform"] and info["node"]
    assert backend.get("mine") is session
    with pytest.raises(ValueError, match="already in use"):
        backend.create_session(PLAYER, session_id="mine")
    event = session.step({"action": "MoveAhead"})
    assert event.frame.shape == (64, 64, 3) and session.last_event is event
    assert session.reset().frame.shape == (64, 64, 3)
    session.stop()
    session.stop()  # idempotent
    assert session.info()["state"] == "stopped"
    with pytest.raises(SessionClosedError):
        session.step("Pass")
    with pytest.raises(KeyError, match="mine"):
        backend.get("mine")
    assert process_gone(info["pid"])


def test_player_budget_fails_clearly_or_waits_for_a_stop():
    with LocalBackend(max_sessions=1) as b:
        first = b.create_session(PLAYER)
        with pytest.raises(CapacityError, match="all 1 player slots are taken"):
            b.create_session(PLAYER)
        assert b.info()["capacity"]["sessions"] == 1  # the refused session launched nothing
        b.placement.wait_timeout = 60  # now beyond the budget means: wait
        admitted = []
        waiter = threading.Thread(target=lambda: admitted.append(b.create_session(PLAYER)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not admitted
        first.stop()
        waiter.join(60)
        assert len(admitted) == 1 and admitted[0].step("Pass").frame.shape == (64, 64, 3)
    assert admitted[0].info()["state"] == "stopped"


def test_gpu_round_robin_reaches_the_controller():
    """Each session's GPU becomes the Controller's ``gpu_device``. Without GPUs (CI) the platform refuses that
    device by number, which shows the index got there; with GPUs the session runs on it."""
    from unirender.errors import PlatformError

    with LocalBackend(gpus=[0, 1], sessions_per_gpu=1) as b:
        for expected in (0, 1):
            try:
                session = b.create_session(PLAYER)
            except PlatformError as exc:
                assert f"gpu_device={expected}" in str(exc)
                assert b.info()["capacity"]["sessions"] == expected  # the failed launch gave its slot back
                b.placement.acquire(Resources(gpu=expected))  # hold it, as a running session would
            else:
                assert session.info()["gpu"] == expected
        with pytest.raises(CapacityError, match="every GPU has 1 sessions"):
            b.create_session(PLAYER)


def test_failed_launch_releases_its_slot():
    with LocalBackend(max_sessions=1) as b:
        with pytest.raises(Exception) as info:
            b.create_session({**PLAYER, "executable": "/nonexistent/player"})
        assert not isinstance(info.value, CapacityError)
        assert b.info()["capacity"]["sessions"] == 0 and b.sessions() == []


def test_killed_player_is_restarted_and_the_episode_reported_lost(backend):
    session = backend.create_session({**PLAYER, "max_restarts": 1})
    try:
        session.step("RotateRight")
        old_pid = session.info()["pid"]
        os.kill(old_pid, signal.SIGKILL)
        with pytest.raises(RestartError):
            session.step("Pass")
        assert session.restarts == 1 and session.info()["pid"] != old_pid
        assert session.reset().frame.shape == (64, 64, 3)
    finally:
        session.stop()


def test_player_crash_without_restarts_is_lost_until_restart(backend):
    session = backend.create_session({**PLAYER, "max_restarts": 0})
    try:
        os.kill(session.info()["pid"], signal.SIGKILL)
        with pytest.raises(PlayerCrashedError):
            session.step("Pass")
        with pytest.raises(SessionLostError, match="restart"):
            session.step("Pass")
        assert session.restart().frame.shape == (64, 64, 3)
        assert session.step("Pass") and session.restarts == 1
    finally:
        session.stop()


def test_begin_step_holds_the_session_until_its_event_is_received(backend):
    """Two halves (the service's batched steps): the action goes out at once, another step of the session waits
    for the first half's event to be taken, and a crash in between is the second half's RestartError."""
    session = backend.create_session({**PLAYER, "max_restarts": 1})
    try:
        yaw = _yaw(session.step("Pass"))
        receive = session.begin_step("RotateRight")
        other = threading.Thread(target=session.step, args=("RotateRight",))
        other.start()
        other.join(1.0)
        assert other.is_alive()  # waiting for the session
        event = receive()
        other.join(30)
        assert not other.is_alive() and _yaw(event) == (yaw + 90) % 360 and session.steps == 3
        assert _yaw(session.last_event) == (yaw + 180) % 360
        pid = session.info()["pid"]
        os.kill(pid, signal.SIGKILL)
        assert process_gone(pid)
        receive = session.begin_step("Pass")  # to a dead player: whichever half notices, the second one says it
        with pytest.raises(RestartError):
            receive()
        assert session.restarts == 1 and session.begin_step("Pass")().frame.shape == (64, 64, 3)
    finally:
        session.stop()
