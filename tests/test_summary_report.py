"""Metric tables, summary.json and report.md on a small fixture computed by hand."""

from __future__ import annotations

import json

import pytest

from eval.report import render_report, write_report
from eval.summary import aggregate, best_checkpoint, build_summary

# (id, dimension, duration bucket, official correct, tolerant correct)
BASELINE_V2P = [
    ("v1", "OA", "short", 1, 1),
    ("v2", "OA", "short", 0, 1),
    ("v3", "OA", "long", 0, 0),
    ("v4", "HA", "short", 1, 1),
    ("v5", "HA", "medium", 1, 1),
    ("v6", "FT", "long", 0, 0),
]


def _v2p(rows: list[tuple[str, str, str, int, int]]) -> list[dict]:
    return [
        {
            "id": item_id,
            "scores": {"accuracy": float(correct), "accuracy_tolerant": float(tolerant)},
            "categories": {"dimension": dim, "duration": bucket},
        }
        for item_id, dim, bucket, correct, tolerant in rows
    ]


def _ovi(rows: list[tuple[str, str, dict]]) -> list[dict]:
    records = [
        {"id": item_id, "scores": scores, "categories": {"type": kind}} for item_id, kind, scores in rows
    ]
    for record in records:
        if not record["scores"]:  # an open-ended Correction item without a judge: its 6 metrics unjudged
            record["n_unjudged_metrics"] = 6
    return records


def _all_correct(rows: list[tuple[str, str, str, int, int]], except_ids: tuple[str, ...] = ()) -> list[tuple]:
    return [(i, d, b, int(i not in except_ids), 1) for i, d, b, _, _ in rows]


BASELINE = {
    "v2p": _v2p(BASELINE_V2P),
    "ovi": _ovi(
        [
            ("o1", "Correction", {"ma": 1.0, "ca": 1.0}),
            ("o2", "Cancellation", {"ma": 0.0, "ca": 1.0}),
            ("o3", "Correction", {"ma": 0.0, "ca": 0.0}),
            ("o4", "Correction", {}),  # open-ended, not judged
        ]
    ),
}
CHECKPOINT_40 = {
    "v2p": _v2p(_all_correct(BASELINE_V2P, except_ids=("v6",))),  # 5/6
    "ovi": _ovi(
        [
            ("o1", "Correction", {"ma": 1.0, "ca": 1.0}),
            ("o2", "Cancellation", {"ma": 1.0, "ca": 1.0}),
            ("o3", "Correction", {"ma": 1.0, "ca": 1.0}),
            ("o4", "Correction", {}),
        ]
    ),
}
# v6 is missing (e.g. quarantined) and there is no OVI run for this checkpoint.
CHECKPOINT_80 = {"v2p": _v2p(_all_correct(BASELINE_V2P[:5]))}
EXTRA = {
    "generation": {"max_new_tokens": 64, "do_sample": False},
    "quarantine": {"v2p": {"decode_error": 2, "missing_frame": 1}},
    "judge": "not run (open-ended items unjudged)",
}


@pytest.fixture
def summary() -> dict:
    checkpoints = [("checkpoint-40", 40, CHECKPOINT_40), ("checkpoint-80", 80, CHECKPOINT_80)]
    return build_summary(BASELINE, checkpoints, EXTRA, n_resamples=500)


def test_aggregate_is_micro_per_category() -> None:
    table = aggregate(BASELINE["v2p"])
    assert table["accuracy"] == {"value": 0.5, "n": 6}
    assert table["accuracy_tolerant"] == {"value": pytest.approx(4 / 6), "n": 6}
    assert table["accuracy/dimension/OA"] == {"value": pytest.approx(1 / 3), "n": 3}
    assert table["accuracy/dimension/HA"] == {"value": 1.0, "n": 2}
    assert table["accuracy/dimension/FT"] == {"value": 0.0, "n": 1}
    assert table["accuracy/duration/short"] == {"value": pytest.approx(2 / 3), "n": 3}
    assert table["accuracy/duration/medium"] == {"value": 1.0, "n": 1}
    assert table["accuracy/duration/long"] == {"value": 0.0, "n": 2}
    # Micro, not the mean of the three dimension means (1/3 + 1 + 0) / 3 = 0.444.
    assert table["accuracy"]["value"] != pytest.approx(4 / 9)


