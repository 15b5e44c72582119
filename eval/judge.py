"""An LLM judge for open-ended OVIBench items: reply parsing, caching and calibration.

Practice followed (shared/spec/benchmarks.md §3): the judge model and temperature 0 (and a seed) are
pinned; the prompt asks for JSON only; the first JSON object in the reply is parsed, with the first
number as fallback; the score is clamped to the metric's scale; requests are retried a bounded number
of times with backoff; every judgement keeps its raw reply, parse status and judge identity; a metric
that could not be judged (no reply) has score None and is counted apart and asked again, while a reply of
"N/A", of less than 1 on the 1-10 scale or with no score at all counts 0, as the paper's means count
them (its False-Trigger CFS is 0.69, below the scale's floor); judgements
are cached by (judge, rubric version, metric, prompt) so a re-run costs nothing.

The judge is any text model (``core.text_models``: an OpenAI-compatible endpoint or a local
model). API keys are read from the environment at request time and are never stored, logged or cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.answers import interruption_type_named, strip_thinking
from core.files import JsonlStore
from core.text_models import TextModel, TextModelError
from eval.rubrics import (
    BINARY,
    METRICS,
    OPTIONAL_FIELDS,
    REQUIRED_FIELDS,
    RUBRIC_VERSION,
    Scale,
    get_metric,
    judge_prompt,
    metrics_for,
)

UNJUDGED = "unjudged"
NOT_APPLICABLE = "not_applicable"
BELOW_SCALE = "below_scale"
UNPARSEABLE = "unparseable"
# Statuses of a judge's reply that the summary scores 0, as the paper's means count N/A and failures
# (eval/scored.py); a request that got no reply at all (UNJUDGED) is counted apart and asked again.
ZERO_STATUSES = (NOT_APPLICABLE, BELOW_SCALE, UNPARSEABLE)
JUDGE_SEED = 0  # sent to servers that take one: a judgement is reproducible


# ---------------------------------------------------------------------------------------------------
# Reply parsing

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_NOT_APPLICABLE = re.compile(r"\W*(n/?a|not applicable)\W*", re.IGNORECASE)


def parse_judgement(text: str, scale: Scale) -> tuple[float | None, str]:
    """The score in a judge reply, clamped to ``scale``, and how it was found.

    The first JSON object with a numeric ``score`` wins (code fences, prose before it and junk after it
    are tolerated); otherwise the first number anywhere in the text. ``<think>`` blocks of reasoning
    judges are dropped first, since they are full of numbers that are not the verdict.

    Args:
        text: the raw reply.
        scale: ``(low, high)``; ``(0, 1)`` is binary, where any other value is clamped to [0, 1] and
            then rounded to 0 or 1.

    Returns:
        ``(score, status)``; status is "ok" (from JSON, in range), "fallback_number" (from a bare number,
        in range), "clamped" (the value had to be moved onto the scale, whichever way it was found),
        "not_applicable" (the verdict is "N/A": score 0), "below_scale" (under 1 on the 1-10 scale:
        score 0) or "unparseable" (no number; score None, which the summary counts as 0 too).
        The zeros are the paper's: its 1-10 means go below 1 (False Trigger CFS 0.69), which only
        zeros for N/A and failed judgements can make.
    """
    body = strip_thinking(text or "")
    if _says_not_applicable(body):
        return 0.0, NOT_APPLICABLE
    value, status = _json_score(body), "ok"
    if value is None:
        value, status = _first_number(body), "fallback_number"
    if value is None:
        return None, UNPARSEABLE
    if scale != BINARY and value < scale[0]:  # below the 1-10 floor: the paper's means count it as 0
        return 0.0, BELOW_SCALE
    clamped = _clamp(value, scale)
    return clamped, ("clamped" if clamped != value else status)


def _says_not_applicable(text: str) -> bool:
    """Whether the reply's verdict is "N/A" (``{"score": "N/A"}``, or the bare word), not a number."""
    for obj in _json_objects(text):
        for key, value in obj.items():
            if str(key).lower() == "score":
                return value is None or (isinstance(value, str) and bool(_NOT_APPLICABLE.fullmatch(value)))
    return bool(_NOT_APPLICABLE.fullmatch(text))


def parse_class(text: str) -> tuple[str | None, str]:
    """The interruption type a classification reply names, and how it was found.

    The ``class`` of the first JSON object that has one wins ("ok"); otherwise the first type named anywhere
    ("fallback_class"); otherwise none ("unparseable"). ``<think>`` blocks are dropped first.
    """
    body = strip_thinking(text or "")
    for obj in _json_objects(body):
        named = obj.get("class")
        if isinstance(named, str) and interruption_type_named(named):
            return interruption_type_named(named), "ok"
    named = interruption_type_named(body)
    return (named, "fallback_class") if named else (None, UNPARSEABLE)


