"""The streaming video writer (unirender.jobs.video): files decoded back with PyAV, frame for frame."""

from __future__ import annotations

import os

import numpy as np
import pytest

av = pytest.importorskip("av")

from unirender.errors import SpecError  # noqa: E402
from unirender.jobs.contact_sheet import contact_sheet, visualize  # noqa: E402
from unirender.jobs.video import (  # noqa: E402
    VideoWriter,
    check_video_options,
    join_videos,
    modality_image,
    tiled_image,
    video_info,
)


def decode(path) -> tuple[list[np.ndarray], float]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        return frames, float(stream.average_rate)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_rgb_frames_come_back_exactly_counted_at_the_fps_and_above_35_db(tmp_path, reference_frames):
    rgb = [f["frame"] for f in reference_frames]
    path = tmp_path / "rgb.mp4"
    with VideoWriter(path, fps=12) as writer:
        for image in rgb:
            writer.add(image)
    decoded, fps = decode(path)
    assert len(decoded) == len(rgb) and fps == 12
    assert [d.shape for d in decoded] == [r.shape for r in rgb]
    assert min(psnr(d, r) for d, r in zip(decoded, rgb, strict=True)) >= 35
    info = video_info(path)
    assert info["codec"] == "h264" and info["frames"] == len(rgb) and info["duration_s"] == pytest.approx(10 / 12)
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.pix_fmt == "yuv420p"  # what browsers play


@pytest.mark.parametrize("modality, key", [("depth", "depth_frame"), ("normals", "normals_frame"),
                                           ("flow", "flow_frame"),
                                           ("instance_segmentation", "instance_segmentation_frame")])  # fmt: skip
def test_modalities_are_drawn_with_the_contact_sheets_colour_maps(tmp_path, reference_frames, modality, key):
    arrays = [f[key] for f in reference_frames]
    path = tmp_path / f"{modality}.mp4"
    with VideoWriter(path, fps=10, image=modality_image(modality), background=True) as writer:
        for array in arrays:
            writer.add(array)
    decoded, _ = decode(path)
    expected = [visualize(modality, a)[0] for a in arrays]
    assert len(decoded) == len(arrays)
    # Colour maps have sharp hue edges that 4:2:0 chroma softens; the same picture stays above 22 dB at 64x64,
    # another modality's picture far below it.
    assert min(psnr(d, e) for d, e in zip(decoded, expected, strict=True)) >= 22
    if modality == "depth":
        assert psnr(decoded[3], as_grey(arrays[3])) < 20


def as_grey(depth: np.ndarray) -> np.ndarray:
    d = np.nan_to_num(depth / max(float(np.nanmax(depth)), 1e-9))
    return np.repeat((d * 255).astype(np.uint8)[:, :, None], 3, axis=2)


def test_a_fixed_depth_range_keeps_one_colour_scale(tmp_path, reference_frames):
    depth = reference_frames[0]["depth_frame"]
    fixed = modality_image("depth", value_range=(0.0, 10.0))(depth)
    own = modality_image("depth")(depth)
    assert not np.array_equal(fixed, own)
    np.testing.assert_array_equal(fixed, visualize("depth", depth, value_range=(0.0, 10.0))[0])


def test_a_tiled_video_is_the_contact_sheet_animated(tmp_path, reference_frames):
    labels = ["frame", "depth_frame", "normals_frame"]
    render = tiled_image(labels, tile=64, columns=2)
    path = tmp_path / "tiled.mp4"
    with VideoWriter(path, fps=5, image=render) as writer:
        for f in reference_frames:
            writer.add([f[k] for k in labels])
    decoded, _ = decode(path)
    sheet = np.asarray(contact_sheet([(k, reference_frames[4][k]) for k in labels], tile=64, columns=2))
    assert len(decoded) == len(reference_frames)
    h, w = sheet.shape[:2]
    assert decoded[4].shape[:2] == (h + h % 2, w + w % 2)
    assert psnr(decoded[4][:h, :w], sheet) >= 30


def test_odd_sizes_are_padded_to_even(tmp_path):
    path = tmp_path / "odd.mp4"
    with VideoWriter(path, fps=30) as writer:
        for i in range(3):
            writer.add(np.full((33, 51, 3), 40 * i, np.uint8))
    decoded, _ = decode(path)
    assert len(decoded) == 3 and decoded[0].shape == (34, 52, 3)


def test_bad_options_get_clear_errors(tmp_path):
    with pytest.raises(SpecError) as err:
        check_video_options(fps=0, codec="h264", quality="high", key="output.video")
    assert err.value.errors == [("output.video.fps", "must be a number above 0 (frames per second), got 0")]
    with pytest.raises(SpecError) as err:
        VideoWriter(tmp_path / "x.mp4", codec="nosuchcodec")
    (key, message), = err.value.errors
    assert key == "video.codec" and "'nosuchcodec' is not a video encoder" in message and "libx264" in message
    with pytest.raises(SpecError, match="quality: must be one of low, medium, high, best"):
        VideoWriter(tmp_path / "x.mp4", quality="ultra")
    assert not list(tmp_path.iterdir())


def test_a_frame_of_another_size_fails_and_leaves_no_file(tmp_path):
    path = tmp_path / "v.mp4"
    writer = VideoWriter(path, fps=30, background=True)
    writer.add(np.zeros((32, 32, 3), np.uint8))
    writer.add(np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(ValueError, match="frame 1 is 16x16, the video's frames are 32x32"):
        writer.close()
    assert not list(tmp_path.iterdir())  # neither the video nor its temporary


def test_segments_join_without_reencoding(tmp_path, reference_frames):
    rgb = [f["frame"] for f in reference_frames]
    parts = []
    for k, lo in enumerate(range(0, len(rgb), 4)):
        parts.append(tmp_path / f"part{k}.mp4")
        with VideoWriter(parts[-1], fps=7) as writer:
            for image in rgb[lo : lo + 4]:
                writer.add(image)
    assert join_videos(parts, tmp_path / "joined.mp4", fps=7) == len(rgb)
    joined, fps = decode(tmp_path / "joined.mp4")
    pieces = [frame for part in parts for frame in decode(part)[0]]
    assert fps == 7 and len(joined) == len(rgb)
    for a, b in zip(joined, pieces, strict=True):
        np.testing.assert_array_equal(a, b)  # the same packets: the same pictures
    with av.open(str(tmp_path / "joined.mp4")) as container:
        stream = container.streams.video[0]
        pts = [f.pts * stream.time_base for f in container.decode(stream)]
    assert [float(p) for p in pts] == pytest.approx([i / 7 for i in range(len(rgb))])


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_10000_frame_episode_streams_in_bounded_memory(tmp_path):
    """Memory does not grow with the episode: RSS after 10,000 frames at 300x300 is within 50 MB of what it was
    after the first 500 (the encoder's look-ahead and threads are allocated by then)."""
    rng = np.random.default_rng(0)
    base = np.repeat(np.repeat((rng.random((31, 31, 3)) * 255).astype(np.uint8), 10, 0), 10, 1)[:300, :300]
    path = tmp_path / "long.mp4"
    with VideoWriter(path, fps=30, quality="low", background=True) as writer:
        for i in range(10_000):
            writer.add(np.roll(base, (i * 3) % 300, axis=1))
            if i == 499:
                warm = _rss()
        grown = _rss() - warm
    assert grown < 50 * 2**20, f"RSS grew {grown / 2**20:.1f} MB over 9,500 frames"
    assert video_info(path)["frames"] == 10_000