def test_aggregate_skips_unjudged_open_items() -> None:
    table = aggregate(BASELINE["ovi"])
    assert table["ma"] == {"value": pytest.approx(1 / 3), "n": 3}
    assert table["ca"] == {"value": pytest.approx(2 / 3), "n": 3}
    assert table["ca/type/Correction"] == {"value": 0.5, "n": 2}
    assert table["ma/type/Cancellation"] == {"value": 0.0, "n": 1}


def test_aggregate_rejects_duplicate_ids() -> None:
    with pytest.raises(ValueError, match="duplicate item id"):
        aggregate(BASELINE["v2p"] + BASELINE["v2p"][:1])


def test_summary_shape_and_paired_deltas(summary: dict) -> None:
    assert summary["baseline"] == {"name": "baseline", "step": 0}
    assert summary["checkpoints"] == [
        {"name": "checkpoint-40", "step": 40},
        {"name": "checkpoint-80", "step": 80},
    ]
    assert summary["judge"] == EXTRA["judge"] and summary["generation"] == EXTRA["generation"]

    v2p = summary["benchmarks"]["v2p"]
    assert v2p["n_items"] == 6 and v2p["n_unjudged"] == 0
    accuracy = v2p["metrics"]["accuracy"]
    assert accuracy["baseline"] == 0.5 and accuracy["n"] == 6

    at_40 = accuracy["checkpoints"]["checkpoint-40"]
    assert at_40["step"] == 40
    assert at_40["value"] == pytest.approx(5 / 6)
    assert at_40["delta"] == pytest.approx(2 / 6)
    low, high = at_40["delta_ci95"]
    assert low <= at_40["delta"] <= high
    assert at_40["mcnemar_p"] == pytest.approx(0.5)  # 2 discordant, both towards the checkpoint

    # checkpoint-80 lacks v6: its value covers its 5 items, the delta only the 5 shared ones.
    at_80 = accuracy["checkpoints"]["checkpoint-80"]
    assert at_80["value"] == 1.0 and at_80["n"] == 5 and at_80["n_paired"] == 5
    assert at_80["delta"] == pytest.approx(2 / 5)
    assert "checkpoint-80" not in v2p["metrics"]["accuracy/dimension/FT"]["checkpoints"]


def test_summary_benchmark_missing_for_a_checkpoint_is_absent(summary: dict) -> None:
    ovi = summary["benchmarks"]["ovi"]
    assert ovi["n_items"] == 4 and ovi["n_unjudged"] == 6 and ovi["n_unjudged_items"] == 1
    counts = {"n_items": 4, "n_unjudged": 6, "n_unjudged_items": 1, "n_zero": 0}
    assert ovi["checkpoints"] == {"checkpoint-40": counts}
    assert set(ovi["metrics"]["ma"]["checkpoints"]) == {"checkpoint-40"}
    assert ovi["metrics"]["ma"]["checkpoints"]["checkpoint-40"]["delta"] == pytest.approx(2 / 3)


def test_summary_rejects_reserved_extra_keys() -> None:
    with pytest.raises(ValueError, match="reserved"):
        build_summary(BASELINE, [], {"benchmarks": {}})


def test_summary_is_deterministic() -> None:
    checkpoints = [("checkpoint-40", 40, CHECKPOINT_40)]
    assert build_summary(BASELINE, checkpoints, n_resamples=200) == build_summary(
        BASELINE, checkpoints, n_resamples=200
    )


def test_best_checkpoint(summary: dict) -> None:
    assert best_checkpoint(summary, "v2p", "accuracy") == "checkpoint-80"
    assert best_checkpoint(summary, "ovi", "ma") == "checkpoint-40"
    assert best_checkpoint(summary, "ovi", "no-such-metric") is None
    assert best_checkpoint(summary, "no-such-benchmark", "accuracy") is None


def test_report_numbers(summary: dict) -> None:
    report = render_report(summary)
    assert "| accuracy | 6 | 50.0 | 83.3 | 100.0 | +40.0 [" in report
    assert "| accuracy_tolerant | 6 | 66.7 | 100.0 | 100.0 | +20.0 [" in report
    assert "### accuracy by dimension (baseline vs checkpoint-80)" in report
    assert "| OA | 3 | 33.3 | 100.0 | +66.7 [" in report
    assert "| HA | 2 | 100.0 | 100.0 | +0.0 [+0.0, +0.0] | 1.000 |" in report
    assert "| FT | 1 | 0.0 | – | – | – |" in report
    assert "accuracy_tolerant by" not in report  # tolerant scores appear in the headline only
    # Duration buckets in their natural order.
    assert report.index("| short |") < report.index("| medium |") < report.index("| long |")
    # OVI compares against its own last checkpoint.
    assert "### ca by type (baseline vs checkpoint-40)" in report
    assert "| Correction | 2 | 50.0 | 100.0 | +50.0 [" in report


