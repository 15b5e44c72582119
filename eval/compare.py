"""Compare two evaluated models item by item: paired statistics per metric and category.

    python -m eval compare outputs/base_eval/eval/model outputs/quickstart/eval/checkpoint-1000 \
        --out outputs/compare_base_vs_tuned        # or: python -m eval.compare ...

Each argument is a model's results directory (``<run_dir>/eval/<model name>/``, one ``<benchmark>.jsonl``
per benchmark, as ``python -m train`` and ``python -m eval`` write them). To compare two models that have
not been evaluated yet, run ``python -m eval`` on each first. The first model plays the baseline: every
delta is second − first over the items both scored, with a paired bootstrap 95% interval and an exact
McNemar test for right/wrong metrics. Writes ``summary.json``, ``report.md`` (with the OVI radar plot)
to ``--out``, where the first model is named the reference (by its results directory), and logs the
metrics with their deltas and a table of paired per-sample predictions per benchmark to W&B (offline
without ``WANDB_API_KEY``; ``--wandb disabled`` turns it off).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from core.cli import run_cli
from core.errors import DataError
from core.files import JsonlStore
from core.metric_logging import MetricLogger, NullLogger, make_logger
from core.rundir import RunDir
from eval.benchmarks import BENCHMARKS
from eval.report import write_report
from eval.scored import ANY_JUDGE, scored_records
from eval.summary import build_summary

WANDB_MODES = ("auto", "online", "offline", "disabled")


def load_model_results(directory: str | Path) -> dict[str, list[dict]]:
    """Benchmark name → per-sample records from a model's results directory (the last line per item).

    Raises:
        DataError: the directory is missing, holds no results, or results of an unknown benchmark.
    """
    directory = Path(directory)
    results = {p.stem: list(JsonlStore(p).read().values()) for p in sorted(directory.glob("*.jsonl"))}
    results = {bench: records for bench, records in results.items() if records}
    if not results:
        raise DataError(str(directory), "no per-sample results (<benchmark>.jsonl) found")
    unknown = [bench for bench in results if bench not in BENCHMARKS]
    if unknown:
        raise DataError(
            str(directory), f"results of unknown benchmarks {unknown} (known: {', '.join(BENCHMARKS)})"
        )
    return results


# What may differ between two models compared: the chat format is the family's own; the judge is
# compared by what judged the records (``judge_mismatches``), since a model judged by none has nothing
# judged to compare.
_MAY_DIFFER = ("chat_format", "setting", "judge")


def mismatches(first: Path, second: Path, results: list[dict[str, list[dict]]] | None = None) -> list[str]:
    """What the two models' predictions were made under differently, per benchmark both evaluated: a
    benchmark version, generation settings, the OVI protocol, the media spec, the dtype, or (given their
    ``results``) the judge of their judged metrics. Chat formats may differ (two families compared).
    Results without a record of their settings (older runs) are named."""
    made_with = [_settings(directory) for directory in (first, second)]
    if not all(made_with):
        missing = [str(d) for d, found in zip((first, second), made_with, strict=True) if not found]
        return [f"no record of the settings of {', '.join(missing)} (evaluated before they were kept)"]
    found = []
    for bench in sorted(made_with[0].keys() & made_with[1].keys()):
        a, b = made_with[0][bench], made_with[1][bench]
        for key in sorted((a.keys() | b.keys()) - set(_MAY_DIFFER)):
            if a.get(key) != b.get(key):
                found.append(f"{bench}: {key} {a.get(key)!r} vs {b.get(key)!r}")
    if results is not None:
        found += judge_mismatches(*results)
    return found


def judges_of(records: list[dict]) -> set[str]:
    """Every judge (identity and rubric version) that scored a metric of these records."""
    return {
        f"{judgement.get('judge')} (rubric {judgement.get('rubric_version')})"
        for record in records
        for judgement in (record.get("judgements") or {}).values()
        if judgement.get("score") is not None
    }


def judge_mismatches(first: dict[str, list[dict]], second: dict[str, list[dict]]) -> list[str]:
    """Benchmarks whose judged metrics were scored by different judges (or rubric versions) in the two
    results: judges differ from each other by points (OVIBench Table 1), so such deltas measure the
    judges. A side judged by none has no judged metric to pair and is no mismatch."""
    found = []
    for bench in sorted(first.keys() & second.keys()):
        a, b = judges_of(first[bench]), judges_of(second[bench])
        if a and b and a != b:
            found.append(f"{bench}: judge {sorted(a)} vs {sorted(b)}")
    return found


def _settings(directory: Path) -> dict | None:
    path = directory / "settings.json"
    return json.loads(path.read_text()) if path.exists() else None


def scored(results: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Records scored afresh; judged metrics as their records' judge scored them."""
    return {
        bench: scored_records(BENCHMARKS[bench], records, ANY_JUDGE) for bench, records in results.items()
    }


def _judges(results: list[dict[str, list[dict]]], labels: list[str]) -> dict[str, Any] | str:
    """The summary's ``judge`` entry: what judged the records, per model and judged benchmark."""
    of_models = {
        label: {
            bench: sorted(judges) for bench, records in of_model.items() if (judges := judges_of(records))
        }
        for label, of_model in zip(labels, results, strict=True)
    }
    every = sorted(
        {judge for of_model in of_models.values() for names in of_model.values() for judge in names}
    )
    if not every:
        return "none (no judged records)"
    return {"identity": "; ".join(every), "models": of_models}


