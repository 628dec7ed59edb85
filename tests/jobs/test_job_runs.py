"""Jobs end to end on the real reference player: every format read back equals a direct Controller run, both
transports, several workers, player crashes, SIGKILL + resume, progress output, the demo."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from job_helpers import (
    SMALL_JOB_FRAMES,
    assert_same_frames,
    dataset_frames,
    kill_one_player,
    player_pids,
    small_job,
)

from fixtures.held_job import start_held
from unirender.jobs import JobError, load_dataset, render
from unirender.jobs.atomic import TEMP_MARK
from unirender.jobs.progress import Reporter
from unirender.player.encode import decode_flow

CLI = [sys.executable, "-m", "unirender.cli"]


def frame_files(directory: Path) -> dict[str, bytes]:
    root = Path(directory) / "frames"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def png_dataset(tmp_path_factory):
    """The small job, uninterrupted, in png format: the yardstick for resume tests."""
    out = tmp_path_factory.mktemp("png") / "data"
    result = render(small_job(out, fmt="png"))
    return out, result


def test_png_dataset_matches_direct_run(png_dataset, reference_frames):
    out, result = png_dataset
    assert result.frames == result.frames_written == SMALL_JOB_FRAMES and not result.failed
    assert_same_frames(dataset_frames(out), reference_frames)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"] == {"episodes": 2, "units": 3, "chunks": 5, "frames": SMALL_JOB_FRAMES}
    assert manifest["platform"] == "EGL" and manifest["device"]
    assert manifest["player_version"].startswith("unirender-player")
    assert manifest["spec"]["render"]["cameras"][0]["name"] == "corner"
    files = frame_files(out)
    assert any(name.endswith(".frame.png") for name in files)
    assert any(name.endswith(".depth_frame.npy") for name in files)
    assert any("third_party_camera_frames-corner" in name for name in files)


@pytest.mark.parametrize("fmt", ["npz", "webdataset"])
def test_sharded_formats_match_direct_run(tmp_path, fmt, reference_frames):
    result = render(small_job(tmp_path / fmt, fmt=fmt))
    assert result.frames == SMALL_JOB_FRAMES
    shards = sorted(p.name for p in (tmp_path / fmt / "shards").iterdir())
    assert len(shards) == 5  # units of 4, 4 and 2 frames at 3 frames per shard: 2 + 2 + 1
    assert_same_frames(dataset_frames(tmp_path / fmt), reference_frames)


def test_wsgi_transport_and_two_workers_give_the_same_frames(tmp_path, reference_frames):
    result = render(small_job(tmp_path / "w", fmt="npz", transport="wsgi"), workers=2)
    assert result.workers == 2
    assert_same_frames(dataset_frames(tmp_path / "w"), reference_frames)


def test_events_read_back_carry_metadata_and_modalities(png_dataset):
    out, _ = png_dataset
    dataset = load_dataset(out)
    events = list(dataset)
    assert len(events) == len(dataset) == SMALL_JOB_FRAMES
    last = events[-1]
    assert last.metadata["lastAction"] == "TeleportFull" and last.metadata["agent"]["rotation"]["y"] == 180
    assert last.frame.shape == (64, 64, 3) and last.depth_frame.dtype == np.float32
    assert len(last.third_party_camera_frames) == 1
    assert set(dataset.records[0]) >= {"unit", "episode", "repeat", "scene", "index", "files", "metadata"}
    # flow_policy previous_step: an action episode starts with zero flow; a pose episode's first pose is
    # measured against the scene's start pose (here 1.5 m away and turned 90 degrees)
    assert not decode_flow(events[0].flow_frame).any()
    first_pose = events[SMALL_JOB_FRAMES - 2]
    assert first_pose.metadata["lastAction"] == "TeleportFull" and decode_flow(first_pose.flow_frame).any()


def test_png16_depth_is_within_a_millimetre(tmp_path, reference_frames):
    out = tmp_path / "d16"
    render(small_job(out, output={"directory": str(out), "format": "png", "depth_encoding": "png16"}))
    got = dataset_frames(out)
    for frames, want in zip(got, reference_frames, strict=True):
        assert np.abs(frames["depth_frame"] - want["depth_frame"]).max() <= 0.0005 + 1e-6
        assert np.array_equal(frames["frame"], want["frame"])


class KillingReporter(Reporter):
    """Kills a player with SIGKILL when the job has written ``at`` frames (``times`` times in all)."""

    def __init__(self, at: int, times: int = 1):
        self.at, self.times, self.frames, self.kills, self.messages = at, times, 0, 0, []
        self.rendered = 0  # every frame rendered, redone ones included

    def advance(self, frames=1):
        self.frames += frames
        self.rendered += max(frames, 0)
        if frames > 0 and self.frames >= self.at and self.kills < self.times:
            self.kills += 1
            kill_one_player()

    def log(self, message):
        self.messages.append(message)


def test_player_crash_redoes_only_the_lost_episode(tmp_path, reference_frames):
    reporter = KillingReporter(at=6)
    result = render(small_job(tmp_path / "c", fmt="npz"), reporter=reporter)
    assert reporter.kills == 1
    assert any("redoing its open chunk" in m for m in reporter.messages), reporter.messages
    assert result.frames == SMALL_JOB_FRAMES
    assert 0 < reporter.rendered - SMALL_JOB_FRAMES <= 3  # a lost player costs at most its open chunk
    assert_same_frames(dataset_frames(tmp_path / "c"), reference_frames)
    assert player_pids() == []


def test_repeated_crashes_fail_the_job_with_a_report_then_resume(tmp_path, reference_frames):
    spec = small_job(tmp_path / "f", fmt="png", max_episode_retries=1)
    reporter = KillingReporter(at=5, times=5)
    with pytest.raises(JobError) as info:
        render(spec, reporter=reporter)
    message = str(info.value)
    assert "e0000-FloorPlan1_physics-r001" in message and "max_episode_retries=1" in message
    assert "run the same job again to resume" in message
    assert player_pids() == []
    assert not (tmp_path / "f" / "manifest.json").exists()
    result = render(spec)  # resumes: the first unit is kept
    assert result.units_resumed == 1 and result.frames_written == SMALL_JOB_FRAMES - 4
    assert_same_frames(dataset_frames(tmp_path / "f"), reference_frames)


def run_and_sigkill(tmp_path, spec: dict, name: str, frames: int) -> Path:
    """Start ``unirender render`` on ``spec``, SIGKILL it once it has written ``frames`` frames (held there:
    tests/fixtures/held_job.py); return the spec file."""
    job = tmp_path / f"{name}.yaml"
    job.write_text(yaml.safe_dump(spec))
    # A SIGKILLed job cannot remove its FIFO temp dir: keep it under tmp_path, removed below.
    scratch = tmp_path / f"{name}-tmp"
    scratch.mkdir()
    proc = start_held("frames", frames, tmp_path / f"{name}.ready", ["render", str(job)],
                      log=tmp_path / f"{name}.log", env={**os.environ, "TMPDIR": str(scratch)})
    proc.kill()  # SIGKILL
    proc.wait()
    assert not (Path(spec["output"]["directory"]) / "manifest.json").exists()
    assert list(scratch.iterdir()), "the killed job's FIFO dir should be here"
    shutil.rmtree(scratch)
    return job


def test_resume_after_sigkill_at_random_points_gives_the_same_dataset(tmp_path, png_dataset):
    """Property: wherever a job is SIGKILLed, running it again ends with the uninterrupted dataset."""
    expected = frame_files(png_dataset[0])
    expected_meta = [r["files"] for r in load_dataset(png_dataset[0]).records]
    rng = random.Random(os.environ.get("UNIRENDER_TEST_SEED", "5"))
    for kill_at in sorted(rng.sample(range(1, SMALL_JOB_FRAMES), 2)):
        out = tmp_path / f"k{kill_at}"
        job = run_and_sigkill(tmp_path, small_job(out, fmt="png"), f"k{kill_at}", kill_at)
        assert len(list(out.glob("frames/*/*/*.frame.png"))) == kill_at
        done = subprocess.run([*CLI, "render", str(job)], capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        # Not a TTY: plain progress lines, and a summary on stdout.
        assert "render: " in done.stderr and "\x1b[" not in done.stderr
        assert f"{SMALL_JOB_FRAMES} frames in 3 episodes" in done.stdout
        assert frame_files(out) == expected, f"killed at frame {kill_at}"
        assert [r["files"] for r in load_dataset(out).records] == expected_meta


def test_resume_after_sigkill_with_a_shard_open(tmp_path, reference_frames):
    out = tmp_path / "wds"
    job = run_and_sigkill(tmp_path, small_job(out, fmt="webdataset"), "wds", 1)
    assert any(out.glob("shards/*.tar*")), "a shard is open at the kill"
    assert render(job).frames == SMALL_JOB_FRAMES
    assert not [p for p in out.rglob("*") if TEMP_MARK in p.name]
    assert_same_frames(dataset_frames(out), reference_frames)


def test_resuming_a_finished_job_writes_nothing_and_a_changed_spec_is_refused(tmp_path, png_dataset):
    out, _ = png_dataset
    before = {p: p.stat().st_mtime_ns for p in (out / "frames").rglob("*")}
    result = render(small_job(out, fmt="png"))
    assert result.frames_written == 0 and result.units_resumed == 3 and result.frames == SMALL_JOB_FRAMES
    assert {p: p.stat().st_mtime_ns for p in (out / "frames").rglob("*")} == before
    from unirender.jobs.cli import format_summary

    summary = format_summary(result)  # no "0 frames in 0.0 s (0.0 frames/s)" for a run with nothing to do
    assert summary.endswith("this run: nothing to render, every frame was already written"), summary
    assert "frames/s" not in summary and f"{SMALL_JOB_FRAMES} frames in 3 episodes, 3 resumed" in summary
    with pytest.raises(JobError, match="holds a different job"):
        render(small_job(out, fmt="npz"))


def test_progress_on_a_terminal(tmp_path):
    job = tmp_path / "job.yaml"
    spec = small_job(tmp_path / "t")
    spec["episodes"] = spec["episodes"][1:]
    job.write_text(yaml.safe_dump(spec))
    leader, follower = pty.openpty()
    # A terminal that can draw (CI shells may export TERM=dumb, where rich rightly draws no live display).
    env = {**os.environ, "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [*CLI, "render", str(job)], stdin=follower, stdout=follower, stderr=follower, close_fds=True, env=env
    )
    os.close(follower)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait()
        os.close(leader)
    text = output.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "\x1b[" in text  # rich's live display
    assert "frames/s" in text and "ETA" in text and "worker 0" in text
    assert "2/2" in text


def test_demo_writes_a_contact_sheet(tmp_path):
    from PIL import Image

    out = tmp_path / "demo"
    proc = subprocess.run(
        [*CLI, "demo", "--size", "64", "--out", str(out)], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert "contact sheet:" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["frames"] == 10
    assert len(manifest["output"]["frame_keys"]) == 12  # 6 modalities x (agent + one camera)
    sheet = np.asarray(Image.open(out / "contact_sheet.png").convert("RGB"))
    assert sheet.shape == (22 + 3 * (256 + 22 + 6) + 6, 4 * (256 + 6) + 6, 3)  # a title row, then 3 rows of 4
    assert sheet[6:28, 6:400].max() > 200  # the title (which frame this is) is drawn
    from unirender.jobs.demo import DEMO_SHEET_FRAME, sheet_title

    record = load_dataset(out).records[DEMO_SHEET_FRAME]
    title = sheet_title("demo", DEMO_SHEET_FRAME, 10, record)  # names the frame's file, not its shard folder
    assert title.startswith(f"demo: frame {DEMO_SHEET_FRAME} of 10")
    assert title.endswith(f"/{DEMO_SHEET_FRAME:06d}.frame.png"), title
    assert (out / title.split(", ", 1)[1]).is_file(), title
    for n in range(12):  # every panel shows something: not one flat colour
        x, y = 6 + (n % 4) * 262, 22 + 6 + (n // 4) * 284 + 22
        panel = sheet[y : y + 256, x : x + 256]
        assert panel.std() > 5, n
    # The static camera's flow (last panel) is white with a caption on it, not a blank tile.
    still = sheet[22 + 6 + 2 * 284 + 22 :, 6 + 3 * 262 :][:256, :256]
    assert (still == 255).mean() > 0.9 and (still < 128).any()


def test_jobs_run_on_a_session_backend(tmp_path, reference_frames):
    from unirender.cluster import create_backend

    with create_backend("local") as backend:
        result = render(small_job(tmp_path / "b", fmt="webdataset"), backend=backend, workers=2)
        assert backend.sessions() == []  # the job stopped its sessions
    assert result.workers == 2 and result.platform == "EGL" and result.device
    assert_same_frames(dataset_frames(tmp_path / "b"), reference_frames)
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["software_rendering"] is True


def test_cancel_stops_after_the_current_frame_and_the_job_resumes(tmp_path, reference_frames):
    import threading

    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(dict(p))
        if p["frames_done"] >= 3:
            cancel.set()

    spec = small_job(tmp_path / "x", fmt="npz")
    result = render(spec, progress=progress, cancel=cancel)
    assert result.cancelled and not result.failed and not (tmp_path / "x" / "manifest.json").exists()
    assert seen[0] == {
        "frames_done": 1,
        "frames_total": SMALL_JOB_FRAMES,
        "episodes_done": 0,
        "episodes_total": 3,
    }
    assert player_pids() == []
    with pytest.raises(JobError, match="not a finished dataset"):
        load_dataset(tmp_path / "x")
    result = render(spec)
    assert not result.cancelled and result.frames == SMALL_JOB_FRAMES
    assert_same_frames(dataset_frames(tmp_path / "x"), reference_frames)


def test_ctrl_c_stops_the_job_and_its_players(tmp_path):
    out = tmp_path / "i"
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(small_job(out, fmt="png")))
    # Held once its first frame is rendered until the interrupt reaches it (tests/fixtures/held_job.py): the
    # job cannot finish first, however loaded the machine.
    log = tmp_path / "job.log"
    proc = start_held("interrupt", 1, tmp_path / "ready", ["render", str(job)], log=log, start_new_session=True)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = log.read_text()
    assert proc.returncode == 130, err
    assert "run the same command to resume" in err and "Traceback" not in err
    with pytest.raises(ProcessLookupError):  # nothing of the job's process group is left
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.05)
    assert not [p.relative_to(out) for p in out.rglob("*") if TEMP_MARK in p.name], err


def test_render_command_out_workers_and_no_resume(tmp_path, capsys):
    from unirender.cli import main

    spec = small_job(tmp_path / "spec-dir", fmt="npz")
    spec["episodes"] = [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead"]}]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(spec))
    spec["episodes"][0]["actions"] = ["RotateLeft"]
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(spec))
    out = str(tmp_path / "elsewhere")
    assert main(["render", str(tmp_path / "a.yaml"), "--out", out, "--workers", "1", "--quiet"]) == 0
    assert not (tmp_path / "spec-dir").exists()  # --out wins over output.directory
    assert json.loads((Path(out) / "manifest.json").read_text())["directory"] == str(Path(out).resolve())
    assert "2 frames in 1 episode -> " in capsys.readouterr().out
    assert main(["render", str(tmp_path / "b.yaml"), "--out", out, "--quiet"]) == 1  # resume: refused
    assert "holds a different job" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "b.yaml"), "--out", out, "--no-resume", "--quiet"]) == 0
    assert [r["metadata"]["lastAction"] for r in load_dataset(out).records][-1] == "RotateLeft"
    # the same job with its players behind an explicit session backend gives the same frames
    out2 = str(tmp_path / "via-backend")
    assert main(["render", str(tmp_path / "b.yaml"), "--out", out2, "--backend", "local", "--quiet"]) == 0
    a, b = list(load_dataset(out)), list(load_dataset(out2))
    assert len(a) == len(b) == 2 and all((x.frame == y.frame).all() for x, y in zip(a, b, strict=True))


def test_a_camera_that_renders_one_flat_colour_fails_the_job_unless_allowed(tmp_path):
    """A third-party camera high above the scene looking at the empty sky renders one colour, as every camera of a
    player without a rendering context would: the job stops at the unit's first frame with the platform and the
    likely cause; ``render.allow_flat_cameras: true`` lets it go on."""
    job = {
        "environment": {"executable": "builtin", "platform": "EGL", "width": 32, "height": 32},
        "render": {"cameras": [{"name": "sky", "position": {"x": 0, "y": 60, "z": 0}, "rotation": {"x": -90}}]},
        "episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass", "Pass"]}],
        "output": {"directory": str(tmp_path / "sky"), "frames_per_shard": 2},
        "workers": 1,
    }
    with pytest.raises(JobError) as info:
        render(job)
    text = str(info.value)
    assert "third_party_camera_frames" in text and "flat colour" in text and "EGL" in text, text
    assert "render.allow_flat_cameras: true" in text and "fix the spec" in text, text
    assert not (tmp_path / "sky" / "manifest.json").exists()
    job["render"]["allow_flat_cameras"] = True
    assert render(job).frames == 3
    event = next(iter(load_dataset(tmp_path / "sky")))
    sky = event.third_party_camera_frames[0]
    assert (sky == sky[0, 0]).all() and not (event.frame == event.frame[0, 0]).all()