def _json_score(text: str) -> float | None:
    """The numeric ``score`` of the first JSON object in ``text`` that has one, or None."""
    for obj in _json_objects(text):
        score = _as_number(next((v for k, v in obj.items() if str(k).lower() == "score"), None))
        if score is not None:
            return score
    return None


def _json_objects(text: str) -> Iterator[dict]:
    """Every JSON object that starts at a ``{`` of ``text``, in order (a reply may wrap it in prose)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):  # {"score": true} from a binary judge
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):  # "7", "7/10"
        return _first_number(value)
    return None


def _first_number(text: str) -> float | None:
    match = _NUMBER.search(text)
    return float(match.group()) if match else None


def _clamp(value: float, scale: Scale) -> float:
    low, high = scale
    value = min(max(value, float(low)), float(high))
    if scale == BINARY:
        return 1.0 if value >= 0.5 else 0.0
    return value


# ---------------------------------------------------------------------------------------------------
# Cache


class _JudgementCache:
    """Judgements by key, kept in memory and appended to a JSONL file (when a path is given)."""

    def __init__(self, path: str | Path | None):
        self.store = JsonlStore(path, key="key") if path else None
        self._entries = self.store.read() if self.store else {}
        self._lock = threading.Lock()  # so callers may judge from a thread pool

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        return None if entry is None else {k: v for k, v in entry.items() if k != "key"}

    def put(self, key: str, judgement: dict[str, Any]) -> None:
        entry = {"key": key, **judgement}
        with self._lock:
            self._entries[key] = entry
        if self.store:
            self.store.append([entry])


def cache_key(identity: str, metric: str, prompt: str) -> str:
    """sha1 of (judge identity, rubric version, metric, prompt)."""
    return hashlib.sha1(json.dumps([identity, RUBRIC_VERSION, metric, prompt]).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------
# Judge


@dataclass
class RecordJudgement:
    """The judged metrics of one result record.

    Attributes:
        scores: metric name -> score, only for metrics that were judged (merge into the record's scores).
        n_unjudged: metrics that could not be judged (no reply, or an unparseable one).
        judgements: metric name -> the full judgement (raw reply, status, judge identity …).
    """

    scores: dict[str, float] = field(default_factory=dict)
    n_unjudged: int = 0
    judgements: dict[str, dict[str, Any]] = field(default_factory=dict)


class Judge:
    """Judges OVIBench items metric by metric, with a persistent cache.

    Args:
        model: the text model that judges; its ``identity`` (the model and its decoding settings) is
            recorded with every judgement and is part of the cache key.
        cache_path: a JSONL file of past judgements; None keeps them in memory only. Replies that could
            not be had ("unjudged") are not cached, so a re-run tries them again.
    """

    def __init__(self, model: TextModel, cache_path: str | Path | None = None):
        self.model, self.identity = model, model.identity
        self._cache = _JudgementCache(cache_path)
        self.n_calls = 0  # model calls made (cache misses)
        self.n_cached = 0  # judgements served from the cache

    def judge(self, metric: str, item: dict[str, Any]) -> dict[str, Any]:
        """Judge one metric on one item (see ``eval.rubrics.judge_prompt`` for the item fields).

        Returns:
            ``{"metric", "score": float | None, "status", "raw", "judge", "rubric_version"}``; status is
            a ``parse_judgement`` (or ``parse_class``) status or "unjudged" (then score is None and "error"
            says why). A classification metric's judgement also holds the ``class`` named; its score is 1
            when that is the item's interruption type.
        """
        spec = get_metric(metric)
        prompt = judge_prompt(spec.name, item)
        key = cache_key(self.identity, spec.name, prompt)
        judgement = self._cache.get(key)
        if judgement is not None:
            self.n_cached += 1
        else:
            judgement = self._ask(spec, prompt)
            if judgement["status"] == UNJUDGED:
                return judgement
            self._cache.put(key, judgement)
        if spec.classes:  # the prompt does not hold the item's type: the score is not cached with it
            named = judgement.get("class")
            judgement = {
                **judgement,
                "score": None if named is None else float(named == item["interruption_type"]),
            }
        return judgement

    def _ask(self, spec, prompt: str) -> dict[str, Any]:
        """A fresh judgement of ``prompt`` (unjudged when no reply can be had)."""
        base = {"metric": spec.name, "judge": self.identity, "rubric_version": RUBRIC_VERSION}
        self.n_calls += 1
        try:
            raw = self.model.answer(prompt, seed=JUDGE_SEED)
        except TextModelError as err:
            return {**base, "score": None, "status": UNJUDGED, "raw": "", "error": str(err)}
        if spec.classes:
            named, status = parse_class(raw)
            return {**base, "class": named, "status": status, "raw": raw}
        score, status = parse_judgement(raw, spec.scale)
        return {**base, "score": score, "status": status, "raw": raw}

    def judge_record(self, record: dict[str, Any], metrics: Iterable[str] | None = None) -> RecordJudgement:
        """Judge one per-sample OVI result record ``{"id", "task", "prediction", "meta": {...}}``.

        Args:
            record: an open-ended OVIBench result; MCQ records get an empty result (they are scored by
                rule by their benchmark).
            metrics: the metrics to judge; default: those that apply to the record's interruption type
                (``eval.rubrics.metrics_for``).

        Raises:
            ValueError: when the record's meta lacks a field the prompt needs.
        """
        if record.get("meta", {}).get("format") == "mcq":
            return RecordJudgement()
        item = item_from_record(record)
        names = list(metrics) if metrics is not None else metrics_for(item["interruption_type"])
        result = RecordJudgement()
        for name in names:
            judgement = self.judge(name, item)
            result.judgements[judgement["metric"]] = judgement
            if judgement["score"] is None:
                result.n_unjudged += 1
            else:
                result.scores[judgement["metric"]] = float(judgement["score"])
        return result


def item_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The judge item of a result record: its meta fields plus the prediction as ``response``.

    Think blocks are stripped from the prediction: the judge scores what the user would hear.

    Raises:
        ValueError: when the meta lacks a required field (``partial_answer`` and ``interruption`` must be
            copied into the meta by the OVIBench loader).
    """
    meta = record.get("meta", {})
    item = {key: meta[key] for key in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS) if meta.get(key) is not None}
    item["response"] = strip_thinking(record.get("prediction") or "")
    missing = [key for key in REQUIRED_FIELDS if key not in item]
    if missing:
        raise ValueError(f"record {record.get('id')!r}: meta lacks {missing}, needed by the judge")
    return item


