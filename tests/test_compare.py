"""`python -m eval.compare`: paired statistics between two models' per-sample results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from eval.compare import compare, paired_rows

SETTINGS = {
    "v2p": {
        "benchmark": "v2p",
        "version": 2,
        "media": "m1",
        "chat_format": "c1",
        "dtype": "float32",
        "max_new_tokens": 64,
        "input_order": "official",
        "setting": "s1",
    }
}


def _write(directory, correct, **made_with):
    """V2P predictions, right (``A``) or wrong (``B``) as ``correct`` says, half on dimension OA (1), half
    on OD (3); they are scored afresh when compared. ``made_with`` changes their recorded settings."""
    directory.mkdir(parents=True)
    settings = {"v2p": {**SETTINGS["v2p"], **made_with}}
    (directory / "settings.json").write_text(json.dumps(settings))
    rows = [
        {
            "id": f"q{i}",
            "prediction": "A" if c else "B",
            "meta": {
                "answer": "A",
                "dimension": 1 if i % 2 else 3,
                "duration": 30.0,
                "source": "test",
                "question": "What is marked?\nA: a cat\nB: a dog",
            },
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


def test_models_evaluated_under_other_settings_are_refused_or_flagged(tmp_path):
    from core.errors import DataError

    _write(tmp_path / "a", [0] * 10)
    _write(tmp_path / "b", [1] * 10, media="m2", chat_format="c2", setting="s2")  # another media spec
    with pytest.raises(DataError, match="(?s)not comparable.*v2p: media 'm1' vs 'm2'"):
        compare(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    summary = compare(tmp_path / "a", tmp_path / "b", tmp_path / "out", allow_mismatch=True)
    assert summary["not_comparable"] == ["v2p: media 'm1' vs 'm2'"]  # the chat format may differ
    assert "**NOT COMPARABLE" in (tmp_path / "out" / "report.md").read_text()
    _write(tmp_path / "c", [1] * 10, version=1)  # an older benchmark version
    with pytest.raises(DataError, match="version 2 vs 1"):
        compare(tmp_path / "a", tmp_path / "c", tmp_path / "out")
    (tmp_path / "c" / "settings.json").unlink()
    with pytest.raises(DataError, match="no record of the settings"):
        compare(tmp_path / "a", tmp_path / "c", tmp_path / "out")


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


def test_the_first_model_is_the_named_reference_not_a_baseline(tmp_path):
    _write(tmp_path / "base_run" / "eval" / "model", [0, 1] * 5)
    _write(tmp_path / "tuned_run" / "eval" / "model", [1] * 10)
    summary = compare(tmp_path / "base_run/eval/model", tmp_path / "tuned_run/eval/model", tmp_path / "out")
    assert summary["reference"] == "base_run/model"
    assert list(summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["checkpoints"]) == ["tuned_run/model"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "base_run/model (reference) vs tuned_run/model" in report
    assert "| Metric | n | base_run/model | tuned_run/model |" in report
    assert "untuned" not in report.lower() and "Baseline" not in report
    # Two directories of the same name stay apart.
    _write(tmp_path / "x" / "model", [1] * 10)
    same = compare(tmp_path / "x" / "model", tmp_path / "tuned_run/eval/model", tmp_path / "out2")
    assert same["reference"] == "model"
    _write(tmp_path / "y" / "model", [1] * 10)
    twins = compare(tmp_path / "x" / "model", tmp_path / "y" / "model", tmp_path / "out3")
    assert twins["reference"] == "model (first)"


def test_paired_rows_hold_both_predictions_of_every_item():
    first = [{"id": "a", "prediction": "A", "scores": {"correct": 1.0}, "categories": {"d": "OA"}}]
    second = [
        {"id": "a", "prediction": "B", "scores": {"correct": 0.0}, "categories": {"d": "OA"}},
        {"id": "b", "prediction": "C", "scores": {"correct": 1.0}, "categories": {"d": "OD"}},
    ]
    columns, rows = paired_rows(first, second)
    assert columns[:3] == ["id", "first_prediction", "second_prediction"]
    assert rows[0][:3] == ["a", "A", "B"] and json.loads(rows[0][3]) == {"correct": 1.0}
    assert rows[1][:3] == ["b", None, "C"] and json.loads(rows[1][5]) == {"d": "OD"}


@pytest.mark.slow
def test_python_m_eval_compare_logs_metrics_and_paired_tables_to_wandb(tmp_path):
    from wandb_records import history

    _write(tmp_path / "a", [0] * 20)
    _write(tmp_path / "b", [1] * 15 + [0] * 5)
    out = tmp_path / "out"
    command = ["-m", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]
    result = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WANDB_MODE": "offline", "WANDB_API_KEY": ""},
    )
    assert result.returncode == 0, result.stderr
    assert (out / "report.md").exists()
    (run_file,) = out.glob("wandb/offline-run-*/run-*.wandb")
    logged = {key: value for row in history(run_file) for key, value in row.items()}
    assert logged["v2p/accuracy/first"] == 0.0 and logged["v2p/accuracy/second"] == pytest.approx(0.75)
    assert logged["v2p/accuracy/delta"] == pytest.approx(0.75)
    assert logged["v2p/accuracy/delta_ci95_low"] > 0
    table = "v2p/paired_samples"  # a table's fields arrive flattened under its name
    assert logged[f"{table}/_type"] == "table-file" and logged[f"{table}/nrows"] == 20
    (table_file,) = out.glob(f"wandb/offline-run-*/files/{logged[f'{table}/path']}")
    content = json.loads(table_file.read_text())
    assert content["columns"][:3] == ["id", "first_prediction", "second_prediction"]
    assert content["data"][0][:3] == ["q0", "B", "A"]


def _write_judged_ovi(directory, judge, score):
    """Open-ended OVI results under identical settings, their TFS judged ``score`` by ``judge``."""
    from eval.rubrics import RUBRIC_VERSION

    directory.mkdir(parents=True)
    settings = {"ovi": {"benchmark": "ovi", "version": 2, "media": "m1", "setting": "s1"}}
    (directory / "settings.json").write_text(json.dumps(settings))
    meta = {
        "format": "open",
        "interruption_type": "Correction",
        "question": "What happens?",
        "answer": "A red circle moves to the right.",
        "reference_reaction": "A blue circle moves to the right.",
        "interruption": "No, the blue one.",
        "phrasing": "eval",
    }
    judgement = {"score": score, "status": "ok", "judge": judge, "rubric_version": RUBRIC_VERSION}
    rows = [
        {"id": f"o{i}", "prediction": "A blue circle.", "meta": meta, "judgements": {"tfs": judgement}}
        for i in range(8)
    ]
    (directory / "ovi.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_models_judged_by_different_judges_are_not_comparable(tmp_path):
    """The review's case: identical settings, TFS 5.0 by one judge and 8.0 by another. Before, compare
    printed a +3.0 delta without a word; the delta measures the judges, so it is refused."""
    from core.errors import DataError
    from eval.rubrics import RUBRIC_VERSION

    _write_judged_ovi(tmp_path / "a", "endpoint:judge-A|temperature=0.0", 5.0)
    _write_judged_ovi(tmp_path / "b", "endpoint:judge-B|temperature=0.0", 8.0)
    with pytest.raises(DataError, match="(?s)not comparable.*ovi: judge .*judge-A.* vs .*judge-B"):
        compare(tmp_path / "a", tmp_path / "b", tmp_path / "out")
    summary = compare(tmp_path / "a", tmp_path / "b", tmp_path / "out", allow_mismatch=True)
    assert any("judge-A" in line and "judge-B" in line for line in summary["not_comparable"])
    assert "**NOT COMPARABLE" in (tmp_path / "out" / "report.md").read_text()
    # the same judge on both sides compares, and gives the delta the scores make
    _write_judged_ovi(tmp_path / "c", "endpoint:judge-A|temperature=0.0", 8.0)
    summary = compare(tmp_path / "a", tmp_path / "c", tmp_path / "out")
    assert "not_comparable" not in summary
    tfs = summary["benchmarks"]["ovi"]["metrics"]["tfs"]["checkpoints"]["c"]
    assert tfs["delta"] == pytest.approx(3.0)
    assert summary["judge"]["models"]["a"] == {
        "ovi": [f"endpoint:judge-A|temperature=0.0 (rubric {RUBRIC_VERSION})"]
    }
