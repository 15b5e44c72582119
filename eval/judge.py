"""An LLM judge for open-ended OVIBench items: backends, reply parsing, caching and calibration.

Practice followed (shared/spec/benchmarks.md §3): the judge model and temperature 0 (and a seed) are
pinned; the prompt asks for JSON only; the first JSON object in the reply is parsed, with the first
number as fallback; the score is clamped to the metric's scale; requests are retried a bounded number
of times with backoff; every judgement keeps its raw reply, parse status and judge identity; a metric
that could not be judged has score None and is counted apart, never averaged in as a zero; judgements
are cached by (judge, rubric version, metric, prompt) so a re-run costs nothing.

API keys are read from the environment at request time and are never stored, logged or cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from data_builders.text_models import EndpointTextModel, TextModelError
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
from eval.scoring import strip_thinking

UNJUDGED = "unjudged"


class JudgeUnavailable(RuntimeError):
    """The judge could not produce a reply (network, server or model failure) after all tries."""


class JudgeBackend(Protocol):
    """Anything that turns a prompt into the judge's reply text."""

    def complete(self, prompt: str) -> str:
        """The judge's reply to ``prompt``.

        Raises:
            JudgeUnavailable: when no reply can be had.
        """
        ...


# ---------------------------------------------------------------------------------------------------
# Reply parsing

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


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
        in range), "clamped" (the value had to be moved onto the scale, whichever way it was found) or
        "unparseable" (no number; score None).
    """
    body = strip_thinking(text or "")
    value, status = _json_score(body), "ok"
    if value is None:
        value, status = _first_number(body), "fallback_number"
    if value is None:
        return None, "unparseable"
    clamped = _clamp(value, scale)
    return clamped, ("clamped" if clamped != value else status)


def _json_score(text: str) -> float | None:
    """The numeric ``score`` of the first JSON object in ``text`` that has one, or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            score = _as_number(next((v for k, v in obj.items() if str(k).lower() == "score"), None))
            if score is not None:
                return score
    return None


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
# Backends


