"""Chunked commits on the real reference player: SIGKILL inside a long generator episode, Ctrl-C through a real
terminal, a full disk, episodes split across players, and the commit log itself."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import random
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from job_helpers import image_files, player_pids, records_without_clock

from fixtures.held_job import SCRIPT as HELD_JOB
from fixtures.held_job import start_held
from fixtures.private_tmpfs import TmpfsUnavailable, private_tmpfs
from unirender.jobs import JobError, load_dataset, render
from unirender.jobs.atomic import TEMP_MARK
from unirender.jobs.chunks import Commit, CommitLog, select_metadata
from unirender.jobs.progress import Reporter

CLI = [sys.executable, "-m", "unirender.cli"]
CHUNK = 4
FRAMES = 22  # 5 full chunks and a short one


def generator_job(out: Path | str, *, count: int = FRAMES, fmt: str = "png", **output) -> dict:
    """One long random-pose episode (flow included: a resumed chunk must measure it as an uninterrupted run)."""
    return {
        "name": "long",
        "environment": {"executable": "builtin", "platform": "EGL", "width": 32, "height": 32},
        "render": {"modalities": ["rgb", "depth", "flow"], "flow_policy": "previous_step"},
        "episodes": [
            {
                "scene": "FloorPlan1_physics",
                "generator": {"kind": "random", "count": count, "seed": 3, "rotations": [0, 90, 180, 270]},
            }
        ],
        "output": {"directory": str(out), "format": fmt, "frames_per_shard": CHUNK, **output},
        "workers": 1,
    }


def committed_frames(root: Path) -> int:
    return sum(c.frames for c in CommitLog(root / ".unirender-job" / "commits.log").read().values())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("long") / "data"
    result = render(generator_job(out))
    assert result.frames == FRAMES
    return out


def test_sigkill_inside_an_episode_redoes_at_most_one_chunk_and_gives_identical_bytes(
    tmp_path, uninterrupted
):
    """The job is held still once it has written a chosen number of frames (tests/fixtures/held_job.py) and killed
    there: the whole chunks before are committed, the open one is lost and redone; the resume gives the same bytes."""
    expected_files = image_files(uninterrupted)
    expected_records = records_without_clock(uninterrupted)
    rng = random.Random(os.environ.get("UNIRENDER_TEST_SEED", "13"))
    for kill_at in sorted(rng.sample(range(CHUNK + 1, FRAMES - 2), 2)):
        out = tmp_path / f"k{kill_at}"
        job = tmp_path / f"k{kill_at}.yaml"
        job.write_text(yaml.safe_dump(generator_job(out)))
        scratch = tmp_path / "tmp"
        scratch.mkdir(exist_ok=True)  # a SIGKILLed job leaves its FIFO dir: keep it in tmp_path
        proc = start_held("frames", kill_at, tmp_path / f"k{kill_at}.ready", ["render", str(job)],
                          log=tmp_path / f"k{kill_at}.log", env={**os.environ, "TMPDIR": str(scratch)})
        proc.kill()  # SIGKILL
        proc.wait()
        rendered = len(list(out.glob("frames/*/*/*.frame.png")))  # complete frames on disk at the kill
        kept = committed_frames(out)
        # Frames 0 .. kill_at-1 written; the chunk the last of them ends is sealed after it, so not committed.
        whole = (kill_at - 1) // CHUNK * CHUNK
        assert (rendered, kept) == (kill_at, whole), (
            f"held after {kill_at} frames: expected {kill_at} frame files and the {whole // CHUNK} whole chunks "
            f"before the open one committed ({whole} frames); found {rendered} files, {kept} frames committed")
        result = render(job)
        assert result.frames_written == FRAMES - kept and result.frames == FRAMES
        assert image_files(out) == expected_files, f"killed at frame {kill_at}"
        assert records_without_clock(out) == expected_records
        assert not [p for p in out.rglob("*") if TEMP_MARK in p.name]


def test_episode_split_across_two_players_gives_the_same_bytes(tmp_path, uninterrupted):
    """A random and a grid episode (its size known only once its scene is loaded) on two players at once."""

    class Workers(Reporter):
        def __init__(self):
            self.frames_by = {}

        def worker(self, worker, state):
            if "frame" in state:
                self.frames_by[worker] = self.frames_by.get(worker, 0) + 1

    seen = Workers()
    result = render(generator_job(tmp_path / "two"), workers=2, reporter=seen)
    assert result.workers == 2 and sorted(seen.frames_by) == [0, 1], seen.frames_by
    assert [p["frames"] for p in result.players] == [seen.frames_by[0], seen.frames_by[1]]
    assert image_files(tmp_path / "two") == image_files(uninterrupted)

    grid = generator_job(tmp_path / "g1", fmt="npz")
    grid["episodes"] = [
        {"scene": "FloorPlan201_physics", "generator": {"kind": "grid", "every": 6, "rotations": [0, 180]}}
    ]
    one = render(grid)
    grid["output"]["directory"] = str(tmp_path / "g2")
    seen = Workers()
    two = render(grid, workers=2, reporter=seen)
    assert one.frames == two.frames > 2 * CHUNK and sorted(seen.frames_by) == [0, 1]
    assert {k.split("/", 1)[1]: v for k, v in image_files(tmp_path / "g1").items()} == {
        k.split("/", 1)[1]: v for k, v in image_files(tmp_path / "g2").items()
    }
    assert records_without_clock(tmp_path / "g1") == records_without_clock(tmp_path / "g2")


def read_terminal(fd: int, until, timeout: float = 60) -> bytes:
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(output):
        ready, _, _ = select.select([fd], [], [], 0.02)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
    return output


def test_ctrl_c_on_a_terminal_cancels_cleanly_and_resumes(tmp_path):
    """A real terminal: the line discipline turns ^C into SIGINT for the foreground process group. The players
    are not in it, so none of them dies: no crash, no restart; exit 130 with the kept count."""
    out = tmp_path / "c"
    job = tmp_path / "c.yaml"
    frames = 3 * CHUNK
    job.write_text(yaml.safe_dump(generator_job(out, count=frames)))
    # The job is held once it has rendered CHUNK + 1 frames until the ^C reaches it (tests/fixtures/held_job.py):
    # it cannot finish first, however loaded the machine.
    held = [str(HELD_JOB), "interrupt", str(CHUNK + 1), str(tmp_path / "ready"), "--", "render", str(job)]
    pid, fd = pty.fork()
    if pid == 0:  # the child: session leader with the pty as its controlling terminal
        try:
            os.environ["TERM"] = "dumb"
            os.execv(sys.executable, [sys.executable, *held])
        finally:
            os._exit(127)
    try:
        output = read_terminal(fd, lambda _: committed_frames(out) >= CHUNK and (tmp_path / "ready").exists())
        assert committed_frames(out) == CHUNK, output.decode(errors="replace")
        os.write(fd, b"\x03")  # Ctrl-C typed on the terminal
        output += read_terminal(fd, lambda _: False, timeout=60)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = output.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 130, text
    kept = committed_frames(out)
    assert 0 < kept < frames
    assert f"{kept:,} frames kept" in text and "run the same command to resume" in text, text
    for word in ("player lost", "crash", "restart", "Traceback"):
        assert word not in text, text
    assert not [p for p in out.rglob("*") if TEMP_MARK in p.name]
    kept_files = {p: p.stat().st_mtime_ns for p in out.glob("frames/*/0000/*")}
    assert len(kept_files) == 3 * CHUNK  # the first chunk: rgb, depth, flow per frame

    done = subprocess.run([*CLI, "render", str(job)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{kept:,} frames kept, 1 unit left" in done.stderr
    assert len(load_dataset(out)) == frames
    assert {p: p.stat().st_mtime_ns for p in out.glob("frames/*/0000/*")} == kept_files  # not rendered again


def test_disk_full_mid_chunk_fails_then_resumes(tmp_path, uninterrupted):
    """A real full disk, for any user: a tmpfs in a user and mount namespace of the test's own."""
    mount = tmp_path / "small"
    mount.mkdir()
    # Room for about two chunks of this job (~20 KB of 4 KB blocks per frame): the disk fills up inside it.
    with contextlib.ExitStack() as stack:
        try:
            disk = stack.enter_context(private_tmpfs(mount, "200k"))
        except TmpfsUnavailable as exc:
            pytest.skip(f"missing dependency: user namespaces for a private tmpfs ({exc})")
        out = disk.path / "data"
        with pytest.raises(JobError) as info:
            render(generator_job(out))
        message = str(info.value)
        assert "No space left on device" in message and "run the same job again to resume" in message
        kept = committed_frames(out)
        assert 0 < kept < FRAMES and f"{kept:,} frames are kept" in message
        assert player_pids() == []
        disk.resize("4m")
        result = render(generator_job(out))
        assert result.frames == FRAMES and result.frames_written == FRAMES - kept
        assert image_files(out) == image_files(uninterrupted)
        assert records_without_clock(out) == records_without_clock(uninterrupted)
    assert not any(mount.iterdir())  # the tmpfs went with its namespace; nothing was written beneath it


