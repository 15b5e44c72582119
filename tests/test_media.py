"""The media spec: frame sampling, decode-time resizing, the frame cache, and decode failures."""

from __future__ import annotations

import numpy as np
import pytest

from core import media
from core.decoding import MediaSpec, decode_clip, sample_indices, smart_resize
from core.errors import DecodeError
from core.media import FrameCache, decode_span, follow_on_spec
from core.video_io import write_mp4


@pytest.fixture()
def video(tmp_path):
    """A 4 s, 8 fps clip whose frame i has brightness 5 * i, so sampled indices can be read back."""
    frames = np.stack([np.full((112, 112, 3), 5 * i, np.uint8) for i in range(32)])
    path = tmp_path / "clip.mp4"
    write_mp4(path, frames, fps=8.0)
    return path


def test_sample_indices_are_the_official_samplers():
    """V2P-Bench's official pipeline (qwen_vl_utils) takes linspace(0, N - 1, n).round(): the first and last
    frame included, half rounded to even as torch rounds; we took segment midpoints before."""
    import torch

    spec = MediaSpec(num_frames=4)
    assert sample_indices(32, 8.0, 0.0, 4.0, spec) == [0, 10, 21, 31]
    assert sample_indices(32, 8.0, 2.0, 3.0, spec) == [16, 18, 21, 23]
    for total, count in ((7186 * 30, 64), (100, 64), (33, 8), (10, 64)):
        official = torch.linspace(0, total - 1, count).round().long().tolist()
        assert sample_indices(total, 30.0, 0.0, total / 30.0, MediaSpec(num_frames=count)) == official


@pytest.mark.parametrize(
    ("shown_s", "span_s", "frames"),
    [
        (32.0, 0.4, 2),  # 2 fps history: a 0.4 s clip gets the floor, not 64 frames
        (32.0, 3.0, 6),  # 6 frames at 2 fps
        (32.0, 2.3, 6),  # 4.6 rounded up, then to an even count
        (16.0, 40.0, 64),  # never more than the history's own count
    ],
)
def test_a_follow_on_span_is_sampled_at_the_historys_frame_rate(shown_s, span_s, frames):
    spec = MediaSpec(num_frames=64)
    assert follow_on_spec(spec, shown_s, span_s).num_frames == frames
    assert follow_on_spec(MediaSpec(num_frames=64, min_frames=4), 32.0, 0.4).num_frames == 4
    by_rate = MediaSpec(num_frames=None, fps=2.0)
    assert follow_on_spec(by_rate, shown_s, span_s) is by_rate  # already sampled by its length


def test_fps_sampling_is_bounded_by_max_frames():
    assert len(sample_indices(32, 8.0, 0.0, 4.0, MediaSpec(num_frames=None, fps=2.0))) == 8
    assert len(sample_indices(32, 8.0, 0.0, 4.0, MediaSpec(num_frames=None, fps=8.0, max_frames=6))) == 6


@pytest.mark.parametrize("height", [37, 112, 360, 719, 1080, 2160])
@pytest.mark.parametrize("width", [28, 112, 501, 640, 1280, 3840])
@pytest.mark.parametrize(
    "budget",
    [(28 * 28, 84 * 84), (100352, 336 * 336), (256 * 28 * 28, 8192 * 28 * 28), (3136, 12845056)],
    ids=["tiny", "v2p_video", "v2p_prompt_frame", "qwen2.5_vl_default"],
)
def test_frames_are_resized_exactly_as_the_qwen_processor_resizes(height, width, budget):
    """Our decode-time resize rounds as transformers' Qwen2-VL image processor does, so the processor's
    own resize is a no-op and a frame has the size (and token count) the official pipeline gives it."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as processor_resize

    low, high = budget
    if max(height, width) / min(height, width) > 200:
        return
    expected = processor_resize(height, width, factor=28, min_pixels=low, max_pixels=high)
    assert smart_resize(height, width, low, high) == expected
    # The released Qwen2.5-VL processor (3136 ... 12845056 px) then leaves a frame in its range as it is.
    if expected[0] * expected[1] >= 3136:
        assert processor_resize(*expected, factor=28, min_pixels=3136, max_pixels=12845056) == expected


def test_the_prompt_frame_gets_the_tokens_the_official_script_gives_it(compose, tmp_path):
    """media=qwen_64f: the visual-prompt frame keeps the processor limits the official V2P script sets
    (256*28*28 ... 8192*28*28 px): a 720p frame is 728 x 1288, 1196 tokens, as the official pipeline makes
    it; the released processor leaves it so. (A cap like a video frame's gave it 336 tokens.)"""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    raw = np.random.default_rng(0).integers(0, 255, (720, 1280, 3), dtype=np.uint8)
    Image.fromarray(raw).save(tmp_path / "vp.png")
    official = Qwen2VLImageProcessor(min_pixels=256 * 28 * 28, max_pixels=8192 * 28 * 28)
    released = Qwen2VLImageProcessor(min_pixels=3136, max_pixels=12845056)  # Qwen2.5-VL-7B's config
    spec = compose("train", "media=qwen_64f").media
    ours = media.load_image(tmp_path / "vp.png", spec)
    grid = released(images=[ours], return_tensors="pt")["image_grid_thw"]
    assert grid.tolist() == official(images=[raw], return_tensors="pt")["image_grid_thw"].tolist()
    assert ours.shape[:2] == (728, 1288) and int(grid.prod()) // 4 == 1196


def test_720p_at_the_official_video_budget_keeps_its_tokens():
    # A floor after a float multiply gave 224 x 448, 11% fewer visual tokens than the official 252 x 448.
    assert smart_resize(720, 1280, 100352, 336 * 336) == (252, 448)


def test_decode_span_reads_the_sampled_frames_resized(video):
    clip = decode_span(video, 0.0, 4.0, MediaSpec(num_frames=4))
    assert clip.frames.shape == (4, 84, 84, 3)
    assert clip.indices == [0, 10, 21, 31]
    brightness = clip.frames.reshape(4, -1).mean(axis=1)
    assert np.allclose(brightness, [5 * i for i in clip.indices], atol=4)
    assert clip.processor_metadata() == {
        "fps": 8.0,
        "total_num_frames": 32,
        "frames_indices": [0, 10, 21, 31],
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

    from core.media import load_image

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
    from core.media import load_image

    with pytest.raises(DecodeError, match="nowhere.jpg: cannot decode video: cannot read image"):
        load_image(tmp_path / "nowhere.jpg", MediaSpec())
