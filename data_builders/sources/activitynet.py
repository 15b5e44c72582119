"""The ActivityNet Captions annotation format (the synthetic world writes its captions in it too)::

{"v_<id>": {"duration": seconds, "timestamps": [[start, end], ...], "sentences": ["...", ...]}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.checks import is_list_of, is_number, is_string
from core.errors import DataErrors
from core.files import read_json_object
from data_builders.sources.captions import (
    CaptionedVideo,
    checked_caption,
    clean_sentence,
    video_entry_problems,
)


def load_activitynet_captions(path: str | Path) -> tuple[list[CaptionedVideo], list[str]]:
    """Read an ActivityNet Captions JSON file.

    A malformed file or entry raises; a bad segment (negative, reversed, empty, beyond the duration,
    empty sentence) is quarantined with its reason, and the rest of the video is kept. A caption's
    ``ref`` is ``{"caption": i}``, its position in ``timestamps`` and ``sentences``.

    Returns:
        ``(videos, quarantined)``; each quarantine reason names the video key and segment index.

    Raises:
        DataError / DataErrors: unreadable JSON, or entries of the wrong structure (all listed).
    """
    data = read_json_object(path, "captions")
    problems = [p for key, entry in data.items() for p in video_entry_problems(key, entry, _caption_problems)]
    if problems:
        raise DataErrors(path, problems)
    videos, quarantined = [], []
    for key, entry in data.items():
        video, reasons = _captioned_video(key, entry)
        videos.append(video)
        quarantined += reasons
    return videos, quarantined


def _captioned_video(key: str, entry: dict[str, Any]) -> tuple[CaptionedVideo, list[str]]:
    """A (valid) entry's usable captions, and the reasons for the segments left out."""
    duration = float(entry["duration"])
    captions, quarantined = [], []
    for i, ((start, end), sentence) in enumerate(zip(entry["timestamps"], entry["sentences"], strict=True)):
        ref = {"caption": i}
        caption = checked_caption(
            key, i, float(start), float(end), clean_sentence(sentence), duration, ref=ref
        )
        if isinstance(caption, str):
            quarantined.append(f"{key}[{i}]: {caption}")
        else:
            captions.append(caption)
    return CaptionedVideo(key, duration, captions), quarantined


def _caption_problems(where: str, entry: dict[str, Any]) -> list[str]:
    """Problems of an entry's ``timestamps`` and ``sentences`` (see :func:`video_entry_problems`)."""
    stamps, sentences = entry.get("timestamps"), entry.get("sentences")
    if not isinstance(stamps, list) or not isinstance(sentences, list):
        return [f"{where} 'timestamps'/'sentences': expected two lists"]
    problems = []
    if len(stamps) != len(sentences):
        problems.append(f"{where} 'sentences': {len(sentences)} sentences for {len(stamps)} timestamps")
    for i, stamp in enumerate(stamps):
        if not is_list_of(stamp, is_number, 2):
            problems.append(f"{where} 'timestamps[{i}]': expected [start, end] seconds, got {stamp!r}")
    for i, sentence in enumerate(sentences):
        if not is_string(sentence):
            problems.append(f"{where} 'sentences[{i}]': expected a string")
    return problems