def test_a_single_model_report_shows_every_breakdown_under_the_models_own_name() -> None:
    summary = build_summary(CHECKPOINT_40, [], baseline_name="checkpoint-40", n_resamples=50)
    report = render_report(summary)
    assert "One model evaluated: checkpoint-40." in report
    assert "Baseline" not in report and "baseline" not in report
    assert "| Metric | n | checkpoint-40 |" in report
    assert "### accuracy by dimension (checkpoint-40)" in report
    assert "### accuracy by duration (checkpoint-40)" in report
    assert "### ca by type (checkpoint-40)" in report
    assert "| OA | 3 | 100.0 |" in report


def test_report_status_lines(summary: dict) -> None:
    report = render_report(summary)
    assert "6 items · quarantined: 3 (decode_error 2, missing_frame 1)" in report
    assert "4 items · judged metrics not judged (no judge): baseline 6, checkpoint-40 6" in report
    assert "judge: not run (open-ended items unjudged)" in report


def test_write_report_is_atomic_and_round_trips(summary: dict, tmp_path) -> None:
    from core.rundir import RunDir

    run_dir = tmp_path / "run"
    summary_path, report_path = write_report(summary, RunDir(run_dir))
    assert summary_path == run_dir / "summary.json" and report_path == run_dir / "report.md"
    assert json.loads(summary_path.read_text()) == summary
    assert report_path.read_text() == render_report(summary)
    assert sorted(p.name for p in run_dir.iterdir()) == ["report.md", "summary.json"]


def test_ovi_overall_values_are_item_level_means_as_the_papers_table_2():
    """OVIBench's Table 2 is an item-level mean over its set, whose types are 25.8 / 49.5 / 24.7% (one
    weight per type fitted to Tables 12-14 for five of six models), not an exact 1:2:1 weighting: on a set
    of those shares with Doubao-Seed-1.6's per-type CFS (1.69, 8.73, 1.92) the overall is 5.23, as Table 2
    prints 5.24; the 1:2:1 weighting we used before gave 5.27. Intervals are resampled within each type."""

    def open_item(item_id: str, kind: str, cfs: float) -> dict:
        return {"id": item_id, "scores": {"cfs": cfs}, "categories": {"type": kind, "format": "open"}}

    per_type = {"Cancellation": (258, 1.69), "Correction": (495, 8.73), "False Trigger": (247, 1.92)}
    items = [(f"{kind}-{i}", kind, cfs) for kind, (n, cfs) in per_type.items() for i in range(n)]
    baseline = {"ovi": [open_item(*item) for item in items]}
    tuned = {"ovi": [open_item(i, kind, cfs + 1.0) for i, kind, cfs in items]}
    summary = build_summary(baseline, [("checkpoint-9", 9, tuned)], n_resamples=200)  # OVIBench's own rules
    metrics = summary["benchmarks"]["ovi"]["metrics"]
    assert metrics["cfs"]["baseline"] == pytest.approx(sum(c for _, _, c in items) / len(items))
    assert round(metrics["cfs"]["baseline"], 2) == 5.23 != round((1.69 + 2 * 8.73 + 1.92) / 4, 2)
    assert metrics["cfs/type/Correction"]["baseline"] == pytest.approx(8.73)
    point = metrics["cfs"]["checkpoints"]["checkpoint-9"]
    assert point["delta"] == pytest.approx(1.0)
    assert point["delta_ci95"] == pytest.approx([1.0, 1.0])  # every item moved by exactly 1
    assert "resampled within each type" in summary["benchmarks"]["ovi"]["aggregation"]
    # The interval is stratified: a type whose items all moved keeps its share in every resample, so
    # with one type moved by 1 and the others unchanged the interval is the type's share exactly.
    moved = {"ovi": [open_item(i, k, c + (k == "Correction")) for i, k, c in items]}
    point = build_summary(baseline, [("c", 1, moved)], n_resamples=200)["benchmarks"]["ovi"]["metrics"]["cfs"]
    assert point["checkpoints"]["c"]["delta_ci95"] == pytest.approx([0.495, 0.495])
