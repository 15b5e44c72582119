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
file (:class:`~core.files.JsonlStore`), one line per segment appended as soon as it is made, keyed by
the sha1 of (backend identity, :data:`~data_builders.questions.model.PROMPT_VERSION`, video id, segment,
caption text): a rerun after a crash asks only for what is missing, and a last line a kill cut short is
skipped and its segment asked again. A segment whose replies stayed invalid is cached as failed (a rerun
does not ask again unless ``retry_failed``) and quarantined with the reason; a segment lost to an error
(HTTP 5xx after retries, no connection, undecodable frames) is quarantined but not cached, so a rerun
tries it again. Three such errors before any reply stop the build: the model is unreachable or misconfigured.

With ``endpoint.workers`` > 1, every segment a build needs is asked for first, that many
requests in flight at once (:meth:`ModelQuestions.prefetch`); the build then reads the cache in its
usual order, so the output does not depend on the number of workers or on which reply came first.

The package: :mod:`~data_builders.questions.qa` (:class:`QA`, the :class:`QuestionGenerator` protocol and
the caption helpers both backends use), :mod:`~data_builders.questions.templates` (the template kinds),
:mod:`~data_builders.questions.model` (the model backends: their settings, :class:`QuestionConfig`, their
prompt, reply checks and cache); here, the order a video's questions come in, and the factory.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.text_models import TextBackend, make_text_model
from data_builders.questions.model import ModelQuestions, QuestionConfig, build_prompt, parse_reply
from data_builders.questions.qa import QA, QuestionContext, QuestionError, QuestionGenerator, as_sentence
from data_builders.questions.templates import NOT_THE_PAPERS, TEMPLATE_KINDS, TemplateQuestions
from data_builders.sources.captions import CaptionedVideo

# How questions are ordered within a video (stable otherwise): the pipeline's random choices index
# into this list, so the order is part of what a seed produces.
_KIND_ORDER = {"source": 0, "generated": 1, "object": 2} | {kind: 1 for kind in TEMPLATE_KINDS[:-1]}


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


__all__ = [
    "NOT_THE_PAPERS",
    "QA",
    "TEMPLATE_KINDS",
    "ModelQuestions",
    "QuestionConfig",
    "QuestionContext",
    "QuestionError",
    "QuestionGenerator",
    "TemplateQuestions",
    "as_sentence",
    "build_prompt",
    "choose_question",
    "make_question_generator",
    "parse_reply",
    "video_questions",
]
