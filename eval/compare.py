"""Compare two evaluated models item by item: paired statistics per metric and category.

    python -m eval.compare outputs/base_eval/eval/model outputs/quickstart/eval/checkpoint-1000 \
        --out outputs/compare_base_vs_tuned

Each argument is a model's results directory (``<run_dir>/eval/<model name>/``, one ``<benchmark>.jsonl``
per benchmark, as ``python -m train`` and ``python -m eval`` write them). To compare two models that have
not been evaluated yet, run ``python -m eval`` on each first. The first model plays the baseline: every
delta is second − first over the items both scored, with a paired bootstrap 95% interval and an exact
McNemar test for right/wrong metrics. Writes ``summary.json``, ``report.md`` (with the OVI radar plot)
to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_builders.cli import run_cli
from data_builders.errors import DataError
from eval.evaluator import read_results
from eval.report import write_report
from eval.summary import build_summary


def load_model_results(directory: str | Path) -> dict[str, list[dict]]:
    """Benchmark name → per-sample records from a model's results directory.

    Raises:
        DataError: the directory is missing or holds no results.
    """
    directory = Path(directory)
    results = {p.stem: list(read_results(p).values()) for p in sorted(directory.glob("*.jsonl"))}
    results = {bench: records for bench, records in results.items() if records}
    if not results:
        raise DataError(str(directory), "no per-sample results (<benchmark>.jsonl) found")
    return results


def compare(first: str | Path, second: str | Path, out: str | Path, *, n_resamples: int = 2000) -> dict:
    """Paired comparison of two models' results; writes and returns the summary."""
    first, second = Path(first), Path(second)
    summary = build_summary(
        load_model_results(first),
        [(second.name, 0, load_model_results(second))],
        {"compared": {"first": str(first), "second": str(second)}},
        n_resamples=n_resamples,
    )
    write_report(summary, out)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("first", help="results directory of the reference model (the baseline)")
    parser.add_argument("second", help="results directory of the model compared with it")
    parser.add_argument("--out", required=True, help="directory for summary.json and report.md")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per comparison")
    args = parser.parse_args(argv)

    def work() -> None:
        compare(args.first, args.second, args.out, n_resamples=args.resamples)
        print(f"report: {Path(args.out) / 'report.md'}")

    run_cli(work)


if __name__ == "__main__":
    main(sys.argv[1:])
