"""Score a V2P-Bench response file without running any model.

A released response file is JSONL in the release's row format (``video_id, video_path, duration, question,
answer, source, frame_path, dimension, category``) plus ``response`` (the raw model output) and ``model``.
Several models may share one file; each gets its own columns.

    python -m eval.score_responses responses.jsonl [--json tables.json]

Rows are validated first and every problem is reported at once (line and field); the videos and frames
need not exist. Scoring and categories come from the V2P benchmark (:mod:`eval.benchmarks.v2p`) and the
micro averages from :func:`eval.summary.aggregate`, so the numbers are those ``python -m eval`` reports.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from core.checks import is_number
from core.errors import DataError, DataErrors
from core.files import markdown_table, read_jsonl, write_json_atomic
from core.formats.v2p import DIMENSIONS, parse_options
from eval.benchmarks.shapes import UNKNOWN
from eval.benchmarks.v2p import CATEGORY_ORDER, MEDIUM_MAX_S, SHORT_MAX_S, V2P
from eval.summary import aggregate

DEFAULT_MODEL = "model"  # the column name for rows without a ``model`` field
REQUIRED_FIELDS = ("response", "answer", "question", "dimension", "duration")
_STRING_FIELDS = ("response", "answer", "question", "source", "model")
_MISSING = "–"

# (category key, section title, preferred value order); values not listed follow, sorted.
_SECTIONS: list[tuple[str, str, list[str]]] = [
    ("dimension", "By dimension", list(CATEGORY_ORDER["dimension"])),
    ("duration", "By duration", list(CATEGORY_ORDER["duration"])),
    ("task_group", "By task group (the paper's three tasks)", list(CATEGORY_ORDER["task_group"])),
    ("source", "By source", []),
    ("shape", "By prompt shape (guessed from the question wording)", list(CATEGORY_ORDER["shape"])),
]
_DIMENSION_NAMES = {label: f"{label} {name}" for label, name in DIMENSIONS.values()}
_DURATION_NAMES = {
    "short": f"short (< {SHORT_MAX_S:g} s)",
    "medium": f"medium ({SHORT_MAX_S:g}–{MEDIUM_MAX_S:g} s)",
    "long": f"long (≥ {MEDIUM_MAX_S:g} s)",
}


# ---------------------------------------------------------------------------------------------------
# Loading


def load_response_file(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a V2P response file; the rows come back as parsed, in file order.

    Checked per row: valid JSON object; ``response``, ``answer``, ``question``, ``dimension`` and
    ``duration`` present with the right types; the question has 2–4 option lines; the answer is one of
    their letters; the dimension id is known. ``source`` and ``model`` are optional strings. Media files
    are not looked at.

    Raises:
        DataErrors: listing every problem (``row <line>, field '<name>': ...``), sorted by line.
        DataError: the file is missing or holds no rows.
    """
    path = Path(path)
    problems: list[str] = []
    numbered = read_jsonl(path, problems)
    for number, row in numbered:
        problems += _row_problems(row, number)
    if problems:
        # read_jsonl reports malformed lines before any row check runs; list everything by line instead.
        raise DataErrors(path, sorted(problems, key=_line_of))
    if not numbered:
        raise DataError(str(path), "no rows: expected one JSON object per line")
    return [row for _, row in numbered]


def _row_problems(row: dict[str, Any], number: int) -> list[str]:
    """Every problem of one row, each naming the line and the field."""
    where = f"row {number}"
    problems = [f"{where}, field '{name}': missing" for name in REQUIRED_FIELDS if name not in row]
    for name in _STRING_FIELDS:
        if name in row and not isinstance(row[name], str):
            problems.append(f"{where}, field '{name}': expected a string, got {_json_type(row[name])}")
    problems += _dimension_problems(row, where)
    if "duration" in row and not (is_number(row["duration"]) and row["duration"] > 0):
        wanted = "expected a positive number of seconds"
        problems.append(f"{where}, field 'duration': {wanted}, got {row['duration']!r}")
    if isinstance(row.get("question"), str):
        problems += _option_problems(row, where)
    return problems


