"""Frame storage without a player: encodings, writers, resume bookkeeping, contact sheet, progress output."""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from unirender.jobs.atomic import TEMP_MARK, atomic_file, sweep_temp_files
from unirender.jobs.chunks import Commit
from unirender.jobs.contact_sheet import contact_sheet, flow_to_rgb, turbo
from unirender.jobs.encoding import decode_array, encode_array
from unirender.jobs.episodes import frames_to_record, group_camera_frames, modality_of
from unirender.jobs.progress import PlainReporter, RichReporter
from unirender.jobs.state import JobError, JobState
from unirender.jobs.writers import open_episode_writer
from unirender.spec import OutputSpec, load_spec

images = hnp.arrays(
    np.uint8,
    st.tuples(st.integers(1, 9), st.integers(1, 9), st.sampled_from([3, 4])),
    elements=st.integers(0, 255),
)
floats = hnp.arrays(
    np.float32,
    st.tuples(st.integers(1, 9), st.integers(1, 9)),
    elements=st.floats(-1e6, 1e6, width=32, allow_nan=False),
)


@settings(max_examples=40, deadline=None)
@given(array=st.one_of(images, floats), prefer_png=st.booleans())
def test_arrays_round_trip_exactly(array, prefer_png):
    ext, data = encode_array("frame", array, prefer_png=prefer_png)
    assert ext == ("png" if prefer_png and array.dtype == np.uint8 else "npy")
    back = decode_array(f"x.{ext}", data)
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_read_only_flipped_views_encode_like_copies():
    base = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    view = np.flip(base, axis=0)
    view.flags.writeable = False
    for prefer_png in (True, False):
        assert encode_array("frame", view, prefer_png=prefer_png) == encode_array(
            "frame", view.copy(), prefer_png=prefer_png
        )


def test_png16_depth_is_millimetre_exact():
    depth = np.array([[0.0, 0.0014, 1.2345], [2.5, 19.9, 70.0]], dtype=np.float32)
    ext, data = encode_array("depth_frame", depth, prefer_png=True, depth16_scale=1000.0)
    assert ext == "u16.png"
    back = decode_array("a.u16.png", data, depth16_scale=1000.0)
    assert back.dtype == np.float32
    assert np.abs(back[:, :2] - depth[:, :2]).max() <= 0.0005 + 1e-6
    assert back[1, 2] == pytest.approx(65.535)  # clipped to the 16-bit range


def synthetic_frames(seed: int, size: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "frame": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
        "depth_frame": rng.random((size, size), dtype=np.float32) * 5,
        "normals_frame": rng.integers(0, 256, (size, size, 4), dtype=np.uint8),
        "third_party_camera_frames.top": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
    }


def write_episode(root, fmt: str, frames: int, **output) -> list[dict]:
    spec = OutputSpec(format=fmt, **output)
    writer = open_episode_writer(root, "e0000-s-r000", spec, "Meters")
    records = []
    for i in range(frames):
        writer.add(i, synthetic_frames(i), {"i": i, "lastActionSuccess": True})
        if (i + 1) % spec.frames_per_shard == 0 or i + 1 == frames:
            chunk, sealed = writer.seal()
            assert chunk == i // spec.frames_per_shard
            records += sealed
    return records


