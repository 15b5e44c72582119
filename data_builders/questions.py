"""Question generation for OVI-Train: one interface, three backends, a resumable cache.

:class:`QuestionGenerator` turns one caption segment of a video into the questions asked at its end,
each a :class:`QA` whose answer is grounded in the segment. Backends (``builder.questions.backend``):

* ``none`` (default) — template questions, no model, each answered by what the captions say. Per
  distinct segment, several kinds (:data:`TEMPLATE_KINDS`): ``window`` "What happens in the video between
  2.0 s and 8.0 s?"; ``person`` "What does the man do between 2.0 s and 8.0 s?" (a caption whose subject
  is a person); ``when`` "When in the video does this happen: a man plays the violin?" (answered by the
  segment's times); with the next event X -> Y (Y starts in X's last quarter, or at most 10 s after X),
  ``after`` "In the video, X. What happens next?", ``before`` "In the video, Y. What happens just before
  that?" and ``order`` "Which happens first in the video: Y, or X?"; and ``object`` "Describe what the X
  does." per object of a closed colour/shape vocabulary, described by its longest caption. A build
  asks one question per segment, of the kind asked least so far (:func:`choose_question`).
* ``endpoint`` — an OpenAI-compatible ``/chat/completions`` server (vLLM, SGLang, hosted APIs). The
  prompt gives the segment's times and captions and, unless ``frames`` is 0, that many frames of the
  segment as base64 JPEG ``image_url`` parts; the model replies ``{"question": ..., "answer": ...}``.
* ``local`` — a local Hugging Face model, text only: it sees the captions and times, not the frames.

Every backend asks a caption's own question (MovieChat's breakpoint QA) as the source wrote it.

Model replies are parsed (the first JSON object in the reply) and validated; an invalid reply is
asked again, up to ``attempts`` tries, each time saying what was wrong. Replies are cached in a JSONL
file (:class:`~core.files.JsonlStore`), one line per segment appended as soon as it is made,
keyed by the sha1 of (backend identity, :data:`PROMPT_VERSION`, video id, segment, caption text): a
rerun after a crash asks only for what is missing, and a last line a kill cut short is skipped and its
segment asked again. A segment whose replies stayed invalid is cached as failed (a rerun does not ask
again unless ``retry_failed``) and quarantined with the reason; a segment lost to an error (HTTP 5xx
after retries, no connection, undecodable frames) is quarantined but not cached, so a rerun tries it
again. Three such errors before any reply stop the build: the model is unreachable or misconfigured.

With ``endpoint.workers`` > 1, every segment a build needs is asked for first, that many
requests in flight at once (:meth:`ModelQuestions.prefetch`); the build then reads the cache in its
usual order, so the output does not depend on the number of workers or on which reply came first.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from core.errors import ConfigError, DecodeError
from core.files import JsonlStore
from core.text_models import (
    EndpointConfig,
    TextBackend,
    TextModel,
    TextModelConfig,
    TextModelError,
    make_text_model,
)
from data_builders.sources.captions import Caption, CaptionedVideo

# Part of every cache key: bump it when the prompt or the reply checks change.
PROMPT_VERSION = 1
MAX_ANSWER_WORDS = 80
# Closed vocabularies for spotting objects in captions ("a red circle", "the blue car").
COLOUR_WORDS = tuple("red orange yellow green blue purple pink brown black white grey".split())
SHAPE_WORDS = tuple("circle square triangle rectangle star diamond hexagon ball box car".split())
_MENTION = re.compile(rf"\b(?:a|an|the) ((?:{'|'.join(COLOUR_WORDS)}) (?:{'|'.join(SHAPE_WORDS)}))\b", re.I)
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
# How questions are ordered within a video (stable otherwise): the pipeline's random choices index
# into this list, so the order is part of what a seed produces.
_KIND_ORDER = {"source": 0, "generated": 1, "object": 2} | {kind: 1 for kind in TEMPLATE_KINDS[:-1]}


@dataclass
class QuestionConfig(TextModelConfig):
    """Question generation (``builder.questions.*``): the keys of a text model
    (:mod:`core.text_models`; ``backend: none`` asks template questions, no model) and these."""

    endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(timeout_s=120.0))
    cache: str | None = None  # JSONL cache; None: <out>/question_cache.jsonl (model backends only)
    frames: int = 4  # endpoint: frames of the segment sent as images; 0: captions only (text models)
    frame_max_pixels: int = 448 * 448  # pixel budget per frame sent
    attempts: int = 3  # tries per segment while the reply is not a valid JSON question/answer
    retry_failed: bool = False  # ask again for segments cached as failed


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


def video_questions(
    generator: QuestionGenerator, video: CaptionedVideo, context: QuestionContext, quarantined: list[str]
) -> list[QA]:
    """Every question of a video: the sources' own, then those of each segment, then object questions.

    A segment that got no question is quarantined as ``<video>[<caption index>]: <reason>``.
    """
    qas = []
    for caption in video.captions:
        try:
            qas += generator.generate(video, caption, context)
        except QuestionError as err:
            quarantined.append(f"{video.key}[{caption.index}]: question generation failed: {err}")
    return sorted(qas, key=lambda qa: _KIND_ORDER[qa.kind])


def choose_question(options: list[QA], asked: Counter, rng: Any) -> QA:
    """One question of a scene's ``options``: of the kind ``asked`` least so far (ties at random).

    Counting over the whole build keeps any kind that most scenes offer from taking most rows;
    ``asked`` is updated with the choice. ``rng`` is a ``numpy.random.Generator``.
    """
    fewest = min(asked[qa.kind] for qa in options)
    least = [qa for qa in options if asked[qa.kind] == fewest]
    chosen = least[int(rng.integers(len(least)))]
    asked[chosen.kind] += 1
    return chosen


# --- shared pieces ----------------------------------------------------------------------------


def as_sentence(text: str) -> str:
    """A caption as a sentence: capitalised, with a final period."""
    return text[0].upper() + text[1:] + "."


def secs(value: float) -> str:
    """Seconds as written in questions (one decimal)."""
    return f"{value:.1f}"


@functools.lru_cache(maxsize=1 << 16)  # every template QA asks it, often of the same sentence
def mentions(sentence: str) -> frozenset[str]:
    """The colour-shape objects a sentence names ("a red circle" -> "red circle")."""
    return frozenset(m.group(1).lower() for m in _MENTION.finditer(sentence))


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


# --- template ---------------------------------------------------------------------------------


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
        for name in dict.fromkeys(m.group(1).lower() for m in _MENTION.finditer(caption.sentence)):
            if name not in seen:
                cap = _longest(video, name)
                qas.append(_object_qa(name, cap, _anchor(video, cap)))
        return qas

    def summary(self) -> dict[str, Any]:
        return {"backend": self.identity}

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
    answer = as_sentence(_MENTION.sub(lambda m: "the " + m.group(1).lower(), cap.sentence, count=1))
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


# --- model backends ---------------------------------------------------------------------------

PROMPT = """You write questions for a video question-answering dataset.

