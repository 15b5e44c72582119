"""Scores and categories of stored predictions, computed when a summary is built.

A result record holds what the model said (``prediction``), the item's ``meta``, and the judge's
``judgements`` of it when an LLM judge scores its benchmark. Its scored form, the row ``eval.summary``
aggregates, is::

    {"id": str, "scores": {metric: score}, "categories": {category: value}, "n_unjudged_metrics": int,
     "n_zero_metrics": int}

(plus ``answer_finished`` for an item of the interruption simulation: whether the model's answer ended
before its interruption came).

Rule scores come from the benchmark's scorer; judged scores from the judgements of the judge in use under
the current rubric. A judge's reply of "N/A", of less than 1 on the 1-10 scale, or with no score in it
scores 0, as the paper's means count them (its 1-10 means go below 1), and is counted in
``n_zero_metrics``; a judged metric with no reply at all (the request failed) is counted in
``n_unjudged_metrics``, never averaged in, and asked again by the next evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eval.benchmarks.base import Benchmark
from eval.judge import ZERO_STATUSES
from eval.rubrics import RUBRIC_VERSION

ANY_JUDGE = "*"  # judged_by for records judged elsewhere (eval compare): any judge's scores count


def judged_metrics(bench: Benchmark, meta: dict[str, Any], wanted: list[str] | None) -> list[str]:
    """The metrics a judge scores for an item: those of its benchmark, narrowed by ``judge.metrics``."""
    return [name for name in bench.judged_metrics(meta) if wanted is None or name in wanted]


def judged_scores(
    record: dict[str, Any], metrics: list[str], judged_by: str | None
) -> tuple[dict[str, float], int]:
    """The record's scores for ``metrics`` by the judge ``judged_by`` under the current rubric (None: no
    judge in use, so none), and how many of them are zeros the judge's reply made (``ZERO_STATUSES``:
    "N/A", below the 1-10 floor, or no score in the reply; the paper's means count these as 0)."""
    if judged_by is None:
        return {}, 0
    scores, zeros = {}, 0
    for name, judgement in (record.get("judgements") or {}).items():
        by_this_judge = judged_by == ANY_JUDGE or judgement.get("judge") == judged_by
        current = by_this_judge and judgement.get("rubric_version") == RUBRIC_VERSION
        if name not in metrics or not current:
            continue
        if judgement.get("status") in ZERO_STATUSES:
            scores[name], zeros = 0.0, zeros + 1
        elif judgement.get("score") is not None:
            scores[name] = float(judgement["score"])
    return scores, zeros


def scored_record(
    bench: Benchmark,
    record: dict[str, Any],
    judged_by: str | None,
    wanted: list[str] | None = None,
    settings: Any = None,
    reference: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The scored form of one result record.

    Args:
        bench: the record's benchmark.
        record: ``{"id", "prediction", "meta", ...}``.
        judged_by: the identity of the judge whose judgements count; None: no judge, ``ANY_JUDGE``: any.
        wanted: ``judge.metrics``; None: every metric the benchmark has judged.
        settings, reference: the benchmark's settings and the reference model's record of the same item,
            for a benchmark that scores an item against it (``Benchmark.relative``); None: no such scores.
    """
    meta = record["meta"]
    expected = judged_metrics(bench, meta, wanted)
    judged, zeros = judged_scores(record, expected, judged_by)
    relative = {}
    if bench.relative is not None and reference is not None and reference is not record:
        relative = bench.relative(record["prediction"], reference["prediction"], settings)
    row = {
        "id": record["id"],
        "scores": {**bench.score(record["prediction"], meta), **relative, **judged},
        "categories": bench.categories(meta),
        "n_unjudged_metrics": len(expected) - len(judged),
        "n_zero_metrics": zeros,
    }
    if "simulation" in record:  # the answer may have ended before the user interrupted it
        row["answer_finished"] = bool(record["simulation"]["answer_finished"])
    return row


def scored_records(
    bench: Benchmark,
    records: Iterable[dict[str, Any]],
    judged_by: str | None,
    wanted: list[str] | None = None,
) -> list[dict[str, Any]]:
    return [scored_record(bench, record, judged_by, wanted) for record in records]