def tree_bytes(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


@pytest.mark.parametrize("fmt", ["png", "npz", "webdataset"])
def test_writers_are_deterministic_and_shard(tmp_path, fmt):
    a = write_episode(tmp_path / "a", fmt, 5, frames_per_shard=2)
    b = write_episode(tmp_path / "b", fmt, 5, frames_per_shard=2)
    assert a == b
    files_a, files_b = tree_bytes(tmp_path / "a"), tree_bytes(tmp_path / "b")
    assert files_a == files_b  # same frames -> same bytes (fixed archive times and owners)
    assert not any(TEMP_MARK in name for name in files_a)
    if fmt == "png":
        assert len(files_a) == 5 * 4
        assert sorted({r["location"] for r in a}) == [f"frames/e0000-s-r000/000{k}" for k in range(3)]
    else:
        assert sorted({r["location"] for r in a}) == sorted(files_a)  # 3 shards: 2 + 2 + 1
        assert len(files_a) == 3


def test_npz_shards_open_with_numpy_and_tar_shards_follow_webdataset(tmp_path):
    records = write_episode(tmp_path / "n", "npz", 2)
    with np.load(tmp_path / "n" / records[1]["location"]) as npz:
        assert np.array_equal(npz[records[1]["files"]["frame"]], synthetic_frames(1)["frame"])
    records = write_episode(tmp_path / "w", "webdataset", 2)
    with tarfile.open(tmp_path / "w" / records[0]["location"]) as tar:
        names = tar.getnames()
        assert all(m.mtime == 0 for m in tar.getmembers())
        sample = json.loads(tar.extractfile("e0000-s-r000_000001.json").read())
    assert sample == {"i": 1, "lastActionSuccess": True}
    # WebDataset groups a sample by the name up to the first dot.
    assert {n.split(".", 1)[0] for n in names} == {"e0000-s-r000_000000", "e0000-s-r000_000001"}
    assert "e0000-s-r000_000000.frame.png" in names and "e0000-s-r000_000000.depth_frame.npy" in names


def test_discarded_shard_leaves_no_partial_file(tmp_path):
    writer = open_episode_writer(tmp_path, "e0000-s-r000", OutputSpec(format="npz"), "Meters")
    writer.add(0, synthetic_frames(0), {})
    assert any(TEMP_MARK in n for n in tree_bytes(tmp_path))
    writer.discard()
    assert tree_bytes(tmp_path) == {}


def test_atomic_file_appears_only_when_complete(tmp_path):
    target = tmp_path / "x.bin"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write(b"half")
            raise RuntimeError("killed")
    assert os.listdir(tmp_path) == []
    (tmp_path / f"y.png{TEMP_MARK}123").write_bytes(b"left by a SIGKILL")
    assert sweep_temp_files(tmp_path) == 1 and os.listdir(tmp_path) == []


def test_camera_stacks_split_per_camera_and_group_back():
    class FakeFrames:  # only what frames_to_record reads: a frames() dict
        def frames(self):
            return {
                "frame": np.zeros((2, 2, 3), np.uint8),
                "depth_frame": np.ones((2, 2), np.float32),
                "third_party_camera_frames": np.stack([np.full((2, 2, 3), i, np.uint8) for i in range(2)]),
                "third_party_depth_frames": np.ones((2, 2, 2), np.float32),
            }

    render = load_spec(
        {
            "episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass"]}],
            "render": {
                "modalities": ["rgb"],
                "cameras": [{"name": "a", "position": {}}, {"name": "b", "position": {}}],
            },
        }
    ).render
    recorded = frames_to_record(FakeFrames(), render)
    assert list(recorded) == ["frame", "third_party_camera_frames.a", "third_party_camera_frames.b"]
    grouped = group_camera_frames(recorded)
    assert [int(a[0, 0, 0]) for a in grouped["third_party_camera_frames"]] == [0, 1]
    assert modality_of("third_party_instance_segmentation_frames.a") == "instance_segmentation"


def test_state_refuses_another_job_and_locks_the_directory(tmp_path):
    spec = load_spec({"episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass"]}]})
    other = load_spec({"episodes": [{"scene": "FloorPlan1_physics", "actions": ["MoveAhead"]}]})
    (tmp_path / "notes.txt").write_text("the user's file")
    commit = Commit("e0000-s-r000", 0, 1, 1, "0" * 64)
    with JobState.open(tmp_path, spec) as state:
        state.log.append(commit)
        with pytest.raises(JobError, match="in use by another running job"):
            JobState.open(tmp_path, spec)
    with JobState.open(tmp_path, spec) as state:  # same job: resumes
        assert state.commits() == {("e0000-s-r000", 0): commit}
    with pytest.raises(JobError, match="holds a different job"):
        JobState.open(tmp_path, other)
    with JobState.open(tmp_path, other, resume=False) as state:  # start over: only the job's files go
        assert state.commits() == {}
    assert (tmp_path / "notes.txt").read_text() == "the user's file"


