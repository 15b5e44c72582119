"""`python -m eval.compare`: paired statistics between two models' per-sample results."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eval.compare import compare


def _write(directory, correct):
    directory.mkdir(parents=True)
    rows = [
        {
            "id": f"q{i}",
            "task": "v2p",
            "prediction": "A",
            "meta": {},
            "scores": {"correct": float(c), "correct_tolerant": float(c)},
            "categories": {"dimension": "OA" if i % 2 else "OD"},
        }
        for i, c in enumerate(correct)
    ]
    (directory / "v2p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_second_minus_first_with_paired_interval_and_mcnemar(tmp_path):
    _write(tmp_path / "a", [0] * 20)
    _write(tmp_path / "b", [1] * 15 + [0] * 5)
    summary = compare(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    point = summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["checkpoints"]["b"]
    assert point["delta"] == pytest.approx(0.75)
    assert 0 < point["delta_ci95"][0] < 0.75 < point["delta_ci95"][1]
    assert point["mcnemar_p"] == pytest.approx(2 * 0.5**15)  # 15 discordant pairs, all one way
    assert "accuracy/dimension/OA" in summary["benchmarks"]["v2p"]["metrics"]
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "summary.json").exists()


def test_missing_results_is_one_line_error(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval.compare",
            str(tmp_path / "none"),
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "no per-sample results" in result.stderr
    assert "Traceback" not in result.stderr
