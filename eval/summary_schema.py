"""``summary.json``, typed: every key the summary holds, what it means, and its type.

``eval.summary.build_summary`` builds a :class:`Summary`; ``summary.json`` is its JSON form
(:func:`to_json`, where an optional key that does not apply is left out) and :func:`from_json` reads one
back, so a file that does not fit fails naming the key. The reference of ``summary.json`` in
docs/evaluation.md is generated from the field docs here (:func:`schema_markdown`)::

    python -m eval.summary_schema --write docs/evaluation.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.rundir import BASELINE


def _doc(text: str, default: Any = dataclasses.MISSING, **kwargs) -> Any:
    """A field with its meaning; ``default`` None marks a key left out where it does not apply."""
    if default is dataclasses.MISSING and "default_factory" not in kwargs:
        return field(metadata={"doc": text}, **kwargs)
    return field(default=default, metadata={"doc": text}, **kwargs)


@dataclass
class ModelRef:
    """A model of the run: the reference (``baseline``) or a checkpoint."""

    name: str = _doc("``baseline`` (the untuned model), ``checkpoint-N``, or a standalone run's own name")
    step: int = _doc("its training step (0 for the reference)")


@dataclass
class Comparison:
    """One model's value of one metric key, and its difference from the reference."""

    step: int = _doc("the model's training step")
    value: float | None = _doc("its mean over the items it scored (as the benchmark's ``aggregation`` says)")
    n: int = _doc("items it scored under this key")
    n_paired: int = _doc("items both it and the reference scored (the ones the delta is over)")
    delta: float | None = _doc("value − reference over the paired items (null: none paired)")
    delta_ci95: list[float] | None = _doc("paired bootstrap 95% percentile interval of ``delta``")
    mcnemar_p: float | None = _doc("exact McNemar test on the paired items (null for graded metrics)")


@dataclass
class MetricEntry:
    """One metric key (``accuracy``, or ``accuracy/<category>/<value>``) of one benchmark."""

    baseline: float | None = _doc("the reference's mean (null: it scored no item under this key)")
    n: int = _doc("items the reference scored under this key")
    checkpoints: dict[str, Comparison] = _doc("each other model's value, by name")


@dataclass
class Counts:
    """How many items a model's results hold, and what a judge left unscored."""

    n_items: int = _doc("items with a current result")
    n_unjudged: int = _doc("judged metrics the judge gave no reply for, summed over items (never averaged)")
    n_unjudged_items: int = _doc("items with at least one judged metric without a reply")
    n_zero: int = _doc("judged metrics scored 0 for an N/A, sub-1 or scoreless reply (the paper's zeros)", 0)
    n_simulated: int | None = _doc("items answered by the OVIBench interruption simulation", None)
    n_answer_finished: int | None = _doc("simulated answers that ended before their interruption", None)


@dataclass
class BenchmarkEntry(Counts):
    """One benchmark: the reference's counts, each model's, and every metric key (plus how its numbers
    were made)."""

    checkpoints: dict[str, Counts] = _doc("each other model's counts, by name", default_factory=dict)
    metrics: dict[str, MetricEntry] = _doc("every metric key, overall keys first", default_factory=dict)
    aggregation: str | None = _doc("how overall values are taken when not a plain mean over items", None)
    version: int | None = _doc("the benchmark's version: predictions made under another are made again", None)
    settings: dict[str, Any] | None = _doc("the settings that change its predictions", None)
    protocol: str | None = _doc(
        "how OVIBench's open-ended items were answered (the paper's or a proxy)", None
    )
    logged_as: str | None = _doc("its W&B key prefix, when not its name (a protocol not the paper's)", None)
    phrasings: dict[str, Any] | None = _doc("the phrase banks a set we built was worded from", None)
    reconstructed: dict[str, str] | None = _doc(
        "metrics under a paper's name that are our reconstruction, not its definition, and why", None
    )
    reward: str | None = _doc("what reward accuracy and margin of held-out pairs are measured against", None)
    derived: dict[str, Any] | None = _doc(
        "a derived benchmark's account of its items (left out, skipped)", None
    )
    not_comparable: dict[str, str] | None = _doc("models whose results were made under other settings", None)
    not_scored: str | None = _doc("why the run's models could not be scored on it (a served model)", None)