def test_commit_log_ignores_and_cuts_a_torn_line(tmp_path):
    log = CommitLog(tmp_path / "commits.log")
    a, b = Commit("u", 0, 4, 9, "a" * 64), Commit("u", 1, 4, 9, "b" * 64)
    log.append(a)
    with open(log.path, "ab") as f:
        f.write(b.line()[:-10])  # SIGKILL in the middle of an append
    assert log.read() == {("u", 0): a}
    log.repair()
    log.append(b)
    assert log.read() == {("u", 0): a, ("u", 1): b}


def test_a_finished_job_opens_from_its_commit_log_without_a_player(tmp_path):
    """A 100,000-frame resume state, written by the code (1,000 commits of 100 frames): opening it starts no
    player, prints what it found and reads back nothing per frame (speed: benchmarks/jobs.py)."""
    from unirender.jobs.chunks import digest, encode_records, meta_path
    from unirender.jobs.state import JobState
    from unirender.spec import load_spec

    spec = load_spec(
        {
            "episodes": [{"scene": "FloorPlan1_physics", "generator": {"kind": "random", "count": 100_000}}],
            "output": {"directory": str(tmp_path), "format": "npz"},
        }
    )
    unit = "e0000-FloorPlan1_physics-r000"
    record = encode_records(
        [{"index": 0, "location": "shards/x.npz", "files": {"frame": "000000.frame"}, "metadata": {}}]
    )
    with JobState.open(tmp_path, spec) as state:
        for k in range(1000):
            state.log.append(Commit(unit, k, 100, 100_000, digest(record)))
        meta_path(tmp_path, unit, 0).parent.mkdir()
        meta_path(tmp_path, unit, 0).write_bytes(record)  # the manifest reads one record per unit

    class Log(Reporter):
        lines: list = []

        def log(self, message):
            self.lines.append(message)

    def no_player(_kwargs):
        raise AssertionError("a finished job must not start a player")

    result = render(spec, player_factory=no_player, reporter=Log())
    assert result.frames == 100_000 and result.frames_written == 0
    assert any("100,000 frames kept, 0 units left" in line for line in Log.lines), Log.lines
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["counts"]["chunks"] == 1000 and manifest["directory"] == str(tmp_path.resolve())


