"""A killed run resumes where it stopped: training from its newest complete checkpoint, evaluation from
the per-sample results already on disk. The result equals that of a run that was never killed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from train.recipe import _is_complete, _last_checkpoint

REPO = Path(__file__).resolve().parents[1]

# A reduced quickstart: 8 steps, a checkpoint every 2, the loss of every single step in the log.
TRAIN_OVERRIDES = [
    "+exp=quickstart",
    "trainer.max_steps=8",
    "trainer.save_steps=2",
    "trainer.logging_steps=1",
    "trainer.batch_size=2",
    "data.synthetic.train_videos=4",
    "data.synthetic.eval_videos=2",
    "data.synthetic.vp_questions_per_video=2",
    "eval=none",
    "logger=none",
]
# Same machine, same kernels, same thread count: the runs are in practice bit-identical. 1e-5 leaves room
# for a reordered float32 reduction (losses near 6 hold ~7 significant digits), yet catches the smallest
# real slip seen so far: LoRA A matrices drawn from another RNG state moved the step-2 loss by 7.5e-4
# (relative). A batch taken out of order moves a step's loss by about a percent or more (consecutive
# steps here differ by that much).
LOSS_RTOL = 1e-5
WAIT_S = 240  # bound on every wait for the child process


def _train_command(output_root: Path, run_name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "train",
        *TRAIN_OVERRIDES,
        f"output_root={output_root}",
        f"run_name={run_name}",
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}


def _train(output_root: Path, run_name: str) -> str:
    """Run ``python -m train`` to the end; its stdout and stderr together."""
    done = subprocess.run(
        _train_command(output_root, run_name),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _train_until_killed(output_root: Path, run_name: str, checkpoint: str) -> None:
    """Start ``python -m train`` and SIGKILL it as soon as ``checkpoint`` is complete."""
    target = output_root / run_name / "checkpoints" / checkpoint
    child = subprocess.Popen(
        _train_command(output_root, run_name),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not _is_complete(target):
            assert child.poll() is None, f"the run ended (rc {child.returncode}) before {checkpoint}"
            assert time.monotonic() < deadline, f"no {checkpoint} after {WAIT_S} s"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def _losses(run_dir: Path) -> dict[int, float]:
    """Step -> training loss, from the final checkpoint's log history (logged every step)."""
    state = json.loads((run_dir / "checkpoints" / "checkpoint-8" / "trainer_state.json").read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


@pytest.mark.slow
def test_killed_training_resumes_from_the_newest_complete_checkpoint_with_equal_losses(tmp_path):
    # First the run that is never killed; it also builds the data, the tiny model and the frame cache
    # the other run reuses (building the model draws from the global RNG: see train/recipe.py).
    _train(tmp_path, "straight")
    _train_until_killed(tmp_path, "killed", "checkpoint-4")

    checkpoints = tmp_path / "killed" / "checkpoints"
    for later in ("checkpoint-6", "checkpoint-8"):  # a save that got through before the kill landed
        shutil.rmtree(checkpoints / later, ignore_errors=True)
    # A save killed halfway: weights cut short, no trainer_state.json (the Trainer writes it last).
    half = checkpoints / "checkpoint-6"
    half.mkdir()
    weights = (checkpoints / "checkpoint-4" / "adapter_model.safetensors").read_bytes()
    (half / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])

    output = _train(tmp_path, "killed")
    assert f"resuming from {checkpoints / 'checkpoint-4'}" in output

    # Equal per-step losses mean the resumed run drew the same batches in the same order (the
    # dataloader skipped exactly the 4 batches already trained on) with the same dropout masks.
    straight, resumed = _losses(tmp_path / "straight"), _losses(tmp_path / "killed")
    assert sorted(straight) == list(range(1, 9)) and sorted(resumed) == sorted(straight)
    for step, loss in straight.items():
        assert resumed[step] == pytest.approx(loss, rel=LOSS_RTOL), f"step {step}"
    final_a = load_file(tmp_path / "straight" / "final" / "adapter_model.safetensors")
    final_b = load_file(tmp_path / "killed" / "final" / "adapter_model.safetensors")
    assert final_a.keys() == final_b.keys()
    for name, tensor in final_a.items():
        torch.testing.assert_close(final_b[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def test_last_checkpoint_skips_half_written_saves(tmp_path):
    assert _last_checkpoint(tmp_path / "nothing-yet") is None
    for step in (2, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-12").mkdir()  # killed before its trainer state was written
    (tmp_path / "checkpoint-14").mkdir()
    (tmp_path / "checkpoint-14" / "trainer_state.json").write_text('{"global_st')  # killed mid-write
    # checkpoint-10 beats checkpoint-2 by number, not by name (a string sort would pick checkpoint-2).
    assert _last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")


def test_resumed_training_finishes_the_evaluation_of_the_checkpoint_it_resumes_from():
    """A kill during checkpoint-N's evaluation (on_save) leaves it partial; the resumed run finishes it."""
    from transformers import TrainerControl, TrainerState

    from train.callbacks import CheckpointEval

    calls = []

    class Recorder:
        def evaluate(self, model, adapter, model_name, step):
            calls.append((model_name, step))

    callback = CheckpointEval(Recorder(), adapter=None)
    callback.on_train_begin(None, TrainerState(global_step=0), TrainerControl(), model=None)
    assert calls == [("baseline", 0)]
    calls.clear()
    callback.on_train_begin(None, TrainerState(global_step=4), TrainerControl(), model=None)
    assert calls == [("baseline", 0), ("checkpoint-4", 4)]


# ---------------------------------------------------------------------------------------------------
# Evaluation


class Killed(RuntimeError):
    """Stands for a SIGKILL in the middle of an evaluation."""


@pytest.fixture(scope="module")
def eval_setup(synthetic_build, tiny_checkpoint):
    """The tiny model, its adapter, and the evaluation settings shared by the runs below."""
    from data_builders.media import MediaSpec
    from train.config import EvalConfig, ModelConfig
    from train.models import load_model

    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    cfg = EvalConfig(
        benchmarks=["v2p", "ovi"],
        v2p_root=str(synthetic_build.v2p_bench),
        ovi_root=str(synthetic_build.ovibench),
        limit=6,
        batch_size=2,
        max_new_tokens=4,
        max_new_tokens_open=8,
        bootstrap_resamples=200,
    )
    return model, processor, cfg, MediaSpec()


def _evaluate(eval_setup, run_dir: Path, *, kill_after: int | None = None) -> tuple[dict, list]:
    """Evaluate a baseline and one checkpoint (the same weights) into ``run_dir``.

    Returns:
        The summary, and the ids of the items generated in this call (one list per generate call).
    """
    from data_builders.media import FrameCache
    from eval.evaluator import Evaluator
    from eval.metric_logging import NullLogger
    from train.adapter import make_adapter
    from train.config import ModelConfig

    model, processor, cfg, media = eval_setup
    cache = FrameCache(None)
    evaluator = Evaluator(cfg, media, cache, run_dir, NullLogger())
    generated: list[list[str]] = []

    def counting_generate(model, adapter, samples, max_new_tokens=None):
        if kill_after is not None and len(generated) == kill_after:
            raise Killed()
        generated.append([s.id for s in samples])
        return Evaluator.generate(evaluator, model, adapter, samples, max_new_tokens)

    evaluator.generate = counting_generate  # this evaluator only
    adapter = make_adapter(ModelConfig().family, processor, media, cache)
    evaluator.evaluate(model, adapter, "baseline", step=0)
    summary = evaluator.evaluate(model, adapter, "checkpoint-2", step=2)
    return summary, generated


def _result_ids(run_dir: Path) -> dict[str, list[str]]:
    """Item ids per results file, in file order (JSON lines that parse)."""
    ids = {}
    for path in sorted((run_dir / "eval").glob("*/*.jsonl")):
        ids[str(path.relative_to(run_dir))] = [
            json.loads(line)["id"] for line in path.read_text().splitlines() if _parses(line)
        ]
    return ids


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@pytest.mark.slow
def test_killed_evaluation_generates_only_the_missing_items_and_ends_equal(eval_setup, tmp_path):
    straight, all_calls = _evaluate(eval_setup, tmp_path / "straight")
    n_items = sum(len(ids) for ids in _result_ids(tmp_path / "straight").values())
    assert sum(len(ids) for ids in all_calls) == n_items > 6  # each item generated exactly once

    resumed_dir = tmp_path / "resumed"
    with pytest.raises(Killed):
        _evaluate(eval_setup, resumed_dir, kill_after=3)
    before = {item for ids in _result_ids(resumed_dir).values() for item in ids}
    assert len(before) == 6  # three batches of two made it to disk

    summary, calls = _evaluate(eval_setup, resumed_dir)
    assert sum(len(ids) for ids in calls) == n_items - 6, "only the missing items are generated again"
    assert summary == straight
    assert json.loads((resumed_dir / "summary.json").read_text()) == straight


@pytest.mark.slow
def test_a_results_line_cut_short_by_a_kill_is_generated_again(eval_setup, tmp_path):
    straight, _ = _evaluate(eval_setup, tmp_path / "straight")
    resumed_dir = tmp_path / "resumed"
    with pytest.raises(Killed):
        _evaluate(eval_setup, resumed_dir, kill_after=2)
    (results,) = (resumed_dir / "eval" / "baseline").glob("*.jsonl")
    text = results.read_text()
    results.write_text(text[: len(text) - 25])  # the last record cut short, no newline after it
    cut_id = json.loads(text.splitlines()[-1])["id"]

    summary, calls = _evaluate(eval_setup, resumed_dir)
    assert cut_id in calls[0], "the cut record is generated again, first"
    assert summary == straight
    for name, ids in _result_ids(resumed_dir).items():
        assert sorted(ids) == sorted(set(ids)) and ids, name  # one whole record per item
    assert _result_ids(resumed_dir).keys() == _result_ids(tmp_path / "straight").keys()
