"""Render ``summary.json`` (see ``eval.summary.build_summary``) as a markdown report, and write both.

Rates (0/1 metrics) are percentages with one decimal and their deltas percentage points; the 1–10 judge
scores (TFS, VES, CFS, CCS) are plain means with two decimals and their deltas score points. Deltas carry
a sign and the paired 95% bootstrap interval. Per benchmark the report shows a headline table of the
overall metrics for every checkpoint, then per-category tables comparing the baseline with the last
checkpoint, and for OVIBench a radar plot per interruption type (``eval.radar``) when matplotlib is
installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.files import markdown_table, write_text_atomic
from core.rundir import BASELINE, RunDir
from eval.benchmarks import BENCHMARKS
from eval.rubrics import METRICS as JUDGED_METRICS
from eval.summary import is_graded
from eval.summary_schema import reference_name

# Top-level summary keys rendered elsewhere than in the settings list.
_STRUCTURAL_KEYS = (
    "training",
    "baseline",
    "checkpoints",
    "benchmarks",
    "quarantine",
    "reference",
    "not_comparable",
)
_MISSING = "–"


def render_report(summary: dict[str, Any], figures: dict[str, list[str]] | None = None) -> str:
    """The markdown report for one run's summary.

    Args:
        summary: the content of ``summary.json``.
        figures: benchmark -> the lines that show its plots (``Benchmark.figures``), at the end of its
            section.
    """
    lines = ["# Evaluation report", "", _checkpoint_line(summary), ""]
    for why in summary.get("not_comparable", []):
        lines += [f"**NOT COMPARABLE: the two models were evaluated under different settings: {why}**", ""]
    lines += _settings_section(summary)
    lines += _diagnostics_section(summary)
    for benchmark, entry in summary["benchmarks"].items():
        lines += _benchmark_section(summary, benchmark, entry, (figures or {}).get(benchmark, []))
    lines += _training_section(summary.get("training"))
    return "\n".join(lines).rstrip() + "\n"


def write_report(summary: dict[str, Any], run_dir: RunDir) -> tuple[Path, Path]:
    """Write ``summary.json``, each benchmark's plots (``Benchmark.figures``: the OVIBench radar) and
    ``report.md`` into ``run_dir``, each atomically.

    Returns:
        ``(summary_path, report_path)``.
    """
    write_text_atomic(run_dir.summary_file, json.dumps(summary, indent=2) + "\n")
    figures = {
        bench: BENCHMARKS[bench].figures(summary, run_dir.path)
        for bench in summary["benchmarks"]
        if bench in BENCHMARKS
    }
    write_text_atomic(run_dir.report_file, render_report(summary, figures))
    return run_dir.summary_file, run_dir.report_file


# ---------------------------------------------------------------------------------------------------
# Sections


def _reference_header(summary: dict[str, Any]) -> str:
    name = reference_name(summary)
    return "Baseline" if name == BASELINE and "reference" not in summary else name


def _checkpoint_line(summary: dict[str, Any]) -> str:
    checkpoints = summary.get("checkpoints", [])
    reference = reference_name(summary)
    listed = ", ".join(f"{c['name']} (step {c['step']})" for c in checkpoints)
    if "reference" in summary:
        others = ", ".join(c["name"] for c in checkpoints)
        return (
            f"{reference} (reference) vs {others}: every Δ is the second model minus the "
            "reference, over the items both scored."
        )
    if reference != BASELINE:  # a standalone evaluation: no untuned model in this run
        if not checkpoints:
            return (
                f"One model evaluated: {reference}. Deltas need a second run: `python -m eval compare "
                "RESULTS_A RESULTS_B` pairs two runs made with the same settings."
            )
        return f"{reference} (first model evaluated here) vs {listed}."
    if not checkpoints:
        return "Baseline only: no checkpoints evaluated yet."
    return f"Baseline (untuned) vs {len(checkpoints)} checkpoint(s): {listed}."


def _settings_section(summary: dict[str, Any]) -> list[str]:
    settings = {key: value for key, value in summary.items() if key not in _STRUCTURAL_KEYS}
    if not settings:
        return []
    lines = ["## Run settings", ""]
    for key, value in settings.items():
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        lines.append(f"- **{key}**: `{shown}`")
    return lines + [""]


def _diagnostics_section(summary: dict[str, Any]) -> list[str]:
    """One line per benchmark that has one (``Benchmark.report_lines``: the V2P hack diagnostics): its
    numbers, reference → last checkpoint, and what they mean."""
    last = summary["checkpoints"][-1]["name"] if summary.get("checkpoints") else None
    models = (reference_name(summary), last)
    lines = []
    for bench, entry in summary["benchmarks"].items():
        if bench in BENCHMARKS:
            lines += BENCHMARKS[bench].report_lines(entry, models)
    if not lines:
        return []
    intro = (
        f"Values: {models[0]}{f' → {last}' if last else ''}, official first-character rule (tolerant "
        "extraction in the tables below); each diagnostic is our reconstruction of the paper's analysis "
        "(no code was released)."
    )
    return ["## Diagnostics", "", intro, "", *lines, ""]


def _benchmark_section(
    summary: dict[str, Any], benchmark: str, entry: dict[str, Any], figures: list[str]
) -> list[str]:
    title = BENCHMARKS[benchmark].title if benchmark in BENCHMARKS else benchmark

    def graded(key: str) -> bool:
        return is_graded(benchmark, key)

    names = [c["name"] for c in summary.get("checkpoints", []) if _has_checkpoint(entry, c["name"])]
    lines = [f"## {title} (`{benchmark}`)", "", _status_line(summary, benchmark, entry, names), ""]
    overall = {key: metric for key, metric in entry["metrics"].items() if "/" not in key}
    reference, header = reference_name(summary), _reference_header(summary)
    lines += _headline_table(overall, names, header, graded)
    reconstructed = {m: why for m, why in (entry.get("reconstructed") or {}).items() if m in overall}
    lines += [f"- `{metric}` is not the paper's: {why}" for metric, why in reconstructed.items()]
    lines += [""] if reconstructed else []
    order = BENCHMARKS[benchmark].category_order if benchmark in BENCHMARKS else {}
    last = names[-1] if names else None
    lines += _category_tables(entry["metrics"], last, reference, header, order, graded)
    return lines + figures


def _counts_by_model(summary: dict[str, Any], entry: dict[str, Any], names: list[str], count: str) -> dict:
    """One of the entry's counts for the reference and the last checkpoint, by model name."""
    counts = {reference_name(summary): entry.get(count, 0)}
    if names:
        counts[names[-1]] = entry.get("checkpoints", {}).get(names[-1], {}).get(count, 0)
    return counts


