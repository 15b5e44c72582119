"""Trainer callbacks: evaluation of the baseline and every saved checkpoint, and loss logging.

``eval.mode`` says who evaluates: ``inline``, the training itself (``CheckpointEval``); ``async``, the
evaluation watcher (``python -m eval.watch <run_dir>``), which the training tells it is done by writing
``<run_dir>/training_done`` once everything it saves and writes is on disk (``core.rundir``).
"""

from __future__ import annotations

from transformers import TrainerCallback

from core.metric_logging import MetricLogger
from core.rundir import BASELINE, RunDir
from eval.evaluation import Evaluation
from eval.run_models import RunModels


class CheckpointEval(TrainerCallback):
    """Evaluates the untuned model before step 1 (the baseline) and the model at every save.

    At ``on_train_begin`` LoRA's B matrices are zero and ``modules_to_save`` are fresh copies, so the
    wrapped model computes exactly what the untuned checkpoint computes. Results are keyed in the shared
    results cache by the run's base checkpoint and its saves, as the watcher and ``python -m eval`` key
    them, so any of them reuses what another computed.
    """

    def __init__(self, evaluation: Evaluation, models: RunModels, run_dir: RunDir):
        self.evaluation, self.models, self.run_dir = evaluation, models, run_dir

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # On resume the baseline is already on disk; evaluate() only fills in missing items.
        self.evaluation.evaluate(self.models.of(model), BASELINE, 0)
        if state.global_step > 0:
            # Resumed from checkpoint-N, whose weights the model now holds. A kill during its evaluation
            # (on_save runs after the save) left it partial, and no later on_save comes back to it;
            # finish it here. A complete one costs nothing: every item is already on disk.
            self._evaluate_checkpoint(model, state.global_step)

    def on_save(self, args, state, control, model=None, **kwargs):
        self._evaluate_checkpoint(model, state.global_step)

    def _evaluate_checkpoint(self, model, step: int) -> None:
        checkpoint = self.run_dir.checkpoint(step)
        self.evaluation.evaluate(self.models.of(model), checkpoint.name, step, checkpoint)


class LogToMetricLogger(TrainerCallback):
    """Forwards the Trainer's training logs (loss, learning rate, grad norm) to our metric logger."""

    def __init__(self, logger: MetricLogger):
        self.logger = logger

    def on_log(self, args, state, control, logs=None, **kwargs):
        numbers = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, int | float)}
        if numbers:
            self.logger.log(numbers, step=state.global_step)
