"""The caption model every source reader returns: timed caption segments per video.

Segment checks and sentence clean-up live here too, so every source quarantines and normalises its
captions by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.checks import is_number

# Annotation times carry float noise (a last segment ending at 70.29 in a video of 70.28999999999999 s);
# a segment edge this close outside the video is noise, not an error (as the OVIBench row check allows).
TIME_TOLERANCE_S = 1e-3
# Significant digits that hold an annotation time; float noise lies beyond them (see without_float_noise).
NOISE_FREE_DIGITS = 12


@dataclass(frozen=True)
class Caption:
    """One caption segment of one video, in seconds.

    ``question`` is set when the source pairs the sentence with its own question (MovieChat's
    breakpoint QA: the sentence is then the answer); otherwise questions are made from templates.
    ``ref`` is the source's own id of the annotation, under the source's field names (``{"qid": 2579,
    "window": 0}`` for QVHighlights, ``{"id": 3}`` for YouCook2, ``{"caption": 2}`` for ActivityNet,
    ``{"breakpoint": 4}`` for MovieChat, ``{"event": 1}`` for UCF-Crime): rows carry it as provenance.
    """

    key: str
    index: int
    start: float
    end: float
    sentence: str
    question: str | None = None
    ref: dict[str, Any] = field(default_factory=dict, compare=False)
    # its end lay past the video's stated duration by no more than the annotation's own precision (61.14
    # for a duration of 61.13, both given to 0.01 s) and was moved onto the video's end; counted in stats
    moved_to_end: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class CaptionedVideo:
    """A video's duration and its valid caption segments.

    ``key`` is the source's own id for the video (the provenance ``source_id`` of every item built
    from it); ``video_file`` is where the video lies, relative to the videos directory, when a
    reader found it somewhere other than ``<key>.mp4``.
    """

    key: str
    duration: float
    captions: list[Caption]
    video_file: str | None = None

    @property
    def file(self) -> str:
        """The video's path relative to the videos directory (``<key>.mp4`` unless the reader found it)."""
        return self.video_file or f"{self.key}.mp4"


def without_float_noise(value: float) -> str:
    """The shortest form of ``value`` once its float noise is rounded away: ``"70.29"`` for
    ``70.28999999999999`` and ``"119.99"`` for ``119.99000000000001``, ``"61.13"`` for ``61.13``."""
    # Noise is a few units in the 16th-17th significant digit; 12 digits keep every time an annotation
    # file writes (milliseconds up to 10^8 s) and drop the noise its arithmetic left.
    return repr(float(f"{float(value):.{NOISE_FREE_DIGITS}g}"))


def annotation_step(*values: float) -> float:
    """The finest decimal step the values are written to: 0.01 for ``61.14`` and ``61.13``, and for
    ``70.28999999999999`` too (a value written with float noise has the precision of its noise-free form)."""
    forms = [without_float_noise(v) for v in values]
    decimals = [len(form.partition(".")[2]) if "e" not in form else 16 for form in forms]
    return 10.0 ** -max(decimals)


def end_tolerance(end: float, duration: float) -> float:
    """How far past the duration a segment end may lie and still be the video's end: the annotation's own
    rounding (one step of the precision the file gives both to), and never less than float noise."""
    return max(TIME_TOLERANCE_S, annotation_step(end, duration) + TIME_TOLERANCE_S)


def segment_problem(start: float, end: float, sentence: str, duration: float) -> str | None:
    """Why a segment cannot be used (negative, empty or reversed, beyond the video, no text), or None.

    An edge less than :data:`TIME_TOLERANCE_S` outside the video is float noise, and an end past the
    duration within the annotation's own precision is its rounding (:func:`end_tolerance`): both pass
    (:func:`within_video` then moves them onto the video's edge).
    """
    if start < -TIME_TOLERANCE_S:
        return f"negative start {start}"
    if end <= start:
        return f"empty or reversed segment [{start}, {end}]"
    if end > duration + end_tolerance(end, duration):
        return f"segment end {end} beyond the duration {duration}"
    if start >= duration:
        return f"segment start {start} at or past the duration {duration}"
    if not sentence.strip():
        return "empty sentence"
    return None


def within_video(start: float, end: float, duration: float) -> tuple[float, float]:
    """A usable segment (see :func:`segment_problem`) with its float noise at the video's edges removed."""
    return max(start, 0.0), min(end, duration)


def checked_caption(
    key: str, index: int, start: float, end: float, sentence: str, duration: float, **fields: Any
) -> Caption | str:
    """The caption of a segment (its edges moved onto the video, ``fields`` its question and ref), or why
    it cannot be used (:func:`segment_problem`): every source reader checks its segments through here."""
    reason = segment_problem(start, end, sentence, duration)
    if reason:
        return reason
    moved = end > duration + TIME_TOLERANCE_S
    start, end = within_video(start, end, duration)
    return Caption(key, index, start, end, sentence, moved_to_end=moved, **fields)


def clean_sentence(sentence: str) -> str:
    """Strip, drop the final period, and lower-case a capitalised first word ("A man" -> "a man").

    Captions are joined into answers ("A man ... and a dog ..."); acronyms and "I" stay.
    """
    text = sentence.strip().rstrip(".").strip()
    word = text.split(" ", 1)[0]
    if word != "I" and word[:1].isupper() and (len(word) == 1 or word[1:].islower()):
        return text[0].lower() + text[1:]
    return text


def video_entry_problems(
    key: str, entry: Any, fields: Callable[[str, dict[str, Any]], list[str]]
) -> list[str]:
    """What is wrong with one video's entry of an annotation file keyed by video id.

    The checks every such source shares (an object, with a positive ``duration`` in seconds), then the
    source's own: ``fields(where, entry)``, ``where`` being ``"video '<key>', field"`` for its messages.
    """
    if not isinstance(entry, dict):
        return [f"video {key!r}: expected an object"]
    where = f"video {key!r}, field"
    problems = []
    if not is_number(entry.get("duration")) or entry["duration"] <= 0:
        problems.append(f"{where} 'duration': expected a positive number of seconds")
    return problems + fields(where, entry)
