"""What a run's evaluation writes after every model: ``summary.json``, ``report.md`` (with its plot), and
the model's metrics, deltas and per-item tables to the metric logger (metrics.jsonl and W&B)."""

from __future__ import annotations

from typing import Any

from core.metric_logging import MetricLogger
from core.rundir import RunDir
from eval.benchmarks.base import Benchmark
from eval.report import write_report
from eval.summary import build_summary
from eval.summary_schema import from_json

Scored = dict[str, list[dict]]  # benchmark -> scored records (eval.scored)


def write_summary(
    run_dir: RunDir,
    models: list[tuple[str, int]],
    scored: dict[str, Scored],
    extra: dict[str, Any],
    n_resamples: int,
    described: dict[str, dict[str, Any]],
    benchmarks: dict[str, Benchmark],
) -> dict:
    """Build the summary (every model against the first, the baseline), write it with the report.

    Args:
        models: ``(name, step)`` of every model evaluated, the baseline first.
        scored: model name -> its scored records per benchmark.
        extra: the summary's other top-level entries (media spec, generation settings, quarantine, judge).
        described: benchmark -> what its entry says of how its numbers were made (version, settings,
            notes such as the protocol).
        benchmarks: the run's benchmarks, by name (their metric order, strata, graded metrics).
    """
    (base, _), *rest = models
    checkpoints = [(name, step, scored[name]) for name, step in rest]
    summary = build_summary(
        scored[base], checkpoints, extra, n_resamples=n_resamples, benchmarks=benchmarks, baseline_name=base
    )
    for name, entry in summary["benchmarks"].items():
        entry.update(described.get(name, {}))
    from_json(summary, str(run_dir.summary_file))  # every key is in the schema (eval/summary_schema.py)
    write_report(summary, run_dir)
    return summary


def log_model(
    logger: MetricLogger,
    summary: dict,
    name: str,
    step: int,
    tables: dict[str, list],
    benchmarks: dict[str, Benchmark],
) -> None:
    """Log one model's metrics (its deltas too, unless it is the baseline), what each benchmark adds
    (``Benchmark.logged``) and its per-item tables.

    Args:
        tables: benchmark -> the model's result records, each with its ``scores`` and ``categories``.
    """
    values = {}
    for bench, table in summary["benchmarks"].items():
        logged = table.get("logged_as", bench)  # a protocol that is not the paper's is logged apart
        values[f"{logged}/n_unjudged"] = table["n_unjudged"]
        for metric, entry in table["metrics"].items():
            point = entry["checkpoints"].get(name)
            values[f"{logged}/{metric}"] = entry["baseline"] if point is None else point["value"]
            if point is not None:
                values[f"{logged}/{metric}/delta"] = point["delta"]
    for bench, table in summary["benchmarks"].items():
        if bench in benchmarks:
            values.update(benchmarks[bench].logged(table, name))
    logger.log(values, step=step)
    for bench, records in tables.items():
        logged = summary["benchmarks"].get(bench, {}).get("logged_as", bench)
        logger.log_table(f"{logged}/samples_{name}", records, step=step)