def test_colour_maps():
    ends = turbo(np.array([0.15, 0.9]))
    assert ends[0][2] > ends[0][0] and ends[1][0] > ends[1][2]  # near blue, far red
    still = flow_to_rgb(np.zeros((3, 3, 2), np.float32))[0]
    assert (still == 255).all()  # no motion is white
    assert flow_to_rgb(np.zeros((3, 3, 2), np.float32))[1] == "no motion"
    moving = flow_to_rgb(np.stack([np.full((2, 2), 3.0), np.zeros((2, 2))], -1).astype(np.float32))[0]
    opposite = flow_to_rgb(np.stack([np.full((2, 2), -3.0), np.zeros((2, 2))], -1).astype(np.float32))[0]
    assert not np.array_equal(moving, opposite) and not (moving == 255).all()


def test_contact_sheet_has_one_labelled_panel_per_frame():
    frames = synthetic_frames(0, size=32)
    frames["flow_frame"] = np.random.default_rng(1).normal(size=(32, 32, 2)).astype(np.float32)
    sheet = contact_sheet(frames.items(), tile=64, columns=3)
    assert sheet.size == (3 * 70 + 6, 2 * (64 + 22 + 6) + 6)
    pixels = np.asarray(sheet)
    # Every panel differs from the background; captions drew light text above each.
    for n in range(5):
        x, y = 6 + (n % 3) * 70, 6 + (n // 3) * 92
        assert pixels[y + 22 : y + 86, x : x + 64].std() > 10
        assert pixels[y : y + 22, x : x + 64].max() > 200


def test_contact_sheet_title_depth_colour_bar_and_still_flow():
    from unirender.jobs.contact_sheet import COLOUR_BAR

    depth = np.linspace(0.5, 4.0, 64 * 64, dtype=np.float32).reshape(64, 64)
    frames = [("depth", depth), ("flow", np.zeros((64, 64, 2), np.float32))]
    plain = np.asarray(contact_sheet(frames, tile=256, columns=2))
    titled = np.asarray(contact_sheet(frames, tile=256, columns=2, title="frame 3 of 10"))
    assert titled.shape[0] == plain.shape[0] + 22 and titled[6:28].max() > 200
    # depth: a turbo bar (blue on the left, red on the right) in the caption row, right-aligned
    bar = plain[6 + 6 + COLOUR_BAR[1] // 2, 6 + 256 - COLOUR_BAR[0] : 6 + 256].astype(int)
    assert bar[2, 2] > bar[2, 0] and bar[-3, 0] > bar[-3, 2]
    # zero flow: white with a grey note in the middle
    still = plain[6 + 22 : 6 + 22 + 256, 6 + 262 : 6 + 262 + 256]
    assert (still == 255).mean() > 0.9 and (still[100:156] < 200).any()


def test_plain_progress_lines(tmp_path):
    out = io.StringIO()
    reporter = PlainReporter(out, interval=0)
    reporter.start(total=4, done=1, workers=2)
    reporter.worker(0, "e0000: 1/3 frames")
    reporter.add_total(2)
    reporter.advance(2)
    reporter.stop()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("render: 2 worker(s), 1 frame(s) already done")
    assert "3/6 frames" in lines[-1] and "frames/s" in lines[-1] and "ETA" in lines[-1]
    assert "w0: e0000: 1/3 frames" in lines[-1]
    assert "\x1b[" not in out.getvalue()


def test_rich_progress_on_a_terminal(monkeypatch):
    from rich.console import Console

    monkeypatch.setenv("TERM", "xterm-256color")  # TERM=dumb (some CI shells) turns the live display off

    out = io.StringIO()
    reporter = RichReporter(Console(file=out, force_terminal=True, width=120))
    reporter.start(total=10, done=0, workers=1)
    reporter.worker(0, "e0003-kitchen-r000: 4/10 frames")
    reporter.advance(4)
    reporter.stop()
    text = out.getvalue()
    assert "\x1b[" in text  # live display escapes
    assert "4/10" in text and "frames/s" in text and "worker 0" in text and "e0003-kitchen-r000" in text


class FramesOnly:
    """Just what the writers read from an Event: ``frames()`` and ``metadata``."""

    def __init__(self, seed: int):
        self.seed, self.metadata = seed, {"seed": seed}

    def frames(self):
        frames = synthetic_frames(self.seed)
        frames["third_party_camera_frames"] = frames.pop("third_party_camera_frames.top")[None]  # 1 camera
        return frames


def test_write_behind_writes_in_order_and_reports_errors(tmp_path):
    from unirender.jobs.write_behind import WriteBehind

    render = load_spec(
        {
            "episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass"]}],
            "render": {"modalities": ["rgb"]},
        }
    ).render
    output = OutputSpec(format="npz", frames_per_shard=4)
    commits = []
    behind = WriteBehind(
        open_episode_writer(tmp_path / "ok", "u", output, "Meters"),
        render,
        output,
        commit=lambda chunk, records: commits.append((chunk, records)),
    )
    for i in range(6):
        behind.add(i, FramesOnly(i))
        if i in (3, 5):
            behind.seal()
    behind.finish()
    assert [chunk for chunk, _ in commits] == [0, 1]
    records = commits[0][1] + commits[1][1]
    assert [r["metadata"]["seed"] for r in records] == list(range(6))
    assert list(records[0]["files"]) == ["frame", "third_party_camera_frames.0"]  # rgb only

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "frames").write_text("a file where the frames directory should be")
    behind = WriteBehind(
        open_episode_writer(tmp_path / "bad", "u", OutputSpec(format="png"), "Meters"),
        render,
        output,
        commit=lambda chunk, records: None,
    )
    with pytest.raises(OSError):
        for i in range(10):  # the helper's error surfaces on a later add() or at finish()
            behind.add(i, FramesOnly(i))
        behind.finish()
    behind.discard()


