"""The training's curves in summary.json and report.md: the logged loss, reward, KL and each reward's mean,
averaged over at most 10 windows of steps; a step logged twice (a resumed run) counts once, its last entry;
evaluation entries and a line a kill cut short are passed over; nothing logged, no section."""

from __future__ import annotations

import json

import pytest

from eval.report import render_report
from eval.summary import build_summary
from eval.summary_schema import from_json
from eval.training_curves import training_curves


def _write(path, entries, tail: str = "") -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + tail)


def test_curves_are_window_means_of_what_was_logged(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    entries = [
        {"train/global_step": s, "train/loss": float(s), "train/reward": 0.1 * s} for s in range(1, 21)
    ]
    entries += [{"train/global_step": s, "train/rewards/ovi_ma/mean": 1.0} for s in (1, 2, 5)]
    entries += [{"train/global_step": 10, "v2p/accuracy": 0.5, "train/learning_rate": 1e-4}]  # not curves
    entries += [{"train/global_step": 4, "train/loss": 40.0}]  # step 4 again, after a resume: this counts
    _write(metrics, entries, tail='{"train/global_step": 21, "train/lo')  # cut by a kill
    curves = training_curves(metrics)
    assert curves["steps"] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert list(curves["curves"]) == ["loss", "reward", "rewards/ovi_ma/mean"]
    loss = curves["curves"]["loss"]
    assert loss[0] == pytest.approx(1.5) and loss[1] == pytest.approx((3 + 40) / 2) and loss[-1] == 19.5
    assert curves["curves"]["rewards/ovi_ma/mean"][:3] == [1.0, None, 1.0]
    summary = build_summary(
        {"v2p": [{"id": "a", "scores": {"accuracy": 1.0}}]}, [], {"training": curves}, n_resamples=10
    )
    assert from_json(summary).training == curves
    report = render_report(summary)
    assert "## Training" in report and "| step | loss | reward | rewards/ovi_ma/mean |" in report
    assert "| 4 | 21.500 | 0.350 |  |" in report
    assert "**training**" not in report  # not a run setting


def test_no_training_logged_gives_no_section(tmp_path):
    assert training_curves(tmp_path / "metrics.jsonl") is None
    _write(tmp_path / "metrics.jsonl", [{"train/global_step": 0, "v2p/accuracy": 0.5}])
    assert training_curves(tmp_path / "metrics.jsonl") is None
    summary = build_summary({"v2p": [{"id": "a", "scores": {"accuracy": 1.0}}]}, [], {}, n_resamples=10)
    assert "## Training" not in render_report(summary)
