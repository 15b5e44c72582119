"""Trainings run as a user runs them, for the tests: ``python -m train`` in a subprocess (one process, or two
under torchrun with DeepSpeed), killed with SIGKILL right after a checkpoint lands; what a run logged
(``trainer_state.json``), two runs compared step by step, and what every preference stage run shows.

The kill follows a checkpoint drawn at random for each test run (printed with its seed; ``KILL_SEED=<seed>``
replays it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from paths import REPO
from processes import kill_process_groups, process_tree, wait_until_gone
from safetensors.torch import load_file

from core.rundir import checkpoint_is_complete

MAX_STEPS = 8
SAVE_STEPS = 2
# A reduced quickstart: 8 steps, a checkpoint every 2, the loss of every single step in the log.
TRAIN_OVERRIDES = [
    "+exp=quickstart",
    f"trainer.max_steps={MAX_STEPS}",
    f"trainer.save_steps={SAVE_STEPS}",
    "trainer.logging_steps=1",
    "trainer.batch_size=2",
    "data.synthetic.train_videos=4",
    "data.synthetic.eval_videos=2",
    "data.synthetic.vp_questions_per_video=2",
    "eval=none",
    "logger=none",
]
# ZeRO-2 on two CPU processes over gloo, launched as tests/test_deepspeed.py launches it.
DEEPSPEED_LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
DEEPSPEED_OVERRIDES = [
    "trainer=zero2",
    "trainer.grad_accum=1",
    "trainer.num_workers=0",
    "trainer.gradient_checkpointing=false",
]
DEEPSPEED_ENV = {
    "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator (gloo), even where a GPU is visible
    "CUDA_VISIBLE_DEVICES": "",
    "TORCH_EXTENSIONS_DIR": str(REPO / "outputs" / "torch_extensions"),  # the comm op compiles once
    "OMP_NUM_THREADS": "1",  # two ranks on two cores
}
# Same machine, same kernels, same thread count: the runs are in practice bit-identical. 1e-5 leaves room
# for a reordered float32 reduction (losses near 6 hold ~7 significant digits), yet catches the smallest
# real slip seen so far: LoRA A matrices drawn from another RNG state moved the step-2 loss by 7.5e-4
# (relative). A batch taken out of order moves a step's loss by about a percent or more (consecutive
# steps here differ by that much). Under ZeRO-2 the same holds: the two ranks' gradients are all-reduced
# over gloo in a fixed order, so a resumed run repeats the same float operations (bit-identical losses
# in every run so far).
LOSS_RTOL = 1e-5
WAIT_S = 240  # bound on every wait for the child process


@dataclass
class Launch:
    """How a training is started: one process, or two under torchrun with DeepSpeed."""

    prefix: list[str]
    overrides: list[str]
    env: dict[str, str]


SINGLE = Launch([sys.executable], [], {})
WITH_WORKERS = Launch([sys.executable], ["trainer.num_workers=2"], {})
DEEPSPEED = Launch(DEEPSPEED_LAUNCH, DEEPSPEED_OVERRIDES, DEEPSPEED_ENV)


def kill_step() -> int:
    """The step whose checkpoint the kill follows: random per test run, printed with its seed."""
    seed = int(os.environ.get("KILL_SEED", random.SystemRandom().randrange(2**32)))
    step = random.Random(seed).choice(range(SAVE_STEPS, MAX_STEPS, SAVE_STEPS))
    print(f"KILL_SEED={seed}: SIGKILL once checkpoint-{step} is complete")
    return step


def _train_command(output_root: Path, run_name: str, launch: Launch) -> list[str]:
    """The command line of the reduced quickstart, launched as ``launch`` says, into ``output_root``."""
    return [
        *launch.prefix,
        "-m",
        "train",
        *TRAIN_OVERRIDES,
        *launch.overrides,
        f"output_root={output_root}",
        f"run_name={run_name}",
    ]


def _env(launch: Launch) -> dict[str, str]:
    """The test's environment, W&B off, with the launch's own variables."""
    return {**os.environ, "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", **launch.env}


def train(output_root: Path, run_name: str, launch: Launch = SINGLE) -> str:
    """Run the training to the end; its stdout and stderr together."""
    done = subprocess.run(
        _train_command(output_root, run_name, launch),
        cwd=REPO,
        env=_env(launch),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def train_until_killed(
    output_root: Path, run_name: str, checkpoint: str, launch: Launch = SINGLE
) -> list[int]:
    """Start the training and SIGKILL every process of it as soon as ``checkpoint`` is complete; the ids
    of the processes killed."""
    target = output_root / run_name / "checkpoints" / checkpoint
    child = subprocess.Popen(
        _train_command(output_root, run_name, launch),
        cwd=REPO,
        env=_env(launch),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a process group of its own, so the kill below spares pytest
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not checkpoint_is_complete(target):
            assert child.poll() is None, f"the run ended (rc {child.returncode}) before {checkpoint}"
            assert time.monotonic() < deadline, f"no {checkpoint} after {WAIT_S} s"
            time.sleep(0.05)
    finally:
        processes = process_tree(child.pid)
        kill_process_groups(processes)
        child.wait(timeout=30)
    for pid in processes:
        assert wait_until_gone(pid), f"process {pid} of the killed run is still running"
    return processes


def check_resume_after_kill(output_root: Path, launch: Launch) -> None:
    """A run killed right after a checkpoint (drawn at random) and resumed ends as a run never killed."""
    step = kill_step()
    train(output_root, "straight", launch)
    train_until_killed(output_root, "killed", f"checkpoint-{step}", launch)
    assert "resuming from" in train(output_root, "killed", launch)
    check_equal_runs(output_root / "straight", output_root / "killed")


def log_entries(checkpoint: Path, key: str) -> list[dict]:
    """The entries of ``checkpoint``'s log history (``trainer_state.json``) that carry ``key``, in order."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return [entry for entry in state["log_history"] if key in entry]


