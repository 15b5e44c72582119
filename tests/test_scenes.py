"""Scene segmentation: annotated segments pass through; shots are detected at rendered hard cuts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError, DecodeError
from core.video_io import write_mp4
from data_builders.scenes import detect_shots, segments_from_annotations
from data_builders.sources.captions import Caption, CaptionedVideo

# Four shots of known lengths (frames), so three hard cuts; each a colour with its own stripe pattern.
SHOTS = (((220, 30, 30), 25), ((30, 200, 40), 17), ((20, 40, 210), 30), ((230, 230, 40), 12))


def _render(path: Path, fps: float, shots=SHOTS, noise: int = 6) -> list[float]:
    """Render the shots (with a little per-frame noise, so frames within a shot are not identical).

    Returns:
        The true cut times in seconds.
    """
    rng = np.random.default_rng(0)
    frames, cuts, count = [], [], 0
    for k, (colour, length) in enumerate(shots):
        shot = np.zeros((48, 64, 3), dtype=np.int16) + np.array(colour, dtype=np.int16)
        shot[:, (k * 5) % 16 :: 16] = 255 - shot[:, (k * 5) % 16 :: 16]  # vertical stripes, shifted per shot
        for _ in range(length):
            jitter = rng.integers(-noise, noise + 1, size=shot.shape)
            frames.append(np.clip(shot + jitter, 0, 255).astype(np.uint8))
        count += length
        cuts.append(count / fps)
    write_mp4(path, np.stack(frames), fps=fps)
    return cuts[:-1]


@pytest.mark.parametrize("fps", [10.0, 24.0, 29.97])
def test_detects_each_hard_cut_within_one_frame(tmp_path: Path, fps: float):
    path = tmp_path / "cuts.mp4"
    cuts = _render(path, fps)
    shots = detect_shots(path, threshold=27.0, min_scene_s=0.3)
    assert len(shots) == len(cuts) + 1
    step = 1 / fps  # every frame is compared with the one before
    for (_, end), (start, _), cut in zip(shots[:-1], shots[1:], cuts, strict=True):
        assert end == start and abs(start - cut) <= step
    assert shots[0][0] == 0.0 and abs(shots[-1][1] - sum(n for _, n in SHOTS) / fps) <= step


def test_min_scene_length_drops_cuts_too_soon(tmp_path: Path):
    path = tmp_path / "cuts.mp4"
    _render(path, fps=10.0)  # cuts at 2.5, 4.2 and 7.2 s; 8.4 s in all
    shots = detect_shots(path, min_scene_s=2.0)  # 4.2 comes 1.7 s after 2.5; the last shot may be short
    assert [(round(s, 1), round(e, 1)) for s, e in shots] == [(0.0, 2.5), (2.5, 7.2), (7.2, 8.4)]
    shots = detect_shots(path, min_scene_s=3.5)
    assert [(round(s, 1), round(e, 1)) for s, e in shots] == [(0.0, 4.2), (4.2, 8.4)]


def test_a_video_without_cuts_is_one_shot(tmp_path: Path):
    path = tmp_path / "still.mp4"
    _render(path, fps=5.0, shots=(((90, 120, 150), 20),))
    assert detect_shots(path) == [(0.0, 4.0)]


def test_bad_video_or_settings(tmp_path: Path):
    with pytest.raises(DecodeError, match="file not found"):
        detect_shots(tmp_path / "missing.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video")
    with pytest.raises(DecodeError, match=str(junk)):
        detect_shots(junk)
    with pytest.raises(ConfigError):
        detect_shots(junk, threshold=0)
    with pytest.raises(ConfigError):
        detect_shots(junk, min_scene_s=-1)


def test_segments_from_annotations_pass_through():
    captions = [
        Caption("v", 0, 5.0, 9.0, "b"),
        Caption("v", 1, 0.0, 4.5, "a"),
        Caption("v", 2, 5.0, 9.0, "c"),  # the same window as caption 0
    ]
    video = CaptionedVideo("v", 10.0, captions)
    assert segments_from_annotations(video) == [(0.0, 4.5), (5.0, 9.0)]
    assert segments_from_annotations(CaptionedVideo("w", 3.0, [])) == []
