"""What a benchmark is to the evaluation: a small versioned object.

A benchmark knows its settings (a dataclass: ``eval.settings.<name>``), how to load its items, what the
model is asked for each (an answer to generate, or the log-likelihood of given completions), how to score
one prediction, which categories an item is reported under, which metrics an LLM judge scores, which make
the headline, and what its report section, W&B run and results-viewer items show beyond the common ones.
Everything else (generation, sharding, resuming, caching, judging, summaries, reports, W&B, the viewer) is
the same for every benchmark and lives in ``eval/``: a new benchmark is one file here and one entry in
``eval.benchmarks.BENCHMARKS``.

Predictions are stored, scores are not: a result record holds the prediction and how it was produced, and
scores and categories are computed from it whenever a summary is built. So a fix to a scorer or a category
rule re-scores what is on disk, while a change to what the model is shown (items, prompts, generation)
bumps ``version`` and the items are predicted again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.choice import Choice
from core.config import OviProtocol
from core.sample import Sample

Meta = dict[str, Any]  # an item's ``Sample.meta``
Settings = Any  # an instance of the benchmark's settings dataclass (``Benchmark.settings_class``)


class Kind(Choice):
    """What the model is asked for an item."""

    generate = "generate"  # an answer, generated (greedy): the prediction is its text
    # the log-likelihood of each of the item's completions (``Benchmark.requests``): the prediction is
    # their summed log-probabilities, in order
    loglikelihood = "loglikelihood"


@dataclass(frozen=True)
class Derived:
    """The items of a benchmark derived from another one, and what the summary should say about them
    (what was left out and why, or ``{"skipped": reason}`` when none could be made)."""

    samples: list[Sample]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoSettings:
    """The settings of a benchmark read from a release that needs none of its own."""


def _no_judged_metrics(meta: Meta) -> list[str]:
    return []


def _never_simulated(meta: Meta, settings: Settings) -> bool:
    return False


def _no_notes(settings: Settings) -> dict[str, Any]:
    return {}


def _no_requests(sample: Sample) -> list[Sample]:
    return [sample]


def _no_summary(context: SummaryContext) -> dict[str, Any]:
    return {}


def _no_lines(entry: dict[str, Any], models: tuple[str, str | None]) -> list[str]:
    return []


def _nothing_logged(entry: dict[str, Any], name: str) -> dict[str, float]:
    return {}


def _no_figures(summary: dict[str, Any], out_dir: Path) -> list[str]:
    return []


def _nothing_shown(meta: Meta, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class SummaryContext:
    """What a benchmark's summary hook sees: its settings, the run's media spec, what its derivation said
    (``info``), and every model's scored records per benchmark (the first model is the reference)."""

    settings: Settings
    media: Any
    info: dict[str, Any]
    scored: dict[str, dict[str, list[dict]]]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark.

    Attributes:
        name: its key in ``eval.benchmarks`` and ``eval.settings``, and the results files' name
            (``<benchmark>.jsonl``).
        version: bump it whenever what the model is shown or allowed to say changes (items, prompt wording,
            generation lengths): predictions made under another version are made again.
        title: its name in reports.
        score: ``(prediction, meta) -> {metric: score}``: 0/1 per item for rates; ``{}`` for an item only a
            judge scores.
        categories: ``meta -> {category: value}``: the breakdowns the item counts in.
        made_with: ``settings -> the settings that change this benchmark's predictions`` (recorded, and
            part of every result's stamp and cache key).
        settings_class: the dataclass of ``eval.settings.<name>`` (None: :class:`NoSettings`); a derived
            benchmark has none and reads its source's.
        kind: ``generate`` (an answer) or ``loglikelihood`` (the log-probabilities of ``requests(item)``).
        max_new_tokens: ``(meta, settings) -> tokens`` an answer may take (``generate``).
        requests: ``item -> the conversations whose final turn's log-likelihood is asked``
            (``loglikelihood``).
        relative: ``(prediction, reference's prediction, settings) -> {metric: score}`` of an item against
            the same item's prediction by the reference model (the run's first, its baseline); None: none.
        headline: the metric keys printed when a run ends (a category key such as ``accuracy/type/X`` too).
        graded: the metrics that are means on their own scale, not 0/1 rates (no McNemar test, no
            percentages).
        metric_order: the order of metrics in tables (others after, as found).
        category_order: category -> its values in the order reports list them (others sorted after).
        strata: a category (OVIBench: ``type``) whose values the paired bootstrap resamples within, each
            keeping its size, so the intervals follow the set's composition; values are plain means over
            the items present either way. None: one plain resample of all items.
        load: ``settings -> items`` of a benchmark read from a release directory.
        synthetic: the synthetic build's dataset its ``root`` setting defaults to (``v2p_bench``,
            ``ovibench``) when ``data.build_synthetic`` is set; None: none.
        source, derive: a benchmark made from another one's (media-checked) items instead:
            ``derive(items of source, settings of source) -> Derived``. Exactly one of ``load`` and
            ``derive`` is set.
        judged_metrics: ``meta -> metrics`` an LLM judge scores for the item (``eval/rubrics.py``).
        simulated: ``(meta, settings) -> whether the item runs the OVIBench interruption simulation``.
        notes: ``settings -> what the summary and report say about how the numbers were made`` (a protocol
            that is not the paper's, say); ``logged_as`` among them renames the benchmark's W&B keys.
        summary: ``SummaryContext -> entries`` added to the benchmark's summary entry (a derived
            benchmark's account of its items, a comparison with its source).
        report_lines: ``(summary entry, (reference, last model)) -> lines`` of the report's Diagnostics
            section; none: the benchmark has no line there.
        logged: ``(summary entry, model) -> extra scalars`` logged to W&B for the model.
        figures: ``(summary, run directory) -> report lines`` of the plots it draws beside the report (the
            OVIBench radar), shown at the end of its report section.
        viewer_item: ``(meta, each model's answer as the results viewer holds it) -> entries`` added to the
            item in the viewer's page, which draws them (OVIBench: ``ovi``, the interruption's timeline).
    """

    name: str
    version: int
    title: str
    score: Callable[[Any, Meta], dict[str, float]]
    categories: Callable[[Meta], dict[str, str]]
    made_with: Callable[[Settings], dict[str, Any]]
    settings_class: type | None = None
    kind: Kind = Kind.generate
    max_new_tokens: Callable[[Meta, Settings], int] | None = None
    requests: Callable[[Sample], list[Sample]] = _no_requests
    relative: Callable[[Any, Any, Settings], dict[str, float]] | None = None
    headline: tuple[str, ...] = ()
    graded: frozenset[str] = frozenset()
    metric_order: tuple[str, ...] = ()
    category_order: dict[str, tuple[str, ...]] = field(default_factory=dict)
    strata: str | None = None
    load: Callable[[Settings], list[Sample]] | None = None
    synthetic: str | None = None
    source: str | None = None
    derive: Callable[[list[Sample], Settings], Derived] | None = None
    judged_metrics: Callable[[Meta], list[str]] = _no_judged_metrics
    simulated: Callable[[Meta, Settings], bool] = _never_simulated
    notes: Callable[[Settings], dict[str, Any]] = _no_notes
    summary: Callable[[SummaryContext], dict[str, Any]] = _no_summary
    report_lines: Callable[[dict[str, Any], tuple[str, str | None]], list[str]] = _no_lines
    logged: Callable[[dict[str, Any], str], dict[str, float]] = _nothing_logged
    figures: Callable[[dict[str, Any], Path], list[str]] = _no_figures
    viewer_item: Callable[[Meta, dict[str, dict[str, Any]]], dict[str, Any]] = _nothing_shown

    def __post_init__(self) -> None:
        if (self.load is None) == (self.derive is None) or (self.derive is None) != (self.source is None):
            raise ValueError(f"benchmark {self.name}: set either load, or source and derive")
        if self.source is not None and self.settings_class is not None:
            raise ValueError(f"benchmark {self.name}: a derived benchmark reads its source's settings")
        if self.kind is Kind.loglikelihood and self.source is not None:
            raise ValueError(f"benchmark {self.name}: a log-likelihood benchmark loads its own items")
        if (self.kind is Kind.generate) != (self.max_new_tokens is not None):
            raise ValueError(f"benchmark {self.name}: max_new_tokens is for generate benchmarks only")

    def protocol(self, meta: Meta, settings: Settings) -> OviProtocol:
        """How the item is answered: from its given turns, or by the interruption simulation."""
        return OviProtocol.simulated if self.simulated(meta, settings) else OviProtocol.teacher_forced

    @property
    def has_judge(self) -> bool:
        """Whether an LLM judge scores any of this benchmark's items."""
        return self.judged_metrics is not _no_judged_metrics

    def is_graded(self, key: str) -> bool:
        """Whether a metric key (``"tfs"``, ``"tfs/type/Correction"``) is a mean on its own scale."""
        return key.split("/", 1)[0] in self.graded
