"""The GPU benchmarks' code paths (the LoRA step, packing), on tiny sizes on the CPU (``--cpu-smoke``): CI
has no GPU, so this is what keeps the scripts that a lent GPU will run from rotting. Their figures are not
checked: on the CPU they mean nothing. The GRPO rollout benchmarks (in process, and through a real
``transformers serve``, timing one step) run whole; their tables are checked for their rows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from paths import REPO


def _run_bench(script: str, tmp_path, *args: str) -> str:
    """A benchmark's stdout, run from the repository root with no GPU and no W&B."""
    done = subprocess.run(
        [sys.executable, f"bench/{script}", *args],
        cwd=REPO,
        env={**os.environ, "BENCH_ROOT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "WANDB_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_gpu_lora_step_benchmark_runs_its_code_path_on_the_cpu(tmp_path):
    stdout = _run_bench("bench_gpu_lora_step.py", tmp_path, "--cpu-smoke")
    assert "LoRA step, random Qwen2.5-VL" in stdout
    assert "The recipe's Trainer on the same model and batch" in stdout
    assert "over the paired bare step" in stdout


@pytest.mark.slow
def test_the_grpo_rollout_benchmark_prints_both_ways_for_both_kinds_of_rollout(tmp_path):
    stdout = _run_bench("bench_grpo_rollouts.py", tmp_path)
    rows = [
        line
        for line in stdout.splitlines()
        if line.startswith("| video question") or line.startswith("| interruption")
    ]
    assert len(rows) == 4 and all(float(row.split("|")[-2]) > 0 for row in rows)  # the ratio column


@pytest.mark.slow
def test_the_packing_benchmark_runs_its_gpu_code_path_on_the_cpu(tmp_path):
    stdout = _run_bench("bench_packing.py", tmp_path, "--cpu-smoke")
    assert "(c) ActivityNet-shaped clips at 112x112" in stdout and "MFU" in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| packed")]
    assert len(rows) == 2, stdout


@pytest.mark.slow
def test_the_served_rollout_benchmark_prints_in_process_and_both_hand_overs(serving, tmp_path):
    stdout = _run_bench("bench_served_rollouts.py", tmp_path, "--steps", "1")  # one timed step: CI's budget
    rows = [line for line in stdout.splitlines() if line.startswith("| in process") or "weight_sync=" in line]
    assert len(rows) == 3 and all(float(row.split("|")[-3]) > 0 for row in rows), stdout  # vs in process