def test_metadata_selection_keeps_the_named_key_paths():
    meta = {
        "agent": {"position": 1, "rotation": 2},
        "objects": [{"position": 3, "name": "a"}, {"name": "b"}],
        "x": 1,
    }
    assert select_metadata(meta, "all") is meta and select_metadata(meta, "none") == {}
    assert select_metadata(meta, ["agent.position", "objects.position", "missing"]) == {
        "agent": {"position": 1},
        "objects": [{"position": 3}, {}],
    }


def test_metadata_none_and_a_selection_are_what_load_dataset_gives(tmp_path):
    job = generator_job(tmp_path / "m", count=3, metadata=["agent.position", "lastActionSuccess"])
    render(job)
    records = load_dataset(tmp_path / "m").records
    assert [sorted(r["metadata"]) for r in records] == [["agent", "lastActionSuccess"]] * 3
    assert list(records[0]["metadata"]["agent"]) == ["position"]
    assert re.fullmatch(r"frames/e0000-FloorPlan1_physics-r000/0000", records[0]["location"])


def test_an_action_error_fails_the_job_without_advising_a_resume(tmp_path):
    job = generator_job(tmp_path / "a")
    job["episodes"] = [
        {"scene": "FloorPlan1_physics", "actions": ["MoveAhead", {"action": "RotateRight", "degrees": "far"}]}
    ]
    with pytest.raises(JobError) as info:
        render(job)
    message = str(info.value)
    assert "ActionError" in message and "fix the spec" in message, message
    assert "run the same job again" not in message
    assert player_pids() == []


