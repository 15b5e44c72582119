"""UCF-Crime's temporal anomaly annotation, ``Temporal_Anomaly_Annotation_for_Testing_Videos.txt``.

One video a line, whitespace-separated (spaces, and the odd stray tab)::

    Arson011_x264.mp4  Arson  150  420  680  1267
    Normal_Videos_003_x264.mp4  Normal  -1  -1  -1  -1

The four numbers are the start and end FRAME NUMBERS of up to two anomalous events, ``-1`` where there
is none. Frames become seconds with the video's frame rate, so the reader needs the videos (also for
their durations); they lie under ``<class>/`` folders (``Arson/Arson011_x264.mp4``), flat, or anywhere
below the videos directory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import DataError, DataErrors, DecodeError
from data_builders.sources.captions import Caption, CaptionedVideo, checked_caption
from data_builders.sources.videos import VideoFinder, probe_video

FIELDS = ("name", "class", "start1", "end1", "start2", "end2")
ABSENT = -1
NORMAL_CLASS = "Normal"
NORMAL_SENTENCE = "normal activity"


@dataclass(frozen=True)
class _Line:
    """One parsed annotation line."""

    number: int
    name: str
    label: str
    frames: tuple[int, int, int, int]

    @property
    def key(self) -> str:
        return Path(self.name).stem


def load_ucf_crime(
    path: str | Path, videos_dir: str | Path | None = None, *, fps_of: Callable[[str], float] | None = None
) -> tuple[list[CaptionedVideo], list[str]]:
    """Read the UCF-Crime temporal annotation into captioned videos, times in seconds.

    Each event becomes the caption "an anomaly of type <class> happens" (``RoadAccidents`` reads
    "road accidents"); a Normal video, which has ``-1`` everywhere, becomes one whole-video caption
    "normal activity"; a caption's ``ref`` is ``{"event": i}``, the event's place on the line (0 or 1).
    Quarantined with their reason: a video that cannot be found or read (its frame
    rate is unknown), an event with only one of its two frame numbers, an event that is negative,
    reversed or past the video's end, events on a Normal video, and an anomalous video without events.

    Args:
        path: the annotation text file.
        videos_dir: where the videos lie (see the module docstring).
        fps_of: the frame rate the frame numbers count in, given the video file's path; by default the
            video's own average frame rate. The duration always comes from the video itself.

    Returns:
        ``(videos, quarantined)``: videos keyed by file stem (``Arson011_x264``); each reason names the
        video and its row.

    Raises:
        DataError / DataErrors: a missing file, or lines with the wrong number of fields, non-integer
            frame numbers or a repeated video name (all listed).
    """
    lines = _parse(Path(path))
    finder, videos, quarantined = VideoFinder(videos_dir), [], []
    for line in lines:
        where = f"{line.key} (row {line.number})"
        video_file = finder.find(line.key, f"{line.label}/{line.name}", line.name)
        if video_file is None:
            quarantined.append(f"{where}: video {line.name} not found in {videos_dir}")
            continue
        try:
            fps, duration = _timing(Path(videos_dir) / video_file, fps_of)
        except (DecodeError, ValueError) as err:
            quarantined.append(f"{where}: {err}")
            continue
        captions, reasons = _captions(line, fps, duration)
        quarantined += [f"{where}{reason}" for reason in reasons]
        if captions:
            videos.append(CaptionedVideo(line.key, duration, captions, video_file))
    return videos, quarantined


def _timing(video: Path, fps_of: Callable[[str], float] | None) -> tuple[float, float]:
    """The frame rate the annotation counts in, and the video's duration in seconds."""
    native_fps, frames = probe_video(video)
    fps = float(fps_of(str(video))) if fps_of is not None else native_fps
    if not fps > 0:
        raise ValueError(f"frame rate {fps} for {video.name} is not positive")
    return fps, round(frames / native_fps, 3)


def _captions(line: _Line, fps: float, duration: float) -> tuple[list[Caption], list[str]]:
    """The line's captions, and the reasons (``"[i]: ..."`` or ``": ..."``) for what was left out."""
    events = [(i, line.frames[2 * i], line.frames[2 * i + 1]) for i in range(2)]
    present = [(i, s, e) for i, s, e in events if (s, e) != (ABSENT, ABSENT)]
    if line.label == NORMAL_CLASS:
        reasons = [
            f"[{i}]: a Normal video has no anomalous event, got frames [{s}, {e}]" for i, s, e in present
        ]
        return [Caption(line.key, 0, 0.0, duration, NORMAL_SENTENCE, ref={"event": 0})], reasons
    if not present:
        return [], [f": no anomalous event for class {line.label}"]
    sentence = f"an anomaly of type {_words(line.label)} happens"
    captions, reasons = [], []
    for i, s, e in present:
        if ABSENT in (s, e):
            reasons.append(f"[{i}]: only one of its frame numbers is given: [{s}, {e}]")
            continue
        start, end = round(s / fps, 3), round(e / fps, 3)
        caption = checked_caption(line.key, i, start, end, sentence, duration, ref={"event": i})
        if isinstance(caption, str):
            reasons.append(f"[{i}]: frames [{s}, {e}] at {fps:g} fps: {caption}")
        else:
            captions.append(caption)
    return captions, reasons


def _words(label: str) -> str:
    """``"RoadAccidents"`` -> ``"road accidents"``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", label).lower()


def _parse(path: Path) -> list[_Line]:
    """The file's non-blank lines, checked for shape; every bad line is listed in one DataErrors."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise DataError(str(path), f"cannot read the annotation: {err}") from None
    lines, problems, first_row = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()  # any run of spaces and tabs separates fields
        if not fields:
            continue
        if len(fields) != len(FIELDS):
            problems.append(f"row {number}: expected {len(FIELDS)} fields {FIELDS}, got {len(fields)}")
            continue
        frames, bad = [], False
        for field, value in zip(FIELDS[2:], fields[2:], strict=True):
            if not re.fullmatch(r"-?\d+", value):
                problems.append(
                    f"row {number}, field '{field}': expected a frame number or -1, got {value!r}"
                )
                bad = True
            else:
                frames.append(int(value))
        name = fields[0]
        if name in first_row:
            problems.append(
                f"row {number}, field 'name': duplicate video {name} (first on row {first_row[name]})"
            )
            bad = True
        first_row.setdefault(name, number)
        if not bad:
            lines.append(_Line(number, name, fields[1], tuple(frames)))
    if problems:
        raise DataErrors(path, problems)
    return lines
