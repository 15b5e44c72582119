"""The YouCook2 annotations, ``youcookii_annotations_trainval.json``; times in seconds::

    {"database": {"<youtube id>": {"duration": 241.62, "subset": "training", "recipe_type": "113",
        "video_url": "https://www.youtube.com/watch?v=...",
        "annotations": [{"id": 0, "segment": [90, 102], "sentence": "spread margarine on two slices"}]}}}

The raw videos are laid out as ``<subset>/<recipe_type>/<youtube id>.<ext>`` (mp4, mkv or webm); a flat
``<youtube id>.mp4`` directory works too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.checks import is_list_of, is_number, is_string
from core.errors import ConfigError, DataError, DataErrors
from core.files import read_json_object
from data_builders.sources.captions import (
    CaptionedVideo,
    checked_caption,
    clean_sentence,
    video_entry_problems,
)
from data_builders.sources.videos import VideoFinder


def load_youcook2(
    path: str | Path, videos_dir: str | Path | None = None, *, subset: str | Sequence[str] | None = None
) -> tuple[list[CaptionedVideo], list[str]]:
    """Read YouCook2 annotations into captioned videos (keyed by YouTube id; caption index = annotation id,
    and ``ref`` ``{"id": <annotation id>}``).

    Every entry is checked, also those the subset filter leaves out, so one run reports all of a
    file's problems. A bad segment (negative, reversed, beyond the duration) or an empty sentence is
    quarantined with its reason; the video's other captions are kept.

    Args:
        path: the annotation JSON.
        videos_dir: where the videos lie (see the module docstring).
        subset: keep only videos of this subset or these subsets (``"training"``, ``"validation"``);
            None keeps all.

    Returns:
        ``(videos, quarantined)``; each reason names the video and the annotation id.

    Raises:
        ConfigError: ``subset`` is not a string or a list of strings.
        DataError / DataErrors: unreadable JSON, no ``database`` object, or entries of the wrong
            structure (all listed).
    """
    wanted = _subsets(subset)
    database = read_json_object(path, "YouCook2 annotations").get("database")
    if not isinstance(database, dict):
        raise DataError(str(path), "expected an object of videos", field="database")
    problems = [
        p for vid, entry in database.items() for p in video_entry_problems(vid, entry, _recipe_problems)
    ]
    if problems:
        raise DataErrors(path, problems)
    finder, videos, quarantined = VideoFinder(videos_dir), [], []
    for vid, entry in database.items():
        if wanted is not None and entry["subset"] not in wanted:
            continue
        duration, captions = float(entry["duration"]), []
        for note in entry["annotations"]:
            (start, end), sentence = map(float, note["segment"]), note["sentence"]
            ref = {"id": note["id"]}
            sentence = clean_sentence(sentence)
            caption = checked_caption(vid, note["id"], start, end, sentence, duration, ref=ref)
            if isinstance(caption, str):
                quarantined.append(f"{vid}[{note['id']}]: {caption}")
            else:
                captions.append(caption)
        layout = f"{entry['subset']}/{entry['recipe_type']}/{vid}.mp4"
        videos.append(CaptionedVideo(vid, duration, captions, finder.find(vid, layout)))
    return videos, quarantined


def _subsets(subset: str | Sequence[str] | None) -> set[str] | None:
    if subset is None:
        return None
    if isinstance(subset, str):
        return {subset}
    if isinstance(subset, Sequence) and all(isinstance(s, str) for s in subset):
        return set(subset)
    raise ConfigError(f"subset must be a subset name or a list of them, got {subset!r}")


def _recipe_problems(where: str, entry: dict[str, Any]) -> list[str]:
    """Problems of an entry's subset, recipe type and annotations (see :func:`video_entry_problems`)."""
    problems = []
    if not is_string(entry.get("subset")):
        problems.append(f"{where} 'subset': expected a string")
    if not isinstance(entry.get("recipe_type"), str | int) or isinstance(entry.get("recipe_type"), bool):
        problems.append(f"{where} 'recipe_type': expected a string")
    notes = entry.get("annotations")
    if not isinstance(notes, list):
        return [*problems, f"{where} 'annotations': expected a list"]
    seen: set[Any] = set()
    for i, note in enumerate(notes):
        problems += _annotation_problems(f"{where} 'annotations[{i}]", note, seen)
    return problems


def _annotation_problems(where: str, note: Any, seen: set[Any]) -> list[str]:
    """Problems of one annotation; ``where`` is the open field name ``video ..., field 'annotations[i]``."""
    if not isinstance(note, dict):
        return [f"{where}': expected an object"]
    problems = []
    note_id = note.get("id")
    if not isinstance(note_id, int) or isinstance(note_id, bool):
        problems.append(f"{where}.id': expected an integer")
    elif note_id in seen:
        problems.append(f"{where}.id': duplicate id {note_id}")
    else:
        seen.add(note_id)
    if not is_list_of(note.get("segment"), is_number, 2):
        problems.append(f"{where}.segment': expected [start, end] seconds, got {note.get('segment')!r}")
    if not is_string(note.get("sentence")):
        problems.append(f"{where}.sentence': expected a string")
    return problems