def test_dataset_reads_metadata_a_chunk_at_a_time(uninterrupted):
    dataset = load_dataset(uninterrupted)
    assert len(dataset) == FRAMES
    picks = [FRAMES - 1, 0, CHUNK, CHUNK - 1, 3]  # across chunk boundaries, out of order
    got = [dataset.record(i) for i in picks]
    everything = load_dataset(uninterrupted).records
    assert got == [everything[i] for i in picks] and [r["index"] for r in got] == picks
    assert dataset.event(CHUNK).metadata == everything[CHUNK]["metadata"]
    with pytest.raises(IndexError):
        dataset.record(FRAMES)


def test_a_second_ctrl_c_stops_at_once(tmp_path, monkeypatch):
    """The first SIGINT asks the workers to stop after their frame and stop their players; one that arrives
    while they are still at it (here a real player that is slow to stop) ends the wait at once."""
    import threading

    from unirender.controller import Controller
    from unirender.jobs.runner import JobInterrupted

    out = tmp_path / "twice"
    slow = threading.Event()
    committed = threading.Event()  # the job's first chunk is committed: it is well under way
    stopping = threading.Event()  # a worker has begun stopping its (slow) player
    second = threading.Event()  # the second SIGINT has reached render()'s thread

    append = CommitLog.append

    def committing(self, *args, **kwargs):
        done = append(self, *args, **kwargs)
        committed.set()
        return done

    monkeypatch.setattr(CommitLog, "append", committing)

    class SlowToStop(Controller):
        def stop(self, *args, **kwargs):
            if slow.is_set():
                stopping.set()
                # A Unity build can take seconds to quit; this one, until the second Ctrl-C has arrived (at most
                # 30 s: a render() that waited for it then returns, not interrupted at once, and the test fails).
                second.wait(30)
            return super().stop(*args, **kwargs)

    def interrupt_twice():
        committed.wait(60)
        slow.set()
        os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread, waiting on the workers
        stopping.wait(60)  # a worker is stopping its player: the second one arrives while it is at it
        os.kill(os.getpid(), signal.SIGINT)

    inside = threading.Event()
    interrupts = [0]

    def on_sigint(signum, frame):  # Python's own behaviour, but only while render() runs: none reaches pytest
        if inside.is_set():
            interrupts[0] += 1
            if interrupts[0] == 2:
                second.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    sender = threading.Thread(target=interrupt_twice)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            inside.set()
            try:
                render(generator_job(out, count=200), player_factory=lambda kwargs: SlowToStop(**kwargs))
            finally:
                inside.clear()
    finally:
        sender.join()
        signal.signal(signal.SIGINT, previous)
        for thread in threading.enumerate():  # the workers finish their slow frame and stop their players
            if thread.name.startswith("unirender-render-"):
                thread.join(30)
    assert isinstance(info.value, JobInterrupted) and info.value.immediate
    assert info.value.frames_kept == committed_frames(out) >= CHUNK and info.value.units_left == 1
    assert player_pids() == []
