"""Trainer callbacks: evaluation of the baseline and every saved checkpoint, and loss logging.

``eval.mode`` says who evaluates: ``inline``, the training itself (``CheckpointEval``); ``async``, the
evaluation watcher (``python -m eval.watch <run_dir>``), which the training tells it is done by writing
``<run_dir>/training_done`` once everything it saves and writes is on disk.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from core import distributed
from core.config import EvalMode, TrainConfig
from core.metric_logging import MetricLogger
from data_builders.files import write_text_atomic
from eval.evaluator import Evaluator
from eval.results_cache import run_weights
from models.chat import VideoChatAdapter

TRAINING_DONE = "training_done"


class CheckpointEval(TrainerCallback):
    """Evaluates the untuned model before step 1 (the baseline) and the model at every save.

    At ``on_train_begin`` LoRA's B matrices are zero and ``modules_to_save`` are fresh copies, so the
    wrapped model computes exactly what the untuned checkpoint computes.
    """

    def __init__(self, evaluator: Evaluator, adapter: VideoChatAdapter):
        self.evaluator = evaluator
        self.adapter = adapter

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # On resume the baseline is already on disk; evaluate() only fills in missing items.
        self.evaluator.evaluate(model, self.adapter, "baseline", step=0)
        if state.global_step > 0:
            # Resumed from checkpoint-N, whose weights the model now holds. A kill during its evaluation
            # (on_save runs after the save) left it partial, and no later on_save comes back to it;
            # finish it here. A complete one costs nothing: every item is already on disk.
            name = f"checkpoint-{state.global_step}"
            self.evaluator.evaluate(model, self.adapter, name, step=state.global_step)

    def on_save(self, args, state, control, model=None, **kwargs):
        self.evaluator.evaluate(
            model, self.adapter, f"checkpoint-{state.global_step}", step=state.global_step
        )


class LogToMetricLogger(TrainerCallback):
    """Forwards the Trainer's training logs (loss, learning rate, grad norm) to our metric logger."""

    def __init__(self, logger: MetricLogger):
        self.logger = logger

    def on_log(self, args, state, control, logs=None, **kwargs):
        numbers = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
        if numbers:
            self.logger.log(numbers, step=state.global_step)


def training_callbacks(
    cfg: TrainConfig, logger: MetricLogger, evaluator: Evaluator | None, adapter: VideoChatAdapter
) -> list[TrainerCallback]:
    """The training's callbacks: loss logging, and checkpoint evaluation unless ``eval.mode`` is async.

    Inline, the evaluator's results are keyed in the shared results cache by the run's base checkpoint
    and its saves (``<run_dir>/checkpoints/checkpoint-N``), as the watcher and ``python -m eval`` key
    them, so any of them reuses what another computed.
    """
    callbacks: list[TrainerCallback] = [LogToMetricLogger(logger)]
    if cfg.eval.mode is not EvalMode.inline and cfg.eval.benchmarks and distributed.is_main():
        print(
            f"eval.mode=async: this training evaluates nothing; `python -m eval.watch {cfg.run_dir}` "
            "evaluates the baseline and every checkpoint",
            flush=True,
        )
    if evaluator is None or cfg.eval.mode is not EvalMode.inline:
        return callbacks
    evaluator.weights_of = run_weights(cfg.model.name_or_path, Path(cfg.run_dir) / "checkpoints")
    return callbacks + [CheckpointEval(evaluator, adapter)]


def mark_training_done(run_dir: str | Path) -> None:
    """Tell the evaluation watcher that every checkpoint is saved and the training wrote its last file
    (rank 0 writes; call it last)."""
    if distributed.is_main():
        write_text_atomic(Path(run_dir) / TRAINING_DONE, "done\n")


def training_done(run_dir: str | Path) -> bool:
    """Whether the training of ``run_dir`` is done: its marker is newer than its resolved config, which
    every start (and resume) of the training rewrites, so a marker left by an earlier run does not count."""
    marker, started = Path(run_dir) / TRAINING_DONE, Path(run_dir) / "resolved_config.yaml"
    try:
        return marker.stat().st_mtime_ns >= started.stat().st_mtime_ns
    except FileNotFoundError:
        return False
