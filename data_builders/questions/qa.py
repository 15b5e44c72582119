"""What a question is, and the caption helpers every backend builds one with.

:class:`QA` is a question with its answer and its evidence; :class:`QuestionGenerator` is what a backend
(:mod:`~data_builders.questions.templates`, :mod:`~data_builders.questions.model`) offers the builders.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from data_builders.sources.captions import Caption, CaptionedVideo

# Closed vocabularies for spotting objects in captions ("a red circle", "the blue car").
COLOUR_WORDS = tuple("red orange yellow green blue purple pink brown black white grey".split())
SHAPE_WORDS = tuple("circle square triangle rectangle star diamond hexagon ball box car".split())
OBJECT_MENTION = re.compile(
    rf"\b(?:a|an|the) ((?:{'|'.join(COLOUR_WORDS)}) (?:{'|'.join(SHAPE_WORDS)}))\b", re.I
)


@dataclass(frozen=True)
class QA:
    """A question, its answer, and the evidence the answer rests on.

    Attributes:
        captions: indices of the captions the answer (and the question) is built from.
        names: objects the answer mentions (closed vocabulary).
        end: when all its evidence has been seen (the question is asked then).
        kind: ``source`` (the caption's own question), ``generated`` (by a model), or a template kind
            (:data:`TEMPLATE_KINDS`: ``window``, ``person``, ``when``, ``after``, ``before``, ``order``,
            ``object``).
        segment: the segment in seconds the answer is grounded in.
        provenance: who made it: ``template``, ``source`` or the model backend's identity.
        name: the object asked about (``object`` questions).
        window: the time window asked about, as written (``window`` questions).
        anchor: the caption whose segment's scene this question is one option for (the row id's index).
    """

    question: str
    answer: str
    captions: frozenset[int]
    names: frozenset[str]
    end: float
    kind: str = "window"
    segment: tuple[float, float] = (0.0, 0.0)
    provenance: str = "template"
    name: str | None = None
    window: tuple[str, str] = ("", "")
    anchor: int = 0


@dataclass(frozen=True)
class QuestionContext:
    """What a backend may use beyond the captions: the video file, for frames."""

    video_path: Path | None = None


class QuestionError(Exception):
    """No question for a segment (the reason is quarantined); the build goes on."""


class QuestionGenerator(Protocol):
    """Questions for one caption segment; ``summary`` is recorded in ``build_info.json``."""

    identity: str

    def generate(self, video: CaptionedVideo, caption: Caption, context: QuestionContext) -> list[QA]:
        """The questions anchored at ``caption`` (often none: a segment is asked about once).

        Raises:
            QuestionError: this segment got no question.
        """
        ...

    def summary(self) -> dict[str, Any]: ...

    def prefetch(self, jobs: Iterable[tuple[CaptionedVideo, QuestionContext]]) -> None:
        """Optionally prepare the questions of these videos ahead of ``generate`` (e.g. concurrently)."""
        ...


def as_sentence(text: str) -> str:
    """A caption as a sentence: capitalised, with a final period."""
    return text[0].upper() + text[1:] + "."


def secs(value: float) -> str:
    """Seconds as written in questions (one decimal)."""
    return f"{value:.1f}"


@functools.lru_cache(maxsize=1 << 16)  # every template QA asks it, often of the same sentence
def mentions(sentence: str) -> frozenset[str]:
    """The colour-shape objects a sentence names ("a red circle" -> "red circle")."""
    return frozenset(m.group(1).lower() for m in OBJECT_MENTION.finditer(sentence))


def segment_captions(video: CaptionedVideo, caption: Caption) -> list[Caption] | None:
    """The captions sharing ``caption``'s segment (to one decimal), when it is the first of them.

    Captions with their own question are left out (they are asked on their own); ``None`` when
    ``caption`` is not the first of its segment, so each segment is asked about once.
    """
    if caption.question is not None:
        return None
    window = (secs(caption.start), secs(caption.end))
    same = [c for c in video.captions if c.question is None and (secs(c.start), secs(c.end)) == window]
    return same if same[0] == caption else None


def plain_captions(video: CaptionedVideo) -> list[Caption]:
    """The captions without their own question (those the templates describe)."""
    return [c for c in video.captions if c.question is None]


def source_qa(caption: Caption) -> QA:
    """A source's QA pair: the caption's own question, answered by its sentence."""
    answer = as_sentence(caption.sentence)
    return QA(
        caption.question,
        answer,
        frozenset([caption.index]),
        mentions(answer),
        caption.end,
        kind="source",
        segment=(caption.start, caption.end),
        provenance="source",
        anchor=caption.index,
    )
