"""The HF Trainer timed against a bare loop, step for step (bench_trainer_overhead.py,
bench_gpu_lora_step.py).

A Trainer step costs a few milliseconds more than the same arithmetic in a plain loop, while the steps
of a shared machine drift by more than that from one second to the next; medians of separate runs moved
the same comparison between +2% and +14% here. So every Trainer step is paired with a bare step taken
right after it (in the Trainer's ``on_step_end``), on a twin model and the same batch, and the overhead is
taken over the pairs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments, get_scheduler

from core.config import TrainerConfig
from train.recipe import training_arguments
from train.trainer import RecipeTrainer


def finish_device_work(device: torch.device) -> None:
    """Wait for the GPU: a step ends when its work is done, not when it is queued."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class BareLoop:
    """The Trainer's arithmetic without the Trainer, one step at a time, on a model of its own: the batch
    copied to the model's device (as the Trainer copies each batch), forward (in bf16 autocast where the
    Trainer's arguments turn bf16 on), backward, grad-norm clipping, AdamW and LR-schedule steps."""

    def __init__(self, model: torch.nn.Module, batch: dict, args: TrainingArguments):
        self.model, self.batch = model, batch
        self.device = next(model.parameters()).device
        self.precision = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=args.bf16)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.max_grad_norm = args.max_grad_norm
        self.optimizer = torch.optim.AdamW(self.params, lr=args.learning_rate, weight_decay=args.weight_decay)
        self.schedule = get_scheduler(args.lr_scheduler_type, self.optimizer, 0, 10**6)

    def step(self) -> float:
        """Seconds one optimisation step takes."""
        start = time.perf_counter()
        batch = {key: value.to(self.device) for key, value in self.batch.items()}
        with self.precision:
            loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        finish_device_work(self.device)
        return time.perf_counter() - start


class PairedBareSteps(TrainerCallback):
    """Times each Trainer step (data included: from the end of the previous step's callbacks to the end
    of this step) and takes one bare step right after it. The first step only starts the clock."""

    def __init__(self, bare: BareLoop, warmup: int):
        self.bare, self.warmup = bare, warmup
        self.trainer_times: list[float] = []
        self.bare_times: list[float] = []
        self.resumed: float | None = None

    def on_step_end(self, args, state, control, **kwargs):
        finish_device_work(self.bare.device)
        ended = time.perf_counter()
        if self.resumed is not None:
            self.trainer_times.append(ended - self.resumed)
            self.bare_times.append(self.bare.step())
        self.resumed = time.perf_counter()

    def pairs(self) -> list[tuple[float, float]]:
        """(Trainer seconds, bare seconds) per step after the warm-up steps."""
        return list(zip(self.trainer_times, self.bare_times, strict=True))[self.warmup :]


class InOrder:
    """Reads the dataset in order, so every batch holds the same samples."""

    def _get_train_sampler(self, *args, **kwargs):
        return torch.utils.data.SequentialSampler(self.train_dataset)


class InOrderRecipeTrainer(InOrder, RecipeTrainer):
    pass


class InOrderStockTrainer(InOrder, Trainer):
    def __init__(self, *args, trainer_cfg: TrainerConfig, **kwargs):
        super().__init__(*args, **kwargs)


class Repeat(torch.utils.data.Dataset):
    """``inner`` over and over, ``length`` items in all."""

    def __init__(self, inner, length: int):
        self.inner, self.length = inner, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.inner[index % len(self.inner)]


def paired_steps(
    trainer_cls: type,
    trainer_cfg: TrainerConfig,
    out_dir: Path,
    model: torch.nn.Module,
    collator,
    dataset,
    bare: BareLoop,
    warmup: int,
) -> list[tuple[float, float]]:
    """Train ``trainer_cfg.max_steps`` steps with ``trainer_cls`` (nothing saved or logged), each followed
    by a bare step; (Trainer seconds, bare seconds) for all but the first ``warmup + 1``."""
    trainer_cfg = replace(trainer_cfg, save_steps=10**6, logging_steps=10**6)
    args = training_arguments(trainer_cfg, out_dir)
    args.disable_tqdm = True
    paired = PairedBareSteps(bare, warmup)
    trainer = trainer_cls(
        model=model,
        args=args,
        trainer_cfg=trainer_cfg,
        train_dataset=Repeat(dataset, trainer_cfg.max_steps * trainer_cfg.batch_size),
        data_collator=collator,
        callbacks=[paired],
    )
    trainer.remove_callback(PrinterCallback)  # its end-of-training dict would clutter the table
    trainer.train()
    return paired.pairs()
