"""The caption model every source reader returns: timed caption segments per video.

Segment checks and sentence clean-up live here too, so every source quarantines and normalises its
captions by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caption:
    """One caption segment of one video, in seconds.

    ``question`` is set when the source pairs the sentence with its own question (MovieChat's
    breakpoint QA: the sentence is then the answer); otherwise questions are made from templates.
    """

    key: str
    index: int
    start: float
    end: float
    sentence: str
    question: str | None = None


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


def segment_problem(start: float, end: float, sentence: str, duration: float) -> str | None:
    """Why a segment cannot be used (negative, empty or reversed, beyond the video, no text), or None."""
    if start < 0:
        return f"negative start {start}"
    if end <= start:
        return f"empty or reversed segment [{start}, {end}]"
    if end > duration:
        return f"segment end {end} beyond the duration {duration}"
    if not sentence.strip():
        return "empty sentence"
    return None


def clean_sentence(sentence: str) -> str:
    """Strip, drop the final period, and lower-case a capitalised first word ("A man" -> "a man").

    Captions are joined into answers ("A man ... and a dog ..."); acronyms and "I" stay.
    """
    text = sentence.strip().rstrip(".").strip()
    word = text.split(" ", 1)[0]
    if word != "I" and word[:1].isupper() and (len(word) == 1 or word[1:].islower()):
        return text[0].lower() + text[1:]
    return text