def _status_line(summary: dict[str, Any], benchmark: str, entry: dict[str, Any], names: list[str]) -> str:
    parts = [f"{entry['n_items']} items"]
    quarantined = summary.get("quarantine", {}).get(benchmark) or {}
    if quarantined:
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(quarantined.items()))
        parts.append(f"quarantined: {sum(quarantined.values())} ({reasons})")
    unjudged = _counts_by_model(summary, entry, names, "n_unjudged")
    judge = summary.get("judge")
    if any(unjudged.values()):
        counts = ", ".join(f"{name} {count}" for name, count in unjudged.items())
        why = "not judged (no judge)" if isinstance(judge, str) else "with no reply from the judge"
        parts.append(f"judged metrics {why}: {counts} (excluded from every mean)")
    zeros = _counts_by_model(summary, entry, names, "n_zero")
    if any(zeros.values()):
        counts = ", ".join(f"{name} {count}" for name, count in zeros.items())
        parts.append(
            f"judged metrics scored 0 for an N/A, sub-1 or scoreless reply: {counts} (as the paper counts)"
        )
    if judge and (any(unjudged.values()) or any(_is_judged(key) for key in entry["metrics"])):
        parts.append(f"judge: {judge['identity'] if isinstance(judge, dict) else judge}")
    if entry.get("n_simulated"):
        parts.append(
            f"{entry['n_simulated']} simulated ({entry['n_answer_finished']} answers ended before their "
            f"interruption, {reference_name(summary)})"
        )
    if entry.get("not_scored"):
        parts.append(f"**NOT SCORED: {entry['not_scored']}**")
    for note in ("protocol", "reward"):
        if entry.get(note):
            parts.append(f"{note}: {entry[note]}")
    if entry.get("aggregation"):
        parts.append(f"overall values: {entry['aggregation']}")
    for why in entry.get("not_comparable", {}).values():
        parts.append(f"**NOT COMPARABLE: {why}**")
    return " · ".join(parts)


def _ten_point(key: str) -> bool:
    """Whether a graded metric is one of the judge's 1–10 scores (else a mean of its own, a margin)."""
    metric = JUDGED_METRICS.get(key.split("/", 1)[0])
    return metric is not None and tuple(metric.scale) == (1, 10)


def _is_judged(key: str) -> bool:
    return key.split("/", 1)[0] in JUDGED_METRICS


def _has_checkpoint(entry: dict[str, Any], name: str) -> bool:
    return any(name in metric["checkpoints"] for metric in entry["metrics"].values())


