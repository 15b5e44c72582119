"""What the HF Trainer costs per step over a bare PyTorch loop, on the recipe's tiny model and batch.

Four ways to take the same optimisation step on the same fixed batch (the first 4 training samples):

- bare loop: forward, backward, grad-norm clipping, AdamW and LR-schedule steps on a batch collated once
  beforehand: the same arithmetic as the Trainer's step, without the framework around it;
- Trainer, pre-collated: the recipe's TrainingArguments, the same batch handed over by the collator —
  the difference to the bare loop is the framework's own cost per step;
- Trainer, recipe data path: the recipe's TrainingArguments and collator (render + processor every step)
  in the main process (``num_workers=0``), and with 2 dataloader workers preparing batches ahead.

The variants run in alternating rounds, so a slow spell of the shared machine hits them alike.

    python bench/bench_trainer_overhead.py
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from common import Setup, fixed_batch, fresh_model, median, print_table, training_setup
from transformers import PrinterCallback, Trainer, TrainerCallback, get_scheduler

from train.data import Collator, SampleDataset
from train.recipe import training_arguments

BATCH = 4
ROUNDS = 3
STEPS = 6  # measured steps per round and variant
WARMUP = 2  # steps per round left out (optimizer state creation, first-touch allocations)


class StepClock(TrainerCallback):
    """Wall time between consecutive step ends: the whole step, data included."""

    def __init__(self):
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def step_times(self) -> list[float]:
        return [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)][WARMUP - 1 :]


class InOrderTrainer(Trainer):
    """A Trainer that reads its dataset in order, so every batch is the same ``BATCH`` samples."""

    def _get_train_sampler(self, *args, **kwargs):
        return torch.utils.data.SequentialSampler(self.train_dataset)


class Repeat(torch.utils.data.Dataset):
    """``inner[i % period]``, long enough for a round of steps."""

    def __init__(self, inner, period: int, length: int):
        self.inner, self.period, self.length = inner, period, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.inner[index % self.period]


def bare_round(model, batch: dict, setup: Setup, max_grad_norm: float) -> list[float]:
    params = [p for p in model.parameters() if p.requires_grad]
    cfg = setup.cfg.trainer
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps = WARMUP + STEPS
    schedule = get_scheduler(cfg.lr_scheduler, optimizer, int(cfg.warmup_ratio * steps), steps)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def trainer_round(setup: Setup, model, collator, dataset, out_dir: Path, workers: int = 0) -> list[float]:
    steps = WARMUP + STEPS
    trainer_cfg = replace(
        setup.cfg.trainer,
        max_steps=steps,
        batch_size=BATCH,
        save_steps=10**6,
        logging_steps=10**6,
        num_workers=workers,
    )
    args = training_arguments(trainer_cfg, out_dir)
    args.disable_tqdm = True
    clock = StepClock()
    trainer = InOrderTrainer(
        model=model,
        args=args,
        train_dataset=Repeat(dataset, BATCH, steps * BATCH),
        data_collator=collator,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)  # its end-of-training dict would clutter the table
    trainer.train()
    return clock.step_times()


VARIANTS = {  # name: (label, collate per step, dataloader workers)
    "pre": ("HF Trainer, pre-collated batch", False, 0),
    "recipe": ("HF Trainer, recipe data path, 0 workers", True, 0),
    "workers": ("HF Trainer, recipe data path, 2 workers", True, 2),
}


def main() -> None:
    setup = training_setup()
    out_dir = Path(setup.cfg.run_dir) / "trainer_overhead"  # the Trainer wants one; nothing is saved
    batch = fixed_batch(setup, BATCH)
    tokens = int(batch["attention_mask"].sum())
    recipe_data = SampleDataset(setup.samples[:BATCH], setup.adapter)
    models = {name: fresh_model(setup.cfg) for name in ("bare", *VARIANTS)}
    times: dict[str, list[float]] = {name: [] for name in models}
    max_grad_norm = training_arguments(setup.cfg.trainer, out_dir).max_grad_norm
    for _ in range(ROUNDS):
        times["bare"] += bare_round(models["bare"], batch, setup, max_grad_norm)
        for name, (_, collate, workers) in VARIANTS.items():
            # Pre-collated: the dataset hands out placeholders, so nothing is read or rendered per step.
            collator = Collator(setup.adapter) if collate else (lambda _: dict(batch))
            data = recipe_data if collate else [None] * BATCH
            times[name] += trainer_round(setup, models[name], collator, data, out_dir, workers)

    bare, bare_best = median(times["bare"]), min(times["bare"])
    labels = {"bare": "bare loop (pre-collated batch, same optimizer math)"}
    labels.update({name: label for name, (label, _, _) in VARIANTS.items()})
    rows = []
    for name, label in labels.items():
        step, best = median(times[name]), min(times[name])
        overheads = [f"{(step / bare - 1) * 100:+.0f}%", f"{(best / bare_best - 1) * 100:+.0f}%"]
        rows.append([label, f"{step * 1000:.0f}", *overheads])
    print_table(
        f"Trainer overhead: tiny Qwen2.5-VL + LoRA, batch {BATCH} ({tokens} tokens), "
        f"median of {ROUNDS}x{STEPS} steps",
        ["variant", "step ms (median)", "over bare (medians)", "over bare (fastest steps)"],
        rows,
        notes=[
            "every variant clips the gradient norm and steps AdamW and the LR schedule; the pre-collated row "
            "is the framework's own cost, the recipe rows add preparing the batch (render + processor)",
            "with workers, batches are prepared in other processes, which here share the 2 cores with the "
            "model's compute; on a GPU machine they do not",
            "the two overhead columns disagree when other work on the machine disturbed the steps",
        ],
    )


if __name__ == "__main__":
    main()