@dataclass
class Summary:
    """``summary.json``: every model evaluated in a run against the first (the reference)."""

    baseline: ModelRef = _doc("the reference every delta is measured against")
    checkpoints: list[ModelRef] = _doc("the other models, in training order")
    benchmarks: dict[str, BenchmarkEntry] = _doc("each benchmark's entry, by name")
    media_spec: dict[str, Any] | None = _doc(
        "the media spec every frame was sampled with, and its fingerprint", None
    )
    generation: dict[str, Any] | None = _doc("how answers were generated, over every benchmark", None)
    quarantine: dict[str, dict[str, int]] | None = _doc("items left out (undecodable media), by reason", None)
    judge: str | dict[str, Any] | None = _doc("what judged open-ended items (or that none did)", None)
    training: dict[str, Any] | None = _doc(
        "a training run's logged curves (``steps``: each window's last step; ``curves``: loss, and under "
        "GRPO reward, kl and each ``rewards/<name>/mean``), averaged over up to 10 windows of steps",
        None,
    )
    compared: dict[str, str] | None = _doc("``python -m eval compare``: the two results directories", None)
    reference: str | None = _doc("``python -m eval compare``: the first model's label", None)
    not_comparable: list[str] | None = _doc(
        "``compare --allow-mismatch``: what differs between the two", None
    )


def reference_name(summary: dict[str, Any]) -> str:
    """The model every delta of a summary (its JSON form) is measured against: a training run's untuned
    ``baseline``, a standalone run's model, or the first of two runs compared (``python -m eval compare``)."""
    return summary.get("reference") or summary.get("baseline", {}).get("name", BASELINE)


def to_json(value: Any) -> Any:
    """The JSON form: dataclasses as objects in field order, optional keys that do not apply left out."""
    if dataclasses.is_dataclass(value):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.default is None:
                continue
            out[f.name] = to_json(item)
        return out
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    return value


def from_json(data: dict[str, Any], where: str = "summary.json") -> Summary:
    """A summary read back, typed.

    Raises:
        DataError: a key that is not in the schema, or a required one missing, named with its path.
    """
    return _read(Summary, data, where)


def _read(schema: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if dataclasses.is_dataclass(schema):
        if not isinstance(value, dict):
            raise DataError(path, f"expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(schema)
        unknown = sorted(set(value) - set(hints))
        if unknown:
            raise DataError(path, f"unknown key(s) {unknown} (known: {', '.join(hints)})")
        fields = {}
        for f in dataclasses.fields(schema):
            if f.name in value:
                fields[f.name] = _read(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DataError(path, f"key {f.name!r} missing")
        return schema(**fields)
    if origin is dict and value is not None:
        return {key: _read(args[1], item, f"{path}.{key}") for key, item in value.items()}
    if origin is list and value is not None:
        return [_read(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if args and type(None) in args and value is not None:  # X | None
        inner = [a for a in args if a is not type(None)]
        return _read(inner[0], value, path) if len(inner) == 1 else value
    return value


# ---------------------------------------------------------------------------------------------------
# The reference in docs/evaluation.md

MARKER_START = "<!-- summary-schema: generated from eval/summary_schema.py; do not edit by hand -->"
MARKER_END = "<!-- end of the generated summary-schema -->"


def schema_markdown() -> str:
    """The table of every key of ``summary.json``: its path, type and meaning."""
    lines = [
        "| key | type | meaning |",
        "|---|---|---|",
    ]
    lines += _rows(Summary, "")
    lines += [
        "",
        "`<benchmark>`, `<model>`, `<metric key>`: a benchmark's name, a model's name, a metric key "
        "(`accuracy`, `accuracy/dimension/OA`). A key marked *optional* is left out where it does not apply.",
    ]
    return "\n".join(lines)


_PLACEHOLDERS = {"benchmarks": "<benchmark>", "checkpoints": "<model>", "metrics": "<metric key>"}


def _rows(schema: type, prefix: str) -> list[str]:
    rows = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        path = f"{prefix}{f.name}"
        hint = hints[f.name]
        optional = f.default is None
        meaning = f.metadata["doc"].replace("``", "`") + (" (*optional*)" if optional else "")
        rows.append(f"| `{path}` | {_type_name(hint)} | {meaning} |")
        inner = _dataclass_inside(hint)
        if inner is not None:
            below = f"{path}.{_PLACEHOLDERS[f.name]}." if typing.get_origin(hint) is dict else f"{path}[]."
            if dataclasses.is_dataclass(hint):
                below = f"{path}."
            rows += _rows(inner, below)
    return rows


def _dataclass_inside(hint: Any) -> type | None:
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return "object"
    if origin is dict:
        return f"object of {_type_name(args[1])}"
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if args and type(None) in args:
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin is not None and args:
        return " or ".join(_type_name(a) for a in args)
    return {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any"}.get(hint, str(hint))


def write_reference(doc: Path) -> None:
    """Replace the generated part of ``doc`` (between the markers) with :func:`schema_markdown`."""
    text = doc.read_text()
    start, end = text.index(MARKER_START) + len(MARKER_START), text.index(MARKER_END)
    doc.write_text(f"{text[:start]}\n\n{schema_markdown()}\n\n{text[end:]}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Print (or --write into a doc) the summary.json reference.")
    parser.add_argument("--write", type=Path, help="the markdown file whose generated part is replaced")
    args = parser.parse_args(argv)
    if args.write:
        write_reference(args.write)
    else:
        print(schema_markdown())


if __name__ == "__main__":
    main(sys.argv[1:])