class OpenAICompatibleJudge:
    """A judge behind an OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, hosted APIs).

    A thin wrapper over the project's one HTTP client (``data_builders.text_models``). Timeouts,
    connection errors and HTTP 429/5xx are retried up to ``max_retries`` times (so ``1 + max_retries``
    tries in all) with exponential backoff ``backoff_s * 2**k``; other HTTP errors (400, 401, 404 …) are
    not retried.

    Args:
        base_url: e.g. ``http://localhost:8000/v1``; ``/chat/completions`` is appended.
        model: the served model name (pin an exact version for reproducible judgements).
        api_key_env: environment variable holding the API key; unset means no Authorization header
            (typical for a local vLLM server).
        timeout_s: per-request timeout.
        max_retries: retries after the first try.
        backoff_s: the first backoff; doubled on every further retry (at most 60 s).
        temperature: sampling temperature; keep 0.
        seed: sent to backends that accept one.
        max_tokens: reply length limit.
        sleep: the sleep function (tests replace it).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int = 256,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.client = EndpointTextModel(
            base_url,
            model,
            api_key_env=api_key_env,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            sleep=sleep,
            setting="judge base_url",
        )
        self.model, self.temperature, self.seed = model, temperature, seed

    @property
    def n_requests(self) -> int:
        """HTTP requests sent, retries included."""
        return self.client.n_requests

    @property
    def identity(self) -> str:
        """A default judge identity for ``Judge``: model and decoding settings (not the URL or key)."""
        return f"openai-compatible:{self.model}|temperature={self.temperature}|seed={self.seed}"

    def complete(self, prompt: str) -> str:
        """The reply text for ``prompt``.

        Raises:
            JudgeUnavailable: on a non-retryable HTTP error, an unexpected response body, or when every
                try failed.
        """
        try:
            return self.client.answer(prompt, seed=self.seed)
        except TextModelError as err:
            raise JudgeUnavailable(f"judge {self.model}: {err}") from err


class HFJudge:
    """A local transformers text model as judge: chat template, greedy decoding.

    transformers and torch are imported, and the model loaded, on the first ``complete`` call.

    Args:
        model_name_or_path: a local directory or a name in the local hub cache.
        max_new_tokens: reply length limit.
        device: ``"cuda"``, ``"cpu"`` …; default: CUDA when available.
    """

    def __init__(self, model_name_or_path: str, max_new_tokens: int = 256, device: str | None = None):
        self.model_name_or_path, self.max_new_tokens, self.device = model_name_or_path, max_new_tokens, device
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def identity(self) -> str:
        """A default judge identity for ``Judge``: model and decoding settings."""
        return f"hf:{self.model_name_or_path}|greedy|max_new_tokens={self.max_new_tokens}"

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        model = AutoModelForCausalLM.from_pretrained(self.model_name_or_path, dtype="auto")
        self._model = model.to(device).eval()

    def complete(self, prompt: str) -> str:
        """The greedy reply to ``prompt``.

        Raises:
            JudgeUnavailable: when generation runs out of GPU memory (loading errors are raised as is).
        """
        import torch

        if self._model is None:
            self._load()
        tokenizer = self._tokenizer
        text = prompt
        if tokenizer.chat_template:  # a base model without a template gets the bare prompt
            messages = [{"role": "user", "content": prompt}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self._model.device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        try:
            with torch.no_grad():
                out = self._model.generate(
                    **inputs, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=pad_id
                )
        except torch.cuda.OutOfMemoryError as err:
            raise JudgeUnavailable(f"judge {self.model_name_or_path}: out of GPU memory") from err
        return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------------
# Cache


class _JudgementCache:
    """Judgements by key, kept in memory and appended to a JSONL file (when a path is given)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # so callers may judge from a thread pool
        if self.path and self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill: that judgement is simply made again
                self._entries[entry.pop("key")] = entry

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        return dict(entry) if entry is not None else None

    def put(self, key: str, judgement: dict[str, Any]) -> None:
        with self._lock:
            self._entries[key] = dict(judgement)
            if self.path:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as out:
                    out.write(json.dumps({"key": key, **judgement}) + "\n")


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
        backend: where prompts go.
        identity: the judge's identity, recorded with every judgement and part of the cache key: name the
            model exactly, with its decoding settings (the backends' ``identity`` property does).
        cache_path: a JSONL file of past judgements; None keeps them in memory only. Replies that could
            not be had ("unjudged") are not cached, so a re-run tries them again.
    """

    def __init__(self, backend: JudgeBackend, identity: str, cache_path: str | Path | None = None):
        self.backend, self.identity = backend, identity
        self._cache = _JudgementCache(cache_path)
        self.n_calls = 0  # backend calls made (cache misses)
        self.n_cached = 0  # judgements served from the cache

    def judge(self, metric: str, item: dict[str, Any]) -> dict[str, Any]:
        """Judge one metric on one item (see ``eval.rubrics.judge_prompt`` for the item fields).

        Returns:
            ``{"metric", "score": float | None, "status", "raw", "judge", "rubric_version"}``; status is
            a ``parse_judgement`` status or "unjudged" (then score is None and "error" says why).
        """
        spec = get_metric(metric)
        prompt = judge_prompt(spec.name, item)
        key = cache_key(self.identity, spec.name, prompt)
        cached = self._cache.get(key)
        if cached is not None:
            self.n_cached += 1
            return cached
        base = {"metric": spec.name, "judge": self.identity, "rubric_version": RUBRIC_VERSION}
        self.n_calls += 1
        try:
            raw = self.backend.complete(prompt)
        except JudgeUnavailable as err:
            return {**base, "score": None, "status": UNJUDGED, "raw": "", "error": str(err)}
        score, status = parse_judgement(raw, spec.scale)
        judgement = {**base, "score": score, "status": status, "raw": raw}
        self._cache.put(key, judgement)
        return judgement

    def judge_record(self, record: dict[str, Any], metrics: Iterable[str] | None = None) -> RecordJudgement:
        """Judge one per-sample OVI result record ``{"id", "task", "prediction", "meta": {...}}``.

        Args:
            record: an open-ended OVIBench result; MCQ records get an empty result (they are scored by
                rule in ``eval.scoring``).
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
