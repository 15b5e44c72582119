"""Metric tables per model and benchmark, and ``summary.json``: every checkpoint against the baseline.

Input rows are scored records, one per benchmark item (see ``eval.scored``)::

    {"id": str, "scores": {"accuracy": 1.0, ...}, "categories": {"dimension": "OA", ...}}

Metric keys are the overall metric names (``"accuracy"``, ``"accuracy_tolerant"``, the V2P diagnostics'
``"z_rate"``, ``"refusal_rate"`` and ``"hack_ratio"`` with their ``_tolerant`` twins, ``"ma"``, ``"ca"``, and
the judged OVIBench metrics ``"iac"``, ``"ifa"``, ``"tfs"``, ``"ves"``, ``"cfs"``, ``"ccs"``) and
``"<metric>/<category>/<value>"`` per category, e.g. ``"accuracy/dimension/OA"``. Every value is a micro
average over the items scored under that key (for 0/1 metrics: correct items / items), never a mean of
per-category means. A benchmark's graded metrics (``Benchmark.graded``: the judge's 1–10 scores, a
preference margin) are plain means on their own scale.

Open-ended OVIBench records also carry ``"n_unjudged_metrics"``: judged metrics with no judge's reply (a
failed request, or no judge configured). They have no score, so they are left out of every mean and
counted apart in ``n_unjudged``. A reply of "N/A", below 1 on the 1-10 scale or without a score scores 0,
as the paper's means count them (eval/scored.py), and is counted in ``n_zero``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.rundir import BASELINE
from eval.benchmarks import BENCHMARKS
from eval.benchmarks.base import Benchmark
from eval.stats import mcnemar_p, paired_bootstrap
from eval.summary_schema import (
    BenchmarkEntry,
    Comparison,
    Counts,
    MetricEntry,
    ModelRef,
    Summary,
    to_json,
)

_RESERVED_KEYS = ("baseline", "checkpoints", "benchmarks")

ScoredRecords = Sequence[dict[str, Any]]


def metric_key(metric: str, category: str | None = None, value: str | None = None) -> str:
    """``"accuracy"`` overall, or ``"accuracy/dimension/OA"`` for one category value."""
    return metric if category is None else f"{metric}/{category}/{value}"


def rules(benchmark: str) -> Benchmark | None:
    """The benchmark of that name (its metric order, graded metrics, strata), if evaluation knows it."""
    return BENCHMARKS.get(benchmark)


def is_graded(benchmark: str, key: str) -> bool:
    """Whether a metric key (``"tfs"``, ``"tfs/type/Correction"``) of a benchmark is a mean on its own scale
    (a 1–10 judge score, a preference margin), not a 0/1 rate."""
    bench = rules(benchmark)
    return bench is not None and bench.is_graded(key)


def item_scores(records: ScoredRecords, order: Sequence[str] = ()) -> dict[str, dict[str, float]]:
    """Per metric key, the per-item scores ``{item id: score}``, in record order; overall keys first, each
    group in the metric ``order`` (the benchmark's ``metric_order``; others after, as found).

    Records without scores (open-ended items awaiting a judge) contribute nothing.

    Raises:
        ValueError: when an item id occurs twice (it would be counted twice).
    """
    table: dict[str, dict[str, float]] = {}
    seen: set[str] = set()
    for record in records:
        item_id = record["id"]
        if item_id in seen:
            raise ValueError(f"duplicate item id {item_id!r} in scored records")
        seen.add(item_id)
        for metric, score in record["scores"].items():
            table.setdefault(metric_key(metric), {})[item_id] = float(score)
            for category, value in record.get("categories", {}).items():
                table.setdefault(metric_key(metric, category, value), {})[item_id] = float(score)
    return _overall_first(table, tuple(order))


def _overall_first(table: dict[str, dict[str, float]], order: tuple[str, ...]) -> dict[str, dict[str, float]]:
    def rank(key: str) -> int:
        name = key.split("/", 1)[0]
        return order.index(name) if name in order else len(order)

    keys = sorted(table, key=lambda key: ("/" in key, rank(key)))  # stable: ties keep first-seen order
    return {key: table[key] for key in keys}


def aggregate(records: ScoredRecords, order: Sequence[str] = ()) -> dict[str, dict[str, float | int]]:
    """The metric table of one model on one benchmark: ``{metric key: {"value": mean, "n": items}}``."""
    return {
        key: {"value": sum(scores.values()) / len(scores), "n": len(scores)}
        for key, scores in item_scores(records, order).items()
    }


def count_unjudged(records: ScoredRecords) -> int:
    """Judged metrics with no reply, summed over records (``n_unjudged_metrics``; never zeros)."""
    return sum(int(record.get("n_unjudged_metrics", 0)) for record in records)


def count_zeros(records: ScoredRecords) -> int:
    """Judged metrics the judge's reply made 0 (N/A, below 1-10, no score), summed over records."""
    return sum(int(record.get("n_zero_metrics", 0)) for record in records)


def count_unjudged_items(records: ScoredRecords) -> int:
    """Records with at least one judged metric missing."""
    return sum(1 for record in records if record.get("n_unjudged_metrics", 0) > 0)


def build_summary(
    baseline: dict[str, ScoredRecords],
    checkpoints: Sequence[tuple[str, int, dict[str, ScoredRecords]]],
    extra: dict[str, Any] | None = None,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    benchmarks: Mapping[str, Benchmark] | None = None,
    baseline_name: str = BASELINE,
) -> dict[str, Any]:
    """The content of ``summary.json``: every checkpoint's metrics next to the baseline's.

    A checkpoint's ``value`` (and ``n``) cover all of its scored items. Its ``delta``, ``delta_ci95``
    (paired bootstrap) and ``mcnemar_p`` cover only the items scored for both the baseline and the
    checkpoint under that metric key, matched by item id (``n_paired`` of them); when the two item sets
    are equal, ``delta == value - baseline``. With no common items these three are None; ``mcnemar_p``
    is None for the 1–10 judge metrics too (McNemar needs right/wrong outcomes). A benchmark missing for
    a checkpoint is absent from its entries; a metric the baseline lacks has baseline None.

    Per benchmark, ``n_items``, ``n_unjudged`` (the judged metrics that have no score, summed over items)
    and ``n_unjudged_items`` (items with any such metric) are the baseline's; ``checkpoints`` has the
    same three counts for each checkpoint.

    Args:
        baseline: benchmark name -> scored records of the untuned model.
        checkpoints: ``(name, step, {benchmark: scored records})`` in training order.
        extra: top-level keys added as they are (media spec, generation settings, ``quarantine``,
            ``judge``, ...).
        n_resamples: bootstrap resamples per comparison.
        seed: bootstrap seed, so re-running on the same results gives the same intervals.
        benchmarks: benchmark name -> the benchmark whose rules its entry follows (None: the evaluation's
            ``BENCHMARKS``): its metric order, its graded metrics (no McNemar test), and its
            ``strata``: its intervals are then resampled within each value of that category (OVIBench:
            the interruption type), and the entry says so under ``aggregation``.
        baseline_name: the first model's name: ``baseline`` (the untuned model) in a training run, the
            model's or checkpoint's own in a standalone evaluation.

    Raises:
        ValueError: on duplicate checkpoint names, duplicate item ids, or an ``extra`` key that would
            overwrite ``baseline``, ``checkpoints`` or ``benchmarks``.
    """
    extra = extra or {}
    clashes = [key for key in _RESERVED_KEYS if key in extra]
    if clashes:
        raise ValueError(f"extra must not set reserved summary keys: {clashes}")
    names = [name for name, _, _ in checkpoints]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate checkpoint names: {names}")
    names = _ordered_union([baseline, *(results for _, _, results in checkpoints)])
    known = BENCHMARKS if benchmarks is None else benchmarks
    summary = Summary(
        baseline=ModelRef(baseline_name, 0),
        checkpoints=[ModelRef(name, int(step)) for name, step, _ in checkpoints],
        benchmarks={
            name: _benchmark_entry(name, baseline, checkpoints, n_resamples, seed, known.get(name))
            for name in names
        },
        **extra,
    )
    return to_json(summary)


def _benchmark_entry(
    benchmark: str,
    baseline: dict[str, ScoredRecords],
    checkpoints: Sequence[tuple[str, int, dict[str, ScoredRecords]]],
    n_resamples: int,
    seed: int,
    bench: Benchmark | None,
) -> dict[str, Any]:
    strata = bench.strata if bench else None
    order = bench.metric_order if bench else ()
    base_records = baseline.get(benchmark, [])
    base_scores = item_scores(base_records, order)
    tuned = [
        (name, step, item_scores(results[benchmark], order))
        for name, step, results in checkpoints
        if benchmark in results
    ]
    mean = _Mean(
        strata,
        [base_records, *(results[benchmark] for _, _, results in checkpoints if benchmark in results)],
    )
    metrics: dict[str, MetricEntry] = {}
    for key in _ordered_union([base_scores, *(scores for _, _, scores in tuned)]):
        reference = base_scores.get(key, {})
        graded = bench is not None and bench.is_graded(key)
        metrics[key] = MetricEntry(
            baseline=mean(reference),
            n=len(reference),
            checkpoints={
                name: _comparison(int(step), reference, scores[key], n_resamples, seed, graded, mean)
                for name, step, scores in tuned
                if key in scores
            },
        )
    counts = {name: _counts(results[benchmark]) for name, _, results in checkpoints if benchmark in results}
    aggregation = None
    if strata:
        aggregation = (
            f"item-level means over the items present; paired intervals resampled within each {strata}"
        )
    own = dataclasses.asdict(_counts(base_records))
    return BenchmarkEntry(**own, checkpoints=counts, metrics=metrics, aggregation=aggregation)


class _Mean:
    """Plain means over items, and each item's stratum (a category of its record) for the intervals."""

    def __init__(self, strata: str | None, record_sets: Iterable[ScoredRecords]):
        self.stratum = (
            {
                record["id"]: record.get("categories", {}).get(strata)
                for records in record_sets
                for record in records
            }
            if strata
            else None
        )

    def strata(self, item_ids: Sequence[str]) -> list[str] | None:
        return [str(self.stratum.get(item_id)) for item_id in item_ids] if self.stratum is not None else None

    def weights(self, item_ids: Sequence[str]) -> dict[str, float] | None:
        """Each stratum's share of ``item_ids``: the weighted mean of stratum means is then the plain mean."""
        strata = self.strata(item_ids)
        return {key: float(strata.count(key)) for key in set(strata)} if strata is not None else None

    def __call__(self, scores: dict[str, float]) -> float | None:
        return sum(scores.values()) / len(scores) if scores else None


def _counts(records: ScoredRecords) -> Counts:
    counts = Counts(
        len(records), count_unjudged(records), count_unjudged_items(records), count_zeros(records)
    )
    simulated = [record["answer_finished"] for record in records if "answer_finished" in record]
    if simulated:  # answers that ended before their interruption: there was nothing to cut
        counts.n_simulated, counts.n_answer_finished = len(simulated), sum(simulated)
    return counts


def _comparison(
    step: int,
    reference: dict[str, float],
    scores: dict[str, float],
    n_resamples: int,
    seed: int,
    graded: bool,
    mean: _Mean,
) -> dict[str, Any]:
    """One checkpoint's entry for one metric key, paired with the baseline by item id."""
    common = [item_id for item_id in reference if item_id in scores]
    entry = Comparison(step, mean(scores), len(scores), len(common), None, None, None)
    if common:
        before = [reference[item_id] for item_id in common]
        after = [scores[item_id] for item_id in common]
        interval = paired_bootstrap(
            before, after, n_resamples, seed, 0.95, strata=mean.strata(common), weights=mean.weights(common)
        )
        entry.delta = interval["delta"]
        entry.delta_ci95 = [interval["ci_low"], interval["ci_high"]]
        entry.mcnemar_p = None if graded else mcnemar_p(before, after)
    return entry


def _ordered_union(mappings: Iterable[dict[str, Any]]) -> list[str]:
    """Keys of all mappings, each once, in first-seen order."""
    keys: dict[str, None] = {}
    for mapping in mappings:
        keys.update(dict.fromkeys(mapping))
    return list(keys)


def best_checkpoint(summary: dict[str, Any], benchmark: str, metric: str) -> str | None:
    """Name of the checkpoint with the highest ``metric`` on ``benchmark`` (the earliest wins ties).

    Returns None when the benchmark or metric is missing or no checkpoint has a value for it.
    """
    entry = summary.get("benchmarks", {}).get(benchmark, {}).get("metrics", {}).get(metric)
    if not entry:
        return None
    best_name, best_value = None, None
    for checkpoint in summary.get("checkpoints", []):
        result = entry["checkpoints"].get(checkpoint["name"])
        if result is None or result["value"] is None:
            continue
        if best_value is None or result["value"] > best_value:
            best_name, best_value = checkpoint["name"], result["value"]
    return best_name