A video segment from {start} s to {end} s is described by these human-written captions:
{captions}
{frames_line}
Write one question about this segment that a viewer can answer only by having watched it, and its \
answer in one or two full sentences. The question is asked right after the segment ends. The answer \
must rest only on what the segment shows (the captions{and_frames}): no guesses, nothing from \
outside the segment. The question must not give the answer away.

Reply with only a JSON object: {{"question": "...", "answer": "..."}}"""
RETRY_NOTE = "\n\nYour previous reply was not usable ({}). Reply with only the JSON object."


def build_prompt(window: list[Caption], n_frames: int) -> str:
    """The generation prompt for a segment's captions (and ``n_frames`` attached frames)."""
    frames_line = f"{n_frames} frames sampled evenly from the segment are attached.\n" if n_frames else ""
    return PROMPT.format(
        start=secs(window[0].start),
        end=secs(window[0].end),
        captions="\n".join(f"- {as_sentence(c.sentence)}" for c in window),
        frames_line=frames_line,
        and_frames=" and the frames" if n_frames else "",
    )


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (code fences and chatter around it are ignored)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_reply(reply: str) -> tuple[dict[str, str] | None, str]:
    """``({"question", "answer"}, "")`` from a valid reply, else ``(None, why it is not)``."""
    obj = first_json_object(reply)
    if obj is None:
        return None, "no JSON object in the reply"
    question, answer = obj.get("question"), obj.get("answer")
    if not isinstance(question, str) or not question.strip():
        return None, "no question string"
    if not isinstance(answer, str) or len(answer.split()) < 2:
        return None, "the answer is not a string of two words or more"
    if len(answer.split()) > MAX_ANSWER_WORDS:
        return None, f"the answer is longer than {MAX_ANSWER_WORDS} words"
    return {"question": " ".join(question.split()), "answer": " ".join(answer.split())}, ""


