"""Trainer callbacks: evaluation of the baseline and every saved checkpoint, and loss logging."""

from __future__ import annotations

from transformers import TrainerCallback

from eval.evaluator import Evaluator
from eval.metric_logging import MetricLogger
from train.adapter import QwenVLAdapter


class CheckpointEval(TrainerCallback):
    """Evaluates the untuned model before step 1 (the baseline) and the model at every save.

    At ``on_train_begin`` LoRA's B matrices are zero and ``modules_to_save`` are fresh copies, so the
    wrapped model computes exactly what the untuned checkpoint computes.
    """

    def __init__(self, evaluator: Evaluator, adapter: QwenVLAdapter):
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
