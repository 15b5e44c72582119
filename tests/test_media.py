"""The media spec: frame sampling, decode-time resizing, the frame cache, and decode failures."""

from __future__ import annotations

import numpy as np
import pytest

from data_builders import media
from data_builders.errors import DecodeError
from data_builders.media import (
    FrameCache,
    MediaSpec,
    decode_clip,
    decode_span,
    fit_to_budget,
    sample_indices,
)
from data_builders.video_io import write_mp4


@pytest.fixture()
def video(tmp_path):
    """A 4 s, 8 fps clip whose frame i has brightness 5 * i, so sampled indices can be read back."""
    frames = np.stack([np.full((112, 112, 3), 5 * i, np.uint8) for i in range(32)])
    path = tmp_path / "clip.mp4"
    write_mp4(path, frames, fps=8.0)
    return path


def test_sample_indices_are_segment_midpoints():
    spec = MediaSpec(num_frames=4)
    assert sample_indices(32, 8.0, 0.0, 4.0, spec) == [4, 12, 20, 28]
    assert sample_indices(32, 8.0, 2.0, 3.0, spec) == [17, 19, 21, 23]


def test_fps_sampling_is_bounded_by_max_frames():
    assert len(sample_indices(32, 8.0, 0.0, 4.0, MediaSpec(num_frames=None, fps=2.0))) == 8
    assert len(sample_indices(32, 8.0, 0.0, 4.0, MediaSpec(num_frames=None, fps=8.0, max_frames=6))) == 6


def test_fit_to_budget_keeps_patch_grid_multiples():
    assert fit_to_budget(112, 112, 84 * 84) == (84, 84)
    h, w = fit_to_budget(480, 640, 336 * 336)
    assert h % 28 == 0 and w % 28 == 0 and h * w <= 336 * 336


def test_decode_span_reads_the_sampled_frames_resized(video):
    clip = decode_span(video, 0.0, 4.0, MediaSpec(num_frames=4))
    assert clip.frames.shape == (4, 84, 84, 3)
    assert clip.indices == [4, 12, 20, 28]
    brightness = clip.frames.reshape(4, -1).mean(axis=1)
    assert np.allclose(brightness, [5 * i for i in clip.indices], atol=4)
    assert clip.processor_metadata() == {
        "fps": 8.0,
        "total_num_frames": 25,
        "frames_indices": [4, 12, 20, 28],
    }


def test_pyav_and_decord_agree(video):
    a = decode_span(video, 0.0, 4.0, MediaSpec(num_frames=4, decoder="decord"))
    b = decode_span(video, 0.0, 4.0, MediaSpec(num_frames=4, decoder="pyav"))
    assert a.indices == b.indices
    assert np.abs(a.frames.astype(int) - b.frames.astype(int)).mean() < 2


def test_cache_second_pass_does_not_decode(video, tmp_path, monkeypatch):
    cache, spec = FrameCache(tmp_path / "cache"), MediaSpec(num_frames=4)
    first = cache.clip(video, 0.0, 4.0, spec)
    monkeypatch.setattr(media, "decode_span", lambda *a: pytest.fail("decoded again"))
    second = cache.clip(video, 0.0, 4.0, spec)
    assert np.array_equal(first.frames, second.frames) and first.indices == second.indices


def test_cache_keys_on_the_spec(video, tmp_path):
    cache = FrameCache(tmp_path / "cache")
    assert len(cache.clip(video, 0.0, 4.0, MediaSpec(num_frames=4)).frames) == 4
    assert len(cache.clip(video, 0.0, 4.0, MediaSpec(num_frames=6)).frames) == 6


@pytest.mark.parametrize(
    "content, reason",
    [(b"", "empty"), (b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50, "")],
    ids=["zero-byte", "corrupt"],
)
def test_bad_video_names_the_file(tmp_path, content, reason):
    path = tmp_path / "broken.mp4"
    path.write_bytes(content)
    with pytest.raises(DecodeError, match=f"broken.mp4: cannot decode video: .*{reason}"):
        decode_span(path, 0.0, 1.0, MediaSpec())


def test_truncated_video_names_the_file(video, tmp_path):
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(video.read_bytes()[:2000])
    with pytest.raises(DecodeError, match="truncated.mp4"):
        decode_span(truncated, 0.0, 4.0, MediaSpec())


def test_missing_video_names_the_file(tmp_path):
    with pytest.raises(DecodeError, match="nowhere.mp4: cannot decode video: file not found"):
        decode_span(tmp_path / "nowhere.mp4", 0.0, 1.0, MediaSpec())


def test_decoding_in_the_worker_equals_decoding_here(video):
    """decode_span decodes in the decode worker process (tests/test_decode_worker.py: hangs, crashes)."""
    here = decode_clip(str(video), 0.0, 4.0, MediaSpec(num_frames=4))
    there = decode_span(video, 0.0, 4.0, MediaSpec(num_frames=4))
    assert np.array_equal(here.frames, there.frames) and there.frames.flags.writeable
    assert (here.fps, here.indices, here.span_frames) == (there.fps, there.indices, there.span_frames)


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="media.timeout_s must be positive, got 0"):
        MediaSpec(timeout_s=0)


def test_images_decode_once_per_file_version(tmp_path, monkeypatch):
    from PIL import Image

    from data_builders.media import load_image

    path = tmp_path / "vp.jpg"
    Image.fromarray(np.full((112, 112, 3), 200, np.uint8)).save(path)
    spec = MediaSpec(image_max_pixels=84 * 84)
    first = load_image(path, spec)
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    first[:] = 0  # a caller writing into its copy must not change the cached frame
    again = load_image(path, spec)
    assert not opened and again.shape == (84, 84, 3) and again.mean() > 150
    Image.fromarray(np.full((112, 112, 3), 10, np.uint8)).save(path)  # a new version of the file
    assert load_image(path, spec).mean() < 50 and opened


def test_missing_image_names_the_file(tmp_path):
    from data_builders.media import load_image

    with pytest.raises(DecodeError, match="nowhere.jpg: cannot decode video: cannot read image"):
        load_image(tmp_path / "nowhere.jpg", MediaSpec())
