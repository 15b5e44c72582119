"""Scene segments of a video: from its annotations when the source has them, else from shot detection.

The OVI-Train pipeline starts with scene segmentation; ActivityNet, QVHighlights, YouCook2 and
UCF-Crime come with timed segments, while a video without them (a MovieChat film, a QVHighlights test
clip) is cut into shots by PySceneDetect's content detector: a cut is where the frame-to-frame change
of hue, saturation and luma (0-255 scale, averaged over the frame) exceeds ``threshold``.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ConfigError, DecodeError
from data_builders.sources.captions import CaptionedVideo

DEFAULT_THRESHOLD = 27.0  # PySceneDetect's default for ContentDetector
DEFAULT_MIN_SCENE_S = 0.6


def segments_from_annotations(video: CaptionedVideo) -> list[tuple[float, float]]:
    """The video's annotated caption segments, in seconds: distinct ones, in time order."""
    return sorted({(cap.start, cap.end) for cap in video.captions})


def detect_shots(
    video_path: str | Path,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_scene_s: float = DEFAULT_MIN_SCENE_S,
) -> list[tuple[float, float]]:
    """Cut a video into shots at hard cuts, with PySceneDetect's ``ContentDetector``.

    Every frame is compared with the one before, so a boundary is exact to one frame (``1 / fps``).

    Args:
        video_path: the video file.
        threshold: the content change (0-255) above which two consecutive frames are a cut; lower
            finds more cuts.
        min_scene_s: a cut sooner than this after the previous cut (or the start) is dropped, so every
            shot but the last lasts at least this long.

    Returns:
        ``(start_s, end_s)`` of each shot, contiguous from 0 to the end of the video (one shot when
        there is no cut).

    Raises:
        ConfigError: a non-positive ``threshold`` or a negative ``min_scene_s``.
        DecodeError: the file is missing or cannot be opened as a video.
    """
    if threshold <= 0 or min_scene_s < 0:
        raise ConfigError(f"need threshold > 0 and min_scene_s >= 0, got {threshold}, {min_scene_s}")
    if not Path(video_path).is_file():
        raise DecodeError(str(video_path), "file not found")
    # Imported here: OpenCV is heavy, and only sources without segments need it.
    from scenedetect import ContentDetector, VideoOpenFailure, detect
    from scenedetect.detector import FlashFilter

    # A float min_scene_len is read as seconds (an int would be frames). SUPPRESS drops a cut that
    # comes too soon; the default MERGE mode can also drop a later cut that is far enough apart.
    detector = ContentDetector(
        threshold=float(threshold),
        min_scene_len=float(min_scene_s),
        filter_mode=FlashFilter.Mode.SUPPRESS,
    )
    try:
        # start_in_scene: with no cut at all, the whole video is still one shot (not an empty list).
        scenes = detect(str(video_path), detector, start_in_scene=True)
    except VideoOpenFailure as err:
        raise DecodeError(str(video_path), str(err) or "cannot open") from None
    return [(round(start.seconds, 3), round(end.seconds, 3)) for start, end in scenes]
