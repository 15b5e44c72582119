"""``python -m eval`` outside training, and what bad input does to it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture()
def v2p_copy(synthetic_build, tmp_path):
    """A private copy of the synthetic V2P twin that a test may break."""
    root = tmp_path / "v2p"
    shutil.copytree(synthetic_build.v2p_bench, root)
    return root


@pytest.mark.slow
def test_corrupt_video_is_quarantined_and_counted(v2p_copy, small_eval_config, tiny_checkpoint, tmp_path):
    from eval.run import run

    rows = [json.loads(line) for line in (v2p_copy / "dataset_info.jsonl").read_text().splitlines()]
    broken = v2p_copy / "videos" / rows[0]["video_path"]
    broken.unlink()  # it may be a hard link shared with the other builds
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"not a video" * 20)
    n_broken = sum(r["video_path"] == rows[0]["video_path"] for r in rows)
    cfg = small_eval_config(
        tmp_path,
        f"model.name_or_path={tiny_checkpoint}",
        f"eval.settings.v2p.root={v2p_copy}",
        "eval.benchmarks=[v2p]",
    )
    summary = run(cfg)
    assert summary["benchmarks"]["v2p"]["n_items"] == len(rows) - n_broken
    assert sum(summary["quarantine"]["v2p"].values()) == n_broken
    listed = json.loads((Path(cfg.run_dir) / "quarantine_eval_v2p.json").read_text())
    assert {entry["file"] for entry in listed} == {str(broken)}
    assert f"{n_broken}" in (Path(cfg.run_dir) / "report.md").read_text()


def test_malformed_row_is_named_with_file_and_line_without_traceback(
    v2p_copy, repo, tiny_checkpoint, tmp_path
):
    info = v2p_copy / "dataset_info.jsonl"
    lines = info.read_text().splitlines()
    row = json.loads(lines[2])
    row["answer"] = "E"
    lines[2] = json.dumps(row)
    lines[4] = lines[4][: len(lines[4]) // 2]  # a line cut short
    info.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval",
            f"output_root={tmp_path}",
            "data.build_synthetic=false",
            f"model.name_or_path={tiny_checkpoint}",
            f"eval.settings.v2p.root={v2p_copy}",
            "eval.benchmarks=[v2p]",
            "logger.wandb=false",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "dataset_info.jsonl" in result.stderr
    assert "row 3" in result.stderr and "answer" in result.stderr
    assert "row 5" in result.stderr