# ---------------------------------------------------------------------------------------------------
# Calibration against human scores


def calibrate(judge: Judge, human_file: str | Path) -> dict[str, dict[str, float | int | None]]:
    """Mean absolute error between the judge and human scores, per metric (like the paper's Table 1).

    ``human_file`` is JSONL; each line is a judge item (the fields of ``eval.rubrics.judge_prompt``) or a
    result record (``{"id", "prediction", "meta"}``), plus ``"human": {metric: score}`` for the metrics a
    person scored. Each scored metric is judged; items the judge could not score are counted in
    ``n_unjudged`` and left out of the MAE.

    Returns:
        metric -> ``{"mae": float | None (None when nothing was judged), "n": items in the MAE,
        "n_unjudged": items left out}``, in ``eval.rubrics.METRICS`` order.

    Raises:
        ValueError: on a bad line (not JSON, no ``human`` scores, an unknown metric, a non-numeric score
            or one off the metric's scale), naming the line.
    """
    errors: dict[str, list[float]] = {}
    unjudged: dict[str, int] = {}
    # Every line is checked before the first (possibly paid) judge call.
    for item, human in list(_human_items(Path(human_file))):
        for metric, human_score in human.items():
            judgement = judge.judge(metric, item)
            errors.setdefault(metric, [])
            unjudged.setdefault(metric, 0)
            if judgement["score"] is None:
                unjudged[metric] += 1
            else:
                errors[metric].append(abs(float(judgement["score"]) - human_score))
    return {
        metric: {
            "mae": sum(errors[metric]) / len(errors[metric]) if errors[metric] else None,
            "n": len(errors[metric]),
            "n_unjudged": unjudged[metric],
        }
        for metric in METRICS
        if metric in errors
    }


def _human_items(path: Path) -> Iterable[tuple[dict[str, Any], dict[str, float]]]:
    """``(judge item, {metric: human score})`` for every non-empty line; errors name the line."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
            human = row.get("human") if isinstance(row, dict) else None
            if not isinstance(human, dict) or not human:
                raise ValueError("no 'human' scores")
            item = item_from_record(row) if "meta" in row else row
            missing = [key for key in REQUIRED_FIELDS if item.get(key) is None]
            if missing:
                raise ValueError(f"lacks {missing}")
            scores = {get_metric(metric).name: _human_score(metric, score) for metric, score in human.items()}
        except ValueError as err:  # JSONDecodeError is a ValueError too
            raise ValueError(f"{where}: {err}") from err
        yield item, scores


def _human_score(metric: str, score: Any) -> float:
    low, high = get_metric(metric).scale
    if isinstance(score, bool) or not isinstance(score, int | float) or not low <= score <= high:
        raise ValueError(f"human {metric} score {score!r} is not a number in [{low}, {high}]")
    return float(score)
