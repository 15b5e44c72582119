"""MovieChat-1K annotations: one JSON file per video::

    {"info": {"video_path": "AWA-6.mp4", "fps": 25.0, "num_frame": 9000, ...},
     "global": [{"question": "...", "answer": "..."}, ...],
     "breakpoint": [{"time": 1500, "question": "...", "answer": "..."}, ...],
     "caption": "..."}

A breakpoint's ``time`` is a FRAME INDEX (seconds = time / info.fps), and the video lasts
``num_frame / fps`` seconds. Breakpoint questions are asked at their moment of the video, so each
becomes a caption ending there; the global questions (about the whole film) and the caption are not used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.checks import is_number, is_string
from core.errors import ConfigError, DataError, DataErrors
from core.files import read_json_object
from data_builders.sources.captions import CaptionedVideo, checked_caption, clean_sentence
from data_builders.sources.videos import VideoFinder


def load_moviechat(
    path: str | Path, videos_dir: str | Path | None = None, *, window_s: float = 10.0
) -> tuple[list[CaptionedVideo], list[str]]:
    """Read MovieChat annotation JSON files into captioned videos (keyed by the stem of ``info.video_path``).

    Each breakpoint at time ``t`` (seconds) becomes a caption over ``[max(0, t - window_s), t]`` whose
    sentence is the answer and whose ``question`` is the breakpoint's question, so the question
    arrives at ``t`` with the last ``window_s`` seconds as its evidence; its ``ref`` is ``{"breakpoint": i}``,
    its position in ``breakpoint``. A breakpoint at a negative time,
    at 0, past the end, or with an empty question or answer is quarantined with its reason.

    Args:
        path: one annotation JSON file, or a directory of them (``*.json``, read in name order).
        videos_dir: where the videos lie (``info.video_path`` below it, or any ``<stem>.*``).
        window_s: seconds of video before a breakpoint that its caption covers.

    Returns:
        ``(videos, quarantined)``; each reason names the video and the breakpoint index.

    Raises:
        ConfigError: ``window_s`` is not positive.
        DataError / DataErrors: no JSON files, unreadable JSON, or missing or mistyped fields; every
            problem of every file is listed, each naming its file.
    """
    if not (is_number(window_s) and window_s > 0):
        raise ConfigError(f"window_s must be a positive number of seconds, got {window_s!r}")
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise DataError(str(path), "no MovieChat annotation files (*.json) in the directory")
    entries, problems, first_file = [], [], {}
    for file in files:
        try:
            data = read_json_object(file, "MovieChat annotation")
        except DataError as err:
            problems.append(str(err))
            continue
        file_problems = [f"{file.name}, field {p}" for p in _problems(data)]
        key = None if file_problems else Path(data["info"]["video_path"]).stem
        if key in first_file:
            file_problems.append(f"{file.name}: video {key!r} is annotated in {first_file[key]} too")
        problems += file_problems
        if not file_problems:
            first_file[key] = file.name
            entries.append((key, data))
    if problems:
        raise DataErrors(path, problems)
    finder, videos, quarantined = VideoFinder(videos_dir), [], []
    for key, data in entries:
        video, reasons = _captioned_video(key, data, float(window_s), finder)
        videos.append(video)
        quarantined += reasons
    return videos, quarantined


def _captioned_video(
    key: str, data: dict[str, Any], window_s: float, finder: VideoFinder
) -> tuple[CaptionedVideo, list[str]]:
    info = data["info"]
    fps = float(info["fps"])
    duration = round(info["num_frame"] / fps, 3)
    captions, quarantined = [], []
    for i, point in enumerate(data["breakpoint"]):
        t = round(point["time"] / fps, 3)
        question, answer = point["question"].strip(), point["answer"]
        if t < 0:
            caption = f"negative time {point['time']} (frame index)"
        elif not question:
            caption = "empty question"
        else:
            start, sentence, ref = round(max(0.0, t - window_s), 3), clean_sentence(answer), {"breakpoint": i}
            caption = checked_caption(key, i, start, t, sentence, duration, question=question, ref=ref)
        if isinstance(caption, str):
            quarantined.append(f"{key}[{i}]: breakpoint at frame {point['time']} ({t} s): {caption}")
        else:
            captions.append(caption)
    video_path = info["video_path"]
    candidates = [video_path] if not Path(video_path).is_absolute() else []
    video_file = finder.find(key, *candidates, Path(video_path).name)
    return CaptionedVideo(key, duration, captions, video_file), quarantined


def _problems(data: dict[str, Any]) -> list[str]:
    """Missing or mistyped fields, each as ``'<field>': <what is wrong>``."""
    info = data.get("info")
    if not isinstance(info, dict):
        return ["'info': expected an object with video_path, fps and num_frame"]
    problems = []
    if not is_string(info.get("video_path")) or not info["video_path"].strip():
        problems.append("'info.video_path': expected a non-empty string")
    if not is_number(info.get("fps")) or info["fps"] <= 0:
        problems.append("'info.fps': expected a positive number")
    if not is_number(info.get("num_frame")) or info["num_frame"] <= 0:
        problems.append("'info.num_frame': expected a positive number of frames")
    points = data.get("breakpoint")
    if not isinstance(points, list):
        return [*problems, "'breakpoint': expected a list of {time, question, answer}"]
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            problems.append(f"'breakpoint[{i}]': expected an object")
            continue
        if not is_number(point.get("time")):
            problems.append(f"'breakpoint[{i}].time': expected a frame index")
        for name in ("question", "answer"):
            if not is_string(point.get(name)):
                problems.append(f"'breakpoint[{i}].{name}': expected a string")
    return problems