def test_npz_shards_keep_any_array_exactly(tmp_path):
    arrays = {
        "flipped": np.flip(np.arange(24, dtype=np.float32).reshape(2, 3, 4), 0),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3)),
        "ids": np.arange(6, dtype=np.uint32).reshape(2, 3).T,
    }
    writer = open_episode_writer(tmp_path, "u", OutputSpec(format="npz"), "Meters")
    writer.add(0, arrays, {})
    record = writer.seal()[1][0]
    with np.load(tmp_path / record["location"]) as npz:
        for key, array in arrays.items():
            got = npz[record["files"][key]]
            assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array), key


def test_missing_modalities_are_named():
    from unirender.jobs.episodes import missing_modalities

    doc = {
        "episodes": [{"scene": "FloorPlan1_physics", "actions": ["Pass"]}],
        "render": {"modalities": ["rgb", "depth", "normals"], "cameras": [{"name": "a", "position": {}}]},
    }
    render = load_spec(doc).render
    event = FramesOnly(0)  # frame, depth, normals, one camera's rgb only
    assert missing_modalities(event, render) == ["depth (cameras)", "normals (cameras)"]
    doc["render"]["cameras"] = []
    assert missing_modalities(event, load_spec(doc).render) == []
    doc["render"]["modalities"].append("flow")
    doc["render"]["flow_policy"] = "previous_step"
    assert missing_modalities(event, load_spec(doc).render) == ["flow"]


def test_first_eta_ignores_the_time_before_the_first_frame(monkeypatch):
    from unirender.jobs import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    counts = progress._Counts()
    counts.total = 1000
    clock[0] += 30.0  # players starting, scenes loading: no frame yet
    counts.count(1)
    assert counts.eta() is None  # one frame tells nothing about the rate
    for _ in range(9):
        clock[0] += 0.1  # then 10 frames/s
        counts.count(1)
    assert counts.eta() == pytest.approx(99.0)  # 990 frames left at 10/s, not 990 / (10 / 31 s) = 3069 s
    assert progress._format_eta(99.0) == "1:39" and progress._format_eta(3725) == "1:02:05"
