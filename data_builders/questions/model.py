"""Questions from a text model (an endpoint or a local model), asked once per segment and cached
(see :mod:`data_builders.questions`)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import threading
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError, DecodeError
from core.files import JsonlStore
from core.text_models import EndpointConfig, TextModel, TextModelConfig, TextModelError
from data_builders.questions.qa import (
    QA,
    QuestionContext,
    QuestionError,
    as_sentence,
    mentions,
    secs,
    segment_captions,
    source_qa,
)
from data_builders.sources.captions import Caption, CaptionedVideo

# Part of every cache key: bump it when the prompt or the reply checks change.
PROMPT_VERSION = 1
MAX_ANSWER_WORDS = 80

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


@dataclass
class QuestionConfig(TextModelConfig):
    """Question generation (``builder.questions.*``): the keys of a text model
    (:mod:`core.text_models`; ``backend: none`` asks template questions, no model) and these, which the
    model backends read."""

    endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(timeout_s=120.0))
    cache: str | None = None  # JSONL cache; None: <out>/question_cache.jsonl (model backends only)
    frames: int = 4  # endpoint: frames of the segment sent as images; 0: captions only (text models)
    frame_max_pixels: int = 448 * 448  # pixel budget per frame sent
    attempts: int = 3  # tries per segment while the reply is not a valid JSON question/answer
    retry_failed: bool = False  # ask again for segments cached as failed


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