def _headline_table(
    overall: dict[str, Any], names: list[str], reference: str, graded: Callable[[str], bool]
) -> list[str]:
    if not overall:
        return ["No scored items.", ""]
    header = ["Metric", "n", reference, *names]
    if names:
        header += [f"Δ {names[-1]} [95% CI]", "McNemar p"]
    rows = []
    for key, metric in overall.items():
        label = f"{key} ({'1–10' if _ten_point(key) else 'mean'})" if graded(key) else key
        row = [label, str(metric["n"]), _value(graded(key), metric["baseline"])]
        row += [_value(graded(key), _checkpoint_value(metric, name)) for name in names]
        if names:
            row += _delta_cells(graded(key), metric["checkpoints"].get(names[-1]))
        rows.append(row)
    lines = ["### Overall", "", *markdown_table(header, rows), ""]
    means = [key for key in overall if graded(key)]
    if means:
        lines += [
            f"Rates are percentages (Δ in points); {', '.join(means)} are means on their own scale (the "
            "judge's 1–10 scores; Δ in score points, no McNemar test).",
            "",
        ]
    return lines


def _category_tables(
    metrics: dict[str, Any],
    last: str | None,
    reference: str,
    header: str,
    order: dict[str, tuple[str, ...]],
    graded: Callable[[str], bool],
) -> list[str]:
    """One table per (metric, category): ``reference`` alone, or against ``last`` with the delta;
    tolerant variants are in the headline only."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for key, metric in metrics.items():
        if "/" not in key:
            continue
        name, category, value = key.split("/", 2)
        if not name.endswith("_tolerant"):
            grouped.setdefault((name, category), {})[value] = metric
    lines: list[str] = []
    for (name, category), by_value in grouped.items():
        if len(by_value) < 2:
            continue  # one value holds every item: the table would repeat the headline
        columns = [category, "n", header]
        if last:
            columns += [last, "Δ [95% CI]", "McNemar p"]
        rows = []
        for value in _ordered_values(order.get(category, ()), by_value):
            metric = by_value[value]
            row = [value, str(metric["n"]), _value(graded(name), metric["baseline"])]
            if last:
                row += [_value(graded(name), _checkpoint_value(metric, last))]
                row += _delta_cells(graded(name), metric["checkpoints"].get(last))
            rows.append(row)
        scale = f" (mean{', 1–10' if _ten_point(name) else ''})" if graded(name) else ""
        compared = f"{reference} vs {last}" if last else reference
        lines += [f"### {name}{scale} by {category} ({compared})", "", *markdown_table(columns, rows), ""]
    return lines


def _ordered_values(order: tuple[str, ...], by_value: dict[str, Any]) -> list[str]:
    preferred = [value for value in order if value in by_value]
    return preferred + sorted(value for value in by_value if value not in preferred)


# ---------------------------------------------------------------------------------------------------
# Cells


def _checkpoint_value(metric: dict[str, Any], name: str) -> float | None:
    result = metric["checkpoints"].get(name)
    return None if result is None else result["value"]


def _delta_cells(graded: bool, result: dict[str, Any] | None) -> list[str]:
    if result is None or result.get("delta") is None:
        return [_MISSING, _MISSING]
    low, high = result["delta_ci95"]
    delta = _score_delta if graded else _points
    interval = f"{delta(result['delta'])} [{delta(low)}, {delta(high)}]"
    return [interval, _p_value(result["mcnemar_p"])]


def _value(graded: bool, value: float | None) -> str:
    """A rate as a percentage, a mean on its own scale (a 1–10 judge score) as it is."""
    if value is None:
        return _MISSING
    return f"{_round(value, 2):.2f}" if graded else _percent(value)


def _percent(value: float | None) -> str:
    return _MISSING if value is None else f"{_round(value * 100, 1):.1f}"


def _points(value: float) -> str:
    return f"{_round(value * 100, 1):+.1f}"


def _score_delta(value: float) -> str:
    return f"{_round(value, 2):+.2f}"


def _round(value: float, digits: int) -> float:
    # Adding 0.0 turns the -0.0 that rounding a tiny negative gives into 0.0, so no "-0.0" is printed.
    return round(value, digits) + 0.0


def _p_value(p: float | None) -> str:
    if p is None:
        return _MISSING
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _training_section(training: dict[str, Any] | None) -> list[str]:
    """The training's curves (eval.training_curves): one row per window of steps, one column per curve."""
    if not training:
        return []
    names = list(training["curves"])
    lines = [
        "## Training",
        "",
        "What the trainer logged: each value the mean over the steps after the row above, to the one shown.",
        "",
        "| step | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for row, step in enumerate(training["steps"]):
        cells = [training["curves"][name][row] for name in names]
        lines.append(f"| {step} | " + " | ".join("" if v is None else f"{v:.3f}" for v in cells) + " |")
    return lines + [""]