def _dimension_problems(row: dict[str, Any], where: str) -> list[str]:
    if "dimension" not in row:
        return []
    value = row["dimension"]
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"{where}, field 'dimension': expected an integer id, got {_json_type(value)}"]
    if value not in DIMENSIONS:
        known = ", ".join(map(str, DIMENSIONS))
        return [f"{where}, field 'dimension': unknown dimension id {value} (known: {known})"]
    return []


def _option_problems(row: dict[str, Any], where: str) -> list[str]:
    """The question must parse into options, and a string answer must be one of their letters."""
    try:
        _, options = parse_options(row["question"])
    except ValueError as err:
        return [f"{where}, field 'question': {err}"]
    letters = [chr(ord("A") + i) for i in range(len(options))]
    answer = row.get("answer")
    if isinstance(answer, str) and answer not in letters:
        return [f"{where}, field 'answer': {answer!r} is not among options {', '.join(letters)}"]
    return []


def _json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _line_of(problem: str) -> int:
    match = re.match(r"row (\d+)", problem)
    return int(match.group(1)) if match else 0


# ---------------------------------------------------------------------------------------------------
# Scoring and tables


def score_responses(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-sample records in the shape ``eval.summary`` takes, one per row (rows from ``load_response_file``).

    Each record is ``{"id", "task": "v2p", "model", "prediction", "meta", "scores", "categories"}``. The id
    is the row's 1-based position (zero-padded): the release's ``video_id`` is not unique per row, and a
    file holding several models repeats every question, so the position is the only safe key.
    """
    return [_scored(row, position) for position, row in enumerate(rows, start=1)]


def _scored(row: dict[str, Any], position: int) -> dict[str, Any]:
    _, options = parse_options(row["question"])
    record: dict[str, Any] = {
        "id": f"{position:06d}",
        "task": "v2p",
        "model": row.get("model", DEFAULT_MODEL),
        "prediction": row["response"],
        # the same meta the release loader gives a sample, so scoring sees what python -m eval sees
        "meta": {
            "answer": row["answer"],
            "options": options,
            "dimension": row["dimension"],
            "category": row.get("category"),
            "duration": float(row["duration"]),
            "source": row.get("source", UNKNOWN),
            "question": row["question"],
            "video_id": None if row.get("video_id") is None else str(row["video_id"]),
        },
    }
    record["scores"] = V2P.score(record["prediction"], record["meta"])
    record["categories"] = V2P.categories(record["meta"])
    return record


def tables(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float | int]]]:
    """Per model (in first-seen order), its metric table from ``eval.summary.aggregate``.

    Returns:
        ``{model: {metric key: {"value": fraction correct, "n": rows}}}`` with keys such as
        ``"accuracy"``, ``"accuracy_tolerant"``, ``"accuracy/dimension/SR"``, ``"accuracy/duration/long"``.
    """
    by_model: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_model.setdefault(record.get("model", DEFAULT_MODEL), []).append(record)
    return {model: aggregate(group) for model, group in by_model.items()}


def render_tables(records: Sequence[dict[str, Any]]) -> str:
    """Markdown: one overall line per model, then accuracy tables overall and per category.

    Percentages have one decimal, rounded half up from the exact count. Each table row gives ``n``, the
    rows behind it (``"22 / 3"`` when models differ), and per model the official and tolerant accuracy.
    """
    per_model = tables(records)
    models = list(per_model)
    lines = [
        "# V2P-Bench response scores",
        "",
        f"{len(records)} responses, {len(models)} model(s). Official: the response's first character is the "
        "answer letter. Tolerant: the first standalone option letter after stripping think blocks and "
        "answer prefixes. Micro averages (correct rows / rows).",
        "",
        *(_overall_line(model, metrics) for model, metrics in per_model.items()),
        "",
        "## Overall",
        "",
        *_accuracy_table("overall", [("all", "")], per_model, models),
        "",
    ]
    for category, title, order in _SECTIONS:
        values = _category_values(category, order, per_model)
        if values:
            rows = [(_value_label(category, value), f"/{category}/{value}") for value in values]
            lines += [f"## {title}", "", *_accuracy_table(category, rows, per_model, models), ""]
    return "\n".join(lines)


def _overall_line(model: str, metrics: dict[str, dict[str, float | int]]) -> str:
    official, tolerant = metrics["accuracy"], metrics["accuracy_tolerant"]
    return (
        f"- Overall {model}: official {_percent(official)}, tolerant {_percent(tolerant)} (n={official['n']})"
    )


def _category_values(category: str, order: list[str], per_model: dict[str, dict[str, Any]]) -> list[str]:
    prefix = f"accuracy/{category}/"
    keys = [key for metrics in per_model.values() for key in metrics]
    present = {key[len(prefix) :] for key in keys if key.startswith(prefix)}
    preferred = [value for value in order if value in present]
    return preferred + sorted(present - set(preferred))


def _value_label(category: str, value: str) -> str:
    if category == "dimension":
        return _DIMENSION_NAMES.get(value, value)
    if category == "duration":
        return _DURATION_NAMES.get(value, value)
    return value


def _accuracy_table(
    title: str, rows: list[tuple[str, str]], per_model: dict[str, dict[str, Any]], models: list[str]
) -> list[str]:
    """A markdown table; ``rows`` are ``(label, metric key suffix)``, e.g. ``("SR …", "/dimension/SR")``."""
    header = [title, "n"] + [f"{model} {rule}" for model in models for rule in ("official", "tolerant")]
    body = []
    for label, suffix in rows:
        cells = [label, _n_cell(f"accuracy{suffix}", per_model, models)]
        for model in models:
            cells.append(_percent(per_model[model].get(f"accuracy{suffix}")))
            cells.append(_percent(per_model[model].get(f"accuracy_tolerant{suffix}")))
        body.append(cells)
    return markdown_table(header, body)


def _n_cell(key: str, per_model: dict[str, dict[str, Any]], models: list[str]) -> str:
    counts = [str(per_model[model][key]["n"]) if key in per_model[model] else "0" for model in models]
    return counts[0] if len(set(counts)) == 1 else " / ".join(counts)


def _percent(metric: dict[str, float | int] | None) -> str:
    """``value`` as a percentage with one decimal, rounded half up.

    Formatting the float directly rounds 1/16 = 6.25 % to "6.2" (binary floats, ties to even); every score
    here is 0 or 1, so the exact count is recovered and rounded as one would by hand.
    """
    if metric is None:
        return _MISSING
    n = int(metric["n"])
    correct = round(float(metric["value"]) * n)
    tenths = math.floor(Fraction(1000 * correct, n) + Fraction(1, 2))
    return f"{tenths // 10}.{tenths % 10}"


# ---------------------------------------------------------------------------------------------------
# Command line


def score_file(path: str | Path, json_out: str | Path | None = None) -> str:
    """Load, validate and score ``path``; write the tables as JSON to ``json_out`` when given.

    Returns:
        The markdown tables (see ``render_tables``).

    Raises:
        DataError: the file is missing, empty, or has bad rows (all listed).
    """
    records = score_responses(load_response_file(path))
    if json_out is not None:
        write_json_atomic(json_out, tables(records), indent=2)
    return render_tables(records)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m eval.score_responses FILE [--json OUT]``: print the tables; exit 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m eval.score_responses",
        description="Score a V2P-Bench response file (release rows plus 'response' and 'model').",
    )
    parser.add_argument("file", type=Path, help="the response file (JSONL)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the tables as JSON to OUT")
    args = parser.parse_args(argv)
    try:
        markdown = score_file(args.file, args.json)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown, end="")
    if args.json:
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