def logged(checkpoint: Path, key: str = "loss") -> list[float]:
    """What ``checkpoint``'s log history holds under ``key`` (the training loss by default), in order."""
    return [entry[key] for entry in log_entries(checkpoint, key)]


def _losses(run_dir: Path) -> dict[int, float]:
    """Step -> training loss, from the final checkpoint's log history (logged every step)."""
    final = run_dir / "checkpoints" / f"checkpoint-{MAX_STEPS}"
    return {entry["step"]: entry["loss"] for entry in log_entries(final, "loss")}


def check_equal_runs(straight: Path, resumed: Path) -> None:
    """Equal per-step losses mean the resumed run drew the same batches in the same order (the dataloader
    skipped exactly the batches already trained on) with the same dropout masks; then equal weights."""
    straight_losses, resumed_losses = _losses(straight), _losses(resumed)
    assert sorted(straight_losses) == list(range(1, MAX_STEPS + 1))
    assert sorted(resumed_losses) == sorted(straight_losses)
    for step, loss in straight_losses.items():
        assert resumed_losses[step] == pytest.approx(loss, rel=LOSS_RTOL), f"step {step}"
    # (a GRPO step whose groups all tie has a loss of exactly 0, in both runs)
    worst = max(abs(resumed_losses[s] - loss) / abs(loss) for s, loss in straight_losses.items() if loss)
    print(f"largest relative loss difference: {worst:.1e} (tolerance {LOSS_RTOL:.0e})")
    final_a = load_file(straight / "final" / "adapter_model.safetensors")
    final_b = load_file(resumed / "final" / "adapter_model.safetensors")
    assert final_a.keys() == final_b.keys()
    for name, tensor in final_a.items():
        torch.testing.assert_close(final_b[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def check_preference_run(cfg, summary: dict, run_dir: Path, implicit_reward: bool = True) -> list[dict]:
    """What every post-SFT stage run shows: the merged start model is its base; the baseline and both
    checkpoints scored on the held-out pairs (a stage that trains an implicit reward, DPO's or KTO's: its
    reward metrics for the checkpoints only) and both benchmarks; the report's section; the deltas logged;
    the adapter saved on the start model. Returns the logged metrics."""
    start = run_dir / "start_model"
    assert (start / "config.json").exists() and cfg.model.name_or_path == str(start)
    assert f"name_or_path: {start}" in (run_dir / "resolved_config.yaml").read_text()
    pairs = summary["benchmarks"]["ovi_pairs"]
    accuracy = pairs["metrics"]["accuracy"]
    assert list(accuracy["checkpoints"]) == ["checkpoint-2", "checkpoint-4"]
    assert (
        accuracy["n"] == pairs["n_items"] > 0 and accuracy["checkpoints"]["checkpoint-4"]["delta"] is not None
    )
    if implicit_reward:
        assert pairs["reward"].startswith(
            f"reward accuracy and margin: the implicit reward (beta {cfg.stage.preference.beta})"
        )
        reward = pairs["metrics"]["reward_accuracy"]
        # Reward metrics for the checkpoints only: the baseline is the reference they are measured against.
        assert reward["baseline"] is None and reward["checkpoints"]["checkpoint-4"]["n"] == pairs["n_items"]
        assert "margin" in pairs["metrics"]
    else:  # no implicit reward to report: the pairs' accuracy only
        assert "only for a preference training" in pairs["reward"] and "margin" not in pairs["metrics"]
    assert set(summary["benchmarks"]) == {"v2p", "ovi", "ovi_pairs"}
    assert "## Held-out preference pairs (OVIBench) (`ovi_pairs`)" in (run_dir / "report.md").read_text()
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("ovi_pairs/accuracy/delta" in entry for entry in metrics)
    adapter = json.loads((run_dir / "final" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(start)
    return metrics