def model_label(directory: Path) -> str:
    """A results directory's name in reports: ``<run>/<model>`` for a run directory's model results."""
    directory = directory.resolve()
    run_dir = RunDir(directory.parents[1]) if len(directory.parents) > 1 else None
    if run_dir and run_dir.eval_dir == directory.parent:
        return f"{run_dir.path.name}/{directory.name}"
    return directory.name


def compare(
    first: str | Path,
    second: str | Path,
    out: str | Path,
    *,
    n_resamples: int = 2000,
    logger: MetricLogger | None = None,
    allow_mismatch: bool = False,
) -> dict:
    """Paired comparison of two models' results; writes and returns the summary, logs to ``logger``.

    Raises:
        DataError: the two were evaluated under different settings (``mismatches``), unless
            ``allow_mismatch``: the summary and report then say so in bold.
    """
    first, second = Path(first), Path(second)
    results = [load_model_results(first), load_model_results(second)]
    different = mismatches(first, second, results)
    if different and not allow_mismatch:
        listed = "\n  ".join(different)
        raise DataError(
            str(second),
            f"not comparable with {first}:\n  {listed}\n(evaluate both under the same settings, or pass "
            "--allow-mismatch to compare anyway, flagged in every output)",
        )
    labels = [model_label(first), model_label(second)]
    if labels[0] == labels[1]:
        labels = [f"{labels[0]} (first)", f"{labels[1]} (second)"]
    rows = [scored(results[0]), scored(results[1])]
    summary = build_summary(
        rows[0],
        [(labels[1], 0, rows[1])],
        {
            "compared": {"first": str(first), "second": str(second)},
            "reference": labels[0],
            "judge": _judges(results, labels),
            **({"not_comparable": different} if different else {}),
        },
        n_resamples=n_resamples,
    )
    write_report(summary, RunDir(out))
    tables = [{b: _with_scores(records, rows[i][b]) for b, records in results[i].items()} for i in (0, 1)]
    log_comparison(logger or NullLogger(), summary, labels, tables)
    return summary


def _with_scores(records: list[dict], rows: list[dict]) -> list[dict]:
    return [{**record, **row} for record, row in zip(records, rows, strict=True)]


def paired_rows(first: list[dict], second: list[dict]) -> tuple[list[str], list[list]]:
    """One row per item either model answered: both predictions and both scores side by side."""
    by_id = [{r["id"]: r for r in records} for records in (first, second)]
    ids = list(by_id[0]) + [i for i in by_id[1] if i not in by_id[0]]
    columns = ["id", "first_prediction", "second_prediction", "first_scores", "second_scores", "categories"]
    rows = []
    for item in ids:
        a, b = by_id[0].get(item, {}), by_id[1].get(item, {})
        categories = a.get("categories") or b.get("categories") or {}
        rows.append(
            [
                item,
                a.get("prediction"),
                b.get("prediction"),
                json.dumps(a.get("scores"), sort_keys=True),
                json.dumps(b.get("scores"), sort_keys=True),
                json.dumps(categories, sort_keys=True),
            ]
        )
    return columns, rows


def log_comparison(
    logger: MetricLogger, summary: dict, labels: list[str], results: list[dict[str, list[dict]]]
) -> None:
    """Every metric of both models with its delta and interval, and the paired per-sample tables."""
    values = {}
    for bench, table in summary["benchmarks"].items():
        for metric, entry in table["metrics"].items():
            point = entry["checkpoints"].get(labels[1]) or {}
            values[f"{bench}/{metric}/first"] = entry["baseline"]
            values[f"{bench}/{metric}/second"] = point.get("value")
            values[f"{bench}/{metric}/delta"] = point.get("delta")
            low, high = point.get("delta_ci95") or (None, None)
            values[f"{bench}/{metric}/delta_ci95_low"] = low
            values[f"{bench}/{metric}/delta_ci95_high"] = high
    logger.log({key: value for key, value in values.items() if value is not None}, step=0)
    for bench in summary["benchmarks"]:
        columns, rows = paired_rows(results[0].get(bench, []), results[1].get(bench, []))
        logger.log_rows(f"{bench}/paired_samples", columns, rows, step=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m eval compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("first", help="results directory of the reference model (e.g. the untuned baseline)")
    parser.add_argument("second", help="results directory of the model compared with it")
    parser.add_argument("--out", required=True, help="directory for summary.json and report.md")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per comparison")
    parser.add_argument("--wandb", choices=WANDB_MODES, default="auto", help="auto: online with a key")
    parser.add_argument("--project", default="vlm-interact", help="W&B project")
    parser.add_argument(
        "--allow-mismatch", action="store_true", help="compare models evaluated under different settings"
    )
    args = parser.parse_args(argv)

    def work() -> None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        config = {"first": args.first, "second": args.second, "resamples": args.resamples}
        enabled = args.wandb != "disabled"
        logger = make_logger(enabled, args.wandb, args.project, None, out, f"compare-{out.name}", config)
        try:
            compare(
                args.first,
                args.second,
                out,
                n_resamples=args.resamples,
                logger=logger,
                allow_mismatch=args.allow_mismatch,
            )
        finally:
            logger.finish()
        print(f"report: {out / 'report.md'}")

    run_cli(work)


if __name__ == "__main__":
    main(sys.argv[1:])
