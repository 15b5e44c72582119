"""The QVHighlights moment-retrieval annotations, ``highlight_{train,val,test}_release.jsonl``.

One JSON object a line, one natural-language query each, times in seconds::

    {"qid": 2579, "query": "A girl and her mother cooked while talking with each other on facetime.",
     "duration": 150, "vid": "NUsG9BgSes0_210.0_360.0", "relevant_windows": [[0, 150]],
     "relevant_clip_ids": [0, 1, ...], "saliency_scores": [[4, 3, 3], ...]}

``vid`` names a 150 s clip of a YouTube video (``<youtube id>_<start>_<end>``); the test split leaves out
``relevant_windows``, ``relevant_clip_ids`` and ``saliency_scores``. Lines are grouped by ``vid``, and
each relevant window becomes a caption whose sentence is the query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.checks import is_list_of, is_number, is_string
from core.errors import DataErrors
from core.files import read_jsonl
from data_builders.sources.captions import Caption, CaptionedVideo, checked_caption, clean_sentence
from data_builders.sources.videos import VideoFinder


def load_qvhighlights(
    path: str | Path, videos_dir: str | Path | None = None
) -> tuple[list[CaptionedVideo], list[str]]:
    """Read a QVHighlights JSONL file into captioned videos (keyed by ``vid``).

    A file where no line has ``relevant_windows`` is read as the unlabelled test split: each query then
    describes its whole clip, so it becomes one caption over ``(0, duration)``. In a labelled file a
    line without ``relevant_windows`` is an error. A bad window (negative, reversed, beyond the
    duration) or an empty query is quarantined with its reason; the video's other captions are kept.

    Args:
        path: the JSONL file.
        videos_dir: where the clips lie (``<vid>.mp4``, or any video file named ``<vid>.*`` below it).

    Returns:
        ``(videos, quarantined)``; each reason names the vid, the row and the window.

    Raises:
        DataError / DataErrors: a missing file, malformed lines, missing or mistyped fields, a repeated
            ``qid``, or lines of one ``vid`` that disagree on its duration (all listed).
    """
    problems: list[str] = []
    rows = read_jsonl(Path(path), problems)
    labelled = any("relevant_windows" in row for _, row in rows)
    for number, row in rows:
        problems += _row_problems(number, row, labelled)
    if problems:
        raise DataErrors(path, problems)
    problems = _consistency_problems(rows)
    if problems:
        raise DataErrors(path, problems)
    by_vid: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for number, row in rows:
        by_vid.setdefault(row["vid"], []).append((number, row))
    finder, videos, quarantined = VideoFinder(videos_dir), [], []
    for vid, lines in by_vid.items():
        captions = _captions(vid, lines, quarantined)
        duration = float(lines[0][1]["duration"])
        videos.append(CaptionedVideo(vid, duration, captions, finder.find(vid)))
    return videos, quarantined


def _captions(vid: str, lines: list[tuple[int, dict[str, Any]]], quarantined: list[str]) -> list[Caption]:
    """One caption per relevant window (the whole clip on the test split), numbered across the vid's lines.

    Quarantined windows keep their number, so a caption's index (and the item ids built from it) does
    not shift when another window is fixed. A caption's ``ref`` is its query's ``qid`` and the window's
    position in ``relevant_windows``: ``{"qid": 2579, "window": 0}``.
    """
    captions, index = [], 0
    for number, row in lines:
        duration = float(row["duration"])
        windows = row.get("relevant_windows", [[0, duration]])
        if not windows:
            quarantined.append(f"{vid} (row {number}, qid {row['qid']}): no relevant window")
        for window, (start, end) in enumerate(windows):
            ref = {"qid": row["qid"], "window": window}
            sentence = clean_sentence(row["query"])
            caption = checked_caption(vid, index, float(start), float(end), sentence, duration, ref=ref)
            if isinstance(caption, str):
                quarantined.append(f"{vid} (row {number}, qid {row['qid']})[{index}]: {caption}")
            else:
                captions.append(caption)
            index += 1
    return captions


def _row_problems(number: int, row: dict[str, Any], labelled: bool) -> list[str]:
    where = f"row {number}, field"
    problems = []
    if not isinstance(row.get("qid"), int) or isinstance(row.get("qid"), bool):
        problems.append(f"{where} 'qid': expected an integer")
    if not is_string(row.get("query")):
        problems.append(f"{where} 'query': expected a string")
    if not is_number(row.get("duration")) or row["duration"] <= 0:
        problems.append(f"{where} 'duration': expected a positive number of seconds")
    if not is_string(row.get("vid")) or not row["vid"].strip():
        problems.append(f"{where} 'vid': expected a non-empty string")
    if labelled:
        windows = row.get("relevant_windows")
        if windows is None:
            problems.append(f"{where} 'relevant_windows': missing (other lines of the file have it)")
        elif not is_list_of(windows, lambda w: is_list_of(w, is_number, 2)):
            problems.append(f"{where} 'relevant_windows': expected [[start, end], ...] seconds")
    return problems


def _consistency_problems(rows: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """A repeated qid, or a vid given two durations."""
    problems = []
    first_qid: dict[int, int] = {}
    first_vid: dict[str, tuple[int, float]] = {}
    for number, row in rows:
        qid, vid, duration = row["qid"], row["vid"], float(row["duration"])
        if qid in first_qid:
            problems.append(f"row {number}, field 'qid': duplicate qid {qid} (first on row {first_qid[qid]})")
        first_qid.setdefault(qid, number)
        seen = first_vid.setdefault(vid, (number, duration))
        if seen[1] != duration:
            problems.append(
                f"row {number}, field 'duration': {duration} for vid {vid!r}, but {seen[1]} on row {seen[0]}"
            )
    return problems
