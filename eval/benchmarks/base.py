"""What a benchmark is to the evaluation: a small versioned object.

A benchmark knows how to load its items, how much each answer may say, how to score one prediction, which
categories an item is reported under, which metrics an LLM judge scores, and which metrics make the
headline. Everything else (generation, sharding, resuming, caching, judging, summaries, reports, W&B) is
the same for every benchmark and lives in ``eval/``.

Predictions are stored, scores are not: a result record holds the prediction and how it was produced, and
scores and categories are computed from it whenever a summary is built. So a fix to a scorer or a category
rule re-scores what is on disk, while a change to what the model is shown (items, prompts, generation)
bumps ``version`` and the items are generated again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.config import EvalConfig, OviProtocol
from core.sample import Sample

Meta = dict[str, Any]  # an item's ``Sample.meta``


@dataclass(frozen=True)
class Derived:
    """The items of a benchmark derived from another one, and what the summary should say about them
    (what was left out and why, or ``{"skipped": reason}`` when none could be made)."""

    samples: list[Sample]
    info: dict[str, Any] = field(default_factory=dict)


def _no_judged_metrics(meta: Meta) -> list[str]:
    return []


def _never_simulated(meta: Meta, cfg: EvalConfig) -> bool:
    return False


def _no_notes(cfg: EvalConfig) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Benchmark:
    """One benchmark.

    Attributes:
        name: its key in ``eval.benchmarks`` and the results files' name (``<benchmark>.jsonl``).
        version: bump it whenever what the model is shown or allowed to say changes (items, prompt wording,
            generation lengths): predictions made under another version are generated again.
        title: its name in reports.
        score: ``(prediction, meta) -> {metric: score}``: 0/1 per item for rates; ``{}`` for an item only a
            judge scores.
        categories: ``meta -> {category: value}``: the breakdowns the item counts in.
        max_new_tokens: ``(meta, cfg) -> tokens`` the answer may take.
        settings: ``cfg -> the eval settings that change this benchmark's predictions`` (recorded, and part
            of every cache key).
        headline: the metrics printed when a run ends.
        category_order: category -> its values in the order reports list them (others sorted after).
        weighting: ``(category, value -> weight)``: overall values are the weighted means of that
            category's per-value means, as the benchmark's paper aggregates; None: plain means over items.
        load: ``cfg -> items`` of a benchmark read from a release directory.
        source, derive: a benchmark made from another one's (media-checked) items instead:
            ``derive(items of source, cfg) -> Derived``. Exactly one of ``load`` and ``derive`` is set.
        judged_metrics: ``meta -> metrics`` an LLM judge scores for the item (``eval/rubrics.py``).
        simulated: ``(meta, cfg) -> whether the item runs the OVIBench interruption simulation``.
        notes: ``cfg -> what the summary and report say about how the numbers were made`` (a protocol that
            is not the paper's, say); ``logged_as`` among them renames the benchmark's W&B keys.
    """

    name: str
    version: int
    title: str
    score: Callable[[str, Meta], dict[str, float]]
    categories: Callable[[Meta], dict[str, str]]
    max_new_tokens: Callable[[Meta, EvalConfig], int]
    settings: Callable[[EvalConfig], dict[str, Any]]
    headline: tuple[str, ...] = ()
    category_order: dict[str, tuple[str, ...]] = field(default_factory=dict)
    weighting: tuple[str, dict[str, float]] | None = None
    load: Callable[[EvalConfig], list[Sample]] | None = None
    source: str | None = None
    derive: Callable[[list[Sample], EvalConfig], Derived] | None = None
    judged_metrics: Callable[[Meta], list[str]] = _no_judged_metrics
    simulated: Callable[[Meta, EvalConfig], bool] = _never_simulated
    notes: Callable[[EvalConfig], dict[str, Any]] = _no_notes

    def __post_init__(self) -> None:
        if (self.load is None) == (self.derive is None) or (self.derive is None) != (self.source is None):
            raise ValueError(f"benchmark {self.name}: set either load, or source and derive")

    def protocol(self, meta: Meta, cfg: EvalConfig) -> OviProtocol:
        """How the item is answered: from its given turns, or by the interruption simulation."""
        return OviProtocol.simulated if self.simulated(meta, cfg) else OviProtocol.teacher_forced
