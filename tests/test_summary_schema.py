"""``summary.json`` typed (eval/summary_schema.py): what build_summary writes fits the schema, a key outside
it fails naming its path, and docs/evaluation.md's reference is the one the schema generates."""

from __future__ import annotations

import pytest
from paths import REPO

from core.errors import DataError
from eval.summary import build_summary
from eval.summary_schema import MARKER_END, MARKER_START, Summary, from_json, schema_markdown, to_json


def _records(correct: list[int], kind: str = "Correction") -> list[dict]:
    return [
        {"id": f"i{i}", "scores": {"ma": float(c)}, "categories": {"type": kind}}
        for i, c in enumerate(correct)
    ]


def test_a_built_summary_fits_the_schema_and_reads_back_the_same():
    summary = build_summary(
        {"ovi": _records([0, 1, 0, 1])},
        [("checkpoint-2", 2, {"ovi": _records([1, 1, 0, 1])})],
        {"judge": "not configured", "quarantine": {"ovi": {}}},
        n_resamples=50,
    )
    typed = from_json(summary)
    assert isinstance(typed, Summary) and typed.checkpoints[0].name == "checkpoint-2"
    entry = typed.benchmarks["ovi"]
    assert entry.metrics["ma"].checkpoints["checkpoint-2"].delta == pytest.approx(0.25)
    assert to_json(typed) == summary  # nothing lost, nothing added (optional keys that do not apply stay out)
    assert "n_simulated" not in summary["benchmarks"]["ovi"] and "version" not in summary["benchmarks"]["ovi"]


def test_a_key_outside_the_schema_or_a_missing_one_is_named():
    summary = build_summary({"v2p": _records([1])}, [], n_resamples=10)
    summary["benchmarks"]["v2p"]["protocl"] = "typo"
    with pytest.raises(DataError, match=r"summary.json.benchmarks.v2p: unknown key\(s\) \['protocl'\]"):
        from_json(summary)
    del summary["benchmarks"]["v2p"]["protocl"]
    del summary["baseline"]["step"]
    with pytest.raises(DataError, match="summary.json.baseline: key 'step' missing"):
        from_json(summary)


def test_the_documented_reference_is_the_generated_one():
    """docs/evaluation.md's table of every summary.json key is the schema's own (regenerate it with
    ``python -m eval.summary_schema --write docs/evaluation.md``)."""
    doc = (REPO / "docs" / "evaluation.md").read_text()
    generated = doc[doc.index(MARKER_START) + len(MARKER_START) : doc.index(MARKER_END)].strip()
    assert generated == schema_markdown()
