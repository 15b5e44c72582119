"""The GPU benchmark's code path, on tiny sizes on the CPU (``--cpu-smoke``): CI has no GPU, so this is
what keeps the script that a lent GPU will run from rotting. Its figures are not checked: on the CPU they
mean nothing. The GRPO rollout benchmark runs whole (seconds); its table is checked for its rows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from paths import REPO


@pytest.mark.slow
def test_the_gpu_lora_step_benchmark_runs_its_code_path_on_the_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/bench_gpu_lora_step.py", "--cpu-smoke"],
        cwd=REPO,
        env={**os.environ, "BENCH_ROOT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "", "WANDB_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LoRA step, random Qwen2.5-VL" in done.stdout
    assert "The recipe's Trainer on the same model and batch" in done.stdout
    assert "over the paired bare step" in done.stdout


@pytest.mark.slow
def test_the_grpo_rollout_benchmark_prints_both_ways_for_both_kinds_of_rollout(tmp_path):
    done = subprocess.run(
        [sys.executable, "bench/bench_grpo_rollouts.py"],
        cwd=REPO,
        env={**os.environ, "BENCH_ROOT": str(tmp_path), "WANDB_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("| video question") or line.startswith("| interruption")
    ]
    assert len(rows) == 4 and all(float(row.split("|")[-2]) > 0 for row in rows)  # the ratio column