class ModelQuestions:
    """One generated question per segment from a text model (endpoint or local), cached.

    Args:
        model: answers prompts (:class:`~core.text_models.TextModel`); with ``config.frames``
            > 0 it must also have ``chat`` (:class:`~core.text_models.EndpointTextModel`).
        config: frames sent per segment, tries, retrying failed segments, and ``endpoint.workers``:
            requests in flight at once in :meth:`prefetch` (1: none ahead of ``generate``).
        cache: where generated questions are kept (``None``: in memory only).
    """

    def __init__(self, model: TextModel, config: QuestionConfig, cache: str | Path | None):
        frames, attempts, workers = config.frames, config.attempts, config.endpoint.workers
        if attempts < 1 or frames < 0 or workers < 1:
            raise ConfigError(
                "builder.questions.attempts and .endpoint.workers must be >= 1 and .frames >= 0, "
                f"got {attempts}, {workers}, {frames}"
            )
        self.model, self.frames, self.attempts, self.workers = model, frames, attempts, workers
        self.retry_failed, self.frame_max_pixels = config.retry_failed, config.frame_max_pixels
        self.identity = f"{model.identity}|frames={frames}"
        self.cache_path = Path(cache) if cache else None
        self._store = JsonlStore(cache, key="key") if cache else None
        self.cache: dict[str, dict[str, Any]] = self._store.read() if self._store else {}
        self.counts: Counter[str] = Counter()
        # Set by prefetch: keys asked in this process (not "from cache" when read back) and segments lost
        # to an error there (quarantined without asking twice).
        self._fresh: set[str] = set()
        self._lost: dict[str, str] = {}
        self._lock = threading.Lock()  # counts and cache appends, shared by prefetch's threads

    def generate(self, video: CaptionedVideo, caption: Caption, context: QuestionContext) -> list[QA]:
        """The caption's own question; else, for a segment's first caption, the model's question."""
        if caption.question is not None:
            return [source_qa(caption)]
        window = segment_captions(video, caption)
        if window is None:
            return []
        key = self._key(video, window)
        if key in self._lost:
            raise QuestionError(self._lost[key])
        record = self.cache.get(key)
        if record is not None and key in self._fresh:
            pass  # asked for by prefetch, already counted
        elif record is not None and not (self.retry_failed and "failed" in record):
            self.counts["from_cache"] += 1
        else:
            record = self._generate(video, window, context, key)
        if "failed" in record:
            self.counts["failed"] += 1
            raise QuestionError(record["failed"])
        return [self._qa(record, window)]

    def summary(self) -> dict[str, Any]:
        """Counts for ``build_info.json``.

        ``requests`` counts model calls (an invalid reply's retries included); ``generated`` new
        questions; ``from_cache`` segments found in the cache (failed ones included); ``failed``
        segments without a question because the replies stayed invalid (now or in the cache);
        ``errors`` segments lost to a request or frame-decode error (not cached: a rerun tries again).
        """
        counts = {k: self.counts[k] for k in ("requests", "from_cache", "generated", "failed")}
        return {
            "backend": self.identity,
            "prompt_version": PROMPT_VERSION,
            "cache": str(self.cache_path) if self.cache_path else None,
            **counts,
            "errors": self.counts["errors"],
            "cache_lines_dropped": self._store.dropped if self._store else 0,
        }

    def prefetch(self, jobs: Iterable[tuple[CaptionedVideo, QuestionContext]]) -> None:
        """Ask for every segment of ``jobs`` that the cache lacks, ``workers`` requests at a time.

        Only with ``workers`` > 1; the first error that stops the build (the model is unreachable)
        cancels what was not sent yet and is raised.
        """
        if self.workers == 1:
            return
        todo = list(self._missing(jobs))
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [pool.submit(self._prefetch_one, *job) for job in todo]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def _missing(self, jobs: Iterable[tuple[CaptionedVideo, QuestionContext]]):
        """``(video, window, context, key)`` of each segment in ``jobs`` that needs a request."""
        for video, context in jobs:
            for caption in video.captions:
                window = None if caption.question is not None else segment_captions(video, caption)
                if window is None:
                    continue
                key = self._key(video, window)
                record = self.cache.get(key)
                if record is None or (self.retry_failed and "failed" in record):
                    yield video, window, context, key

    def _prefetch_one(
        self, video: CaptionedVideo, window: list[Caption], context: QuestionContext, key: str
    ) -> None:
        try:
            self._generate(video, window, context, key)
        except QuestionError as err:
            self._lost[key] = str(err)
        self._fresh.add(key)

    def _key(self, video: CaptionedVideo, window: list[Caption]) -> str:
        parts = [
            self.identity,
            PROMPT_VERSION,
            video.key,
            [window[0].start, window[0].end],
            [c.sentence for c in window],
        ]
        return hashlib.sha1(json.dumps(parts).encode()).hexdigest()

    def _generate(
        self, video: CaptionedVideo, window: list[Caption], context: QuestionContext, key: str
    ) -> dict[str, Any]:
        """Ask until the reply is valid; a valid or persistently invalid result is cached."""
        try:
            images = self._images(context.video_path, window[0]) if self.frames else []
            prompt, reason = build_prompt(window, len(images)), ""
            for attempt in range(self.attempts):
                self._count("requests")
                reply = self._ask(prompt + (RETRY_NOTE.format(reason) if reason else ""), images, attempt)
                parsed, reason = parse_reply(reply)
                if parsed:
                    break
        except (TextModelError, DecodeError) as err:
            self._error(err)
            raise QuestionError(str(err)) from err
        if parsed:
            record = {"key": key, **parsed}
        else:
            record = {"key": key, "failed": f"no valid reply in {self.attempts} tries; last: {reason}"}
        record.update(video=video.key, segment=[window[0].start, window[0].end], generator=self.identity)
        with self._lock:
            self.counts["replies"] += 1
            self.counts["generated"] += bool(parsed)
            self.cache[key] = record
            if self._store:
                self._store.append([record])
        return record

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def _error(self, err: Exception) -> None:
        # Three failures before any success: the model is unreachable or misconfigured, not one bad
        # segment, so stop rather than quarantine the whole source.
        with self._lock:
            self.counts["errors"] += 1
            stop = self.counts["errors"] >= 3 and not self.counts["replies"]
        if stop:
            raise TextModelError(f"question generation: the first 3 segments failed; last: {err}") from err

    def _ask(self, prompt: str, images: list[str], seed: int) -> str:
        if not images:
            return self.model.answer(prompt, seed=seed)
        parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
        return self.model.chat(
            [{"role": "user", "content": [*parts, {"type": "text", "text": prompt}]}], seed=seed
        )

    def _images(self, video_path: Path | None, caption: Caption) -> list[str]:
        """``frames`` frames of the segment as ``data:image/jpeg;base64`` URLs."""
        from PIL import Image

        from core.decoding import MediaSpec
        from core.media import decode_span

        if video_path is None:
            raise ConfigError("questions.frames > 0 needs the video file")
        spec = MediaSpec(num_frames=self.frames, min_frames=1, max_pixels=self.frame_max_pixels)
        urls = []
        for frame in decode_span(video_path, caption.start, caption.end, spec).frames:
            buffer = io.BytesIO()
            Image.fromarray(frame).save(buffer, format="JPEG", quality=90)
            urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode())
        return urls

    def _qa(self, record: dict[str, Any], window: list[Caption]) -> QA:
        first = window[0]
        return QA(
            record["question"],
            record["answer"],
            frozenset(c.index for c in window),
            mentions(record["answer"]),
            first.end,
            kind="generated",
            segment=(first.start, first.end),
            provenance=self.identity,
            anchor=min(c.index for c in window),
        )


def make_question_generator(
    config: QuestionConfig,
    out_dir: str | Path | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> QuestionGenerator:
    """The generator ``config`` names; a model's cache defaults to ``<out_dir>/question_cache.jsonl``
    (with neither, it is kept in memory only).

    Raises:
        ConfigError: a setting the backend needs is missing or malformed.
    """
    model = make_text_model(config, "builder.questions", sleep=sleep)
    if model is None:
        return TemplateQuestions()
    cache = config.cache or (Path(out_dir) / "question_cache.jsonl" if out_dir else None)
    if config.backend == TextBackend.local:  # text only, one request at a time: it sees no frames
        config = replace(config, frames=0, endpoint=replace(config.endpoint, workers=1))
    return ModelQuestions(model, config, cache)
