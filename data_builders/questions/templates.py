"""Template questions: no model, each answered by what the captions say.

The kinds (:data:`TEMPLATE_KINDS`) and how a build chooses among them are described in
:mod:`data_builders.questions`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from typing import Any

from data_builders.questions.qa import (
    OBJECT_MENTION,
    QA,
    QuestionContext,
    as_sentence,
    mentions,
    plain_captions,
    secs,
    segment_captions,
    source_qa,
)
from data_builders.sources.captions import Caption, CaptionedVideo

# Said wherever template questions are recorded (build_info.json, stats.md, composition.md): the paper's
# questions are VLM-generated (OVIBench Fig. 3a).
NOT_THE_PAPERS = "templates, NOT the paper's VLM-generated ones (OVIBench Fig. 3a)"

# A subject the person template asks about: "a young man", "the women", "he" (not "a man's hand").
_PERSON = re.compile(
    r"^(?:(?:a|an|the) (?:\w+ )?(?P<one>man|woman|boy|girl|person|lady|guy|child|kid|player|chef)"
    r"|(?:the |two |several |a group of )?(?:\w+ )?"
    r"(?P<many>men|women|boys|girls|people|children|kids|players)"
    r"|(?P<pronoun>he|she|they))\b(?!')",
    re.I,
)
# The next event may start this share of a segment before the segment's end (annotations overlap).
NEXT_OVERLAP = 0.25
NEXT_GAP_S = 10.0  # and start at most this long after it (QVHighlights leaves long stretches unannotated)
TEMPLATE_KINDS = ("window", "person", "when", "after", "before", "order", "object")


class TemplateQuestions:
    """Questions from templates, no model (see the module docstring)."""

    identity = "template"

    def generate(self, video: CaptionedVideo, caption: Caption, context: QuestionContext) -> list[QA]:
        """Questions anchored at ``caption``.

        Its own question if it has one, else, if it is its segment's first caption, the segment's
        questions of every template kind that fits; and a question per object it is the first caption
        of the video to name (an option of the scene of that object's longest caption).
        """
        if caption.question is not None:
            qas = [source_qa(caption)]
        else:
            window = segment_captions(video, caption)
            qas = _segment_qas(video, window) if window else []
        position = video.captions.index(caption)
        seen = frozenset().union(*(mentions(c.sentence) for c in video.captions[:position]))
        # In the order the caption names them: a set's order would change with Python's hash seed.
        for name in dict.fromkeys(m.group(1).lower() for m in OBJECT_MENTION.finditer(caption.sentence)):
            if name not in seen:
                cap = _longest(video, name)
                qas.append(_object_qa(name, cap, _anchor(video, cap)))
        return qas

    def summary(self) -> dict[str, Any]:
        return {"backend": self.identity, "not_the_papers": NOT_THE_PAPERS}

    def prefetch(self, jobs: Iterable[tuple[CaptionedVideo, QuestionContext]]) -> None:
        pass  # templates cost nothing to make on demand


def _segment_qas(video: CaptionedVideo, window: list[Caption]) -> list[QA]:
    """The template questions of one segment (its captions ``window``), one per kind that fits."""
    first, anchor = window[0], min(c.index for c in window)
    qas = [_window_qa(window, anchor)]
    if len(window) == 1:
        qas += [qa for qa in (_person_qa(first), _when_qa(video, first)) if qa]
        following = _next_event(video, first)
        # Only about events that happen once: "what happens next" after a recurring one is ambiguous.
        if following and _once(video, first) and _once(video, following):
            qas += [_after_qa(first, following), _order_qa(first, following)]
            if _previous_event(video, following) == first:
                qas.append(_before_qa(first, following))
    return qas


def _window_qa(window: list[Caption], anchor: int) -> QA:
    """ "What happens between ...?", answered by all the segment's captions joined."""
    first = window[0]
    start, end = secs(first.start), secs(first.end)
    return QA(
        f"What happens in the video between {start} s and {end} s?",
        as_sentence(" and ".join(c.sentence for c in window)),
        frozenset(c.index for c in window),
        frozenset().union(*(mentions(c.sentence) for c in window)),
        first.end,
        segment=(first.start, first.end),
        window=(start, end),
        anchor=anchor,
    )


def _qa(kind: str, question: str, answer: str, evidence: list[Caption], anchor: Caption) -> QA:
    """A template QA resting on ``evidence``: asked when the last of it ends, anchored at ``anchor``."""
    start, end = min(c.start for c in evidence), max(c.end for c in evidence)
    return QA(
        question,
        answer,
        frozenset(c.index for c in evidence),
        mentions(answer),
        end,
        kind=kind,
        segment=(start, end),
        anchor=anchor.index,
    )


def _person_qa(cap: Caption) -> QA | None:
    """ "What does the man do between ...?" when the caption's subject is a person."""
    match = _PERSON.match(cap.sentence)
    if match is None:
        return None
    if match["pronoun"]:
        subject, verb = match["pronoun"].lower(), "do" if match["pronoun"].lower() == "they" else "does"
    else:
        noun = match["one"] or match["many"]
        subject, verb = f"the {noun.lower()}", "does" if match["one"] else "do"
    question = f"What {verb} {subject} do between {secs(cap.start)} s and {secs(cap.end)} s?"
    return _qa("person", question, as_sentence(cap.sentence), [cap], cap)


def _when_qa(video: CaptionedVideo, cap: Caption) -> QA | None:
    """ "When does this happen: ...?", answered by every segment with that sentence (QVHighlights gives
    a query several windows), at its first one; never about a segment that is the whole video."""
    same = sorted((c for c in plain_captions(video) if c.sentence == cap.sentence), key=_time_order)
    if same[0] != cap or any(c.start <= 0.05 and c.end >= video.duration - 0.05 for c in same):
        return None
    spans = " and ".join(f"from {secs(c.start)} s to {secs(c.end)} s" for c in same)
    question = f"When in the video does this happen: {cap.sentence}?"
    return _qa("when", question, as_sentence(spans), same, cap)


def _after_qa(first: Caption, following: Caption) -> QA:
    question = f"In the video, {first.sentence}. What happens next?"
    return _qa("after", question, as_sentence(following.sentence), [first, following], first)


def _before_qa(first: Caption, following: Caption) -> QA:
    question = f"In the video, {following.sentence}. What happens just before that?"
    return _qa("before", question, as_sentence(first.sentence), [first, following], first)


def _order_qa(first: Caption, following: Caption) -> QA:
    """ "Which happens first: X, or Y?", the two named in an order fixed by a checksum of the pair (so
    the earlier one is named first about half the time, the same in every run)."""
    flip = zlib.crc32(f"{first.key}/{first.index}/{following.index}".encode()) % 2
    named = (following, first) if flip else (first, following)
    question = f"Which happens first in the video: {named[0].sentence}, or {named[1].sentence}?"
    answer = f"First, {first.sentence}; after that, {following.sentence}."
    return _qa("order", question, answer, [first, following], first)


def _once(video: CaptionedVideo, cap: Caption) -> bool:
    """Whether no other caption of the video says what ``cap`` says."""
    return sum(c.sentence == cap.sentence for c in plain_captions(video)) == 1


def _time_order(cap: Caption) -> tuple[float, float, int]:
    return cap.start, cap.end, cap.index


def _follows(cap: Caption, later: Caption) -> bool:
    """Whether ``later`` is an event after ``cap``: starting in ``cap``'s last quarter (annotations
    overlap) or at most :data:`NEXT_GAP_S` after it, and ending after it."""
    earliest = cap.end - NEXT_OVERLAP * (cap.end - cap.start)
    starts_after = later.start > cap.start and earliest <= later.start <= cap.end + NEXT_GAP_S
    return starts_after and later.end > cap.end


def _next_event(video: CaptionedVideo, cap: Caption) -> Caption | None:
    """The event that starts first after ``cap``; None when there is none, when two start together (no
    single next event), or when it says the same (a query's next window)."""
    later = sorted((c for c in plain_captions(video) if _follows(cap, c)), key=_time_order)
    if not later or (len(later) > 1 and secs(later[1].start) == secs(later[0].start)):
        return None
    return later[0] if later[0].sentence != cap.sentence else None


def _previous_event(video: CaptionedVideo, cap: Caption) -> Caption | None:
    """The event that ends last before ``cap``; None as for :func:`_next_event`."""
    earlier = sorted((c for c in plain_captions(video) if _follows(c, cap)), key=lambda c: (c.end, c.start))
    if not earlier or (len(earlier) > 1 and secs(earlier[-1].end) == secs(earlier[-2].end)):
        return None
    return earlier[-1] if earlier[-1].sentence != cap.sentence else None


def _anchor(video: CaptionedVideo, cap: Caption) -> int:
    """The scene ``cap`` belongs to: its own if it has a question, else its segment's first caption."""
    if cap.question is not None:
        return cap.index
    window = (secs(cap.start), secs(cap.end))
    return min(c.index for c in plain_captions(video) if (secs(c.start), secs(c.end)) == window)


def _longest(video: CaptionedVideo, name: str) -> Caption:
    """The longest caption naming ``name`` (the first of equals)."""
    best = None
    for cap in video.captions:
        if name in mentions(cap.sentence) and (best is None or cap.end - cap.start > best.end - best.start):
            best = cap
    return best


def _object_qa(name: str, cap: Caption, anchor: int) -> QA:
    """ "Describe what the X does.", answered by the caption with the object as "the X"."""
    answer = as_sentence(OBJECT_MENTION.sub(lambda m: "the " + m.group(1).lower(), cap.sentence, count=1))
    return QA(
        f"Describe what the {name} does.",
        answer,
        frozenset([cap.index]),
        mentions(answer),
        cap.end,
        kind="object",
        segment=(cap.start, cap.end),
        name=name,
        anchor=anchor,
    )
