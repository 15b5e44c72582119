"""What the HF Trainer costs per step over a bare PyTorch loop, on the recipe's tiny model and batch.

Three ways to take the same optimisation step on the same fixed batch (the first 4 training samples):

- bare loop: forward, backward, AdamW step on a batch collated once beforehand;
- Trainer, pre-collated: the recipe's TrainingArguments, the same batch handed over by the collator;
- Trainer, recipe: the recipe's TrainingArguments and collator (render + processor every step).

The variants run in alternating rounds, so a slow spell of the shared machine hits them alike.

    python bench/bench_trainer_overhead.py
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from common import Setup, fixed_batch, fresh_model, median, print_table, training_setup
from transformers import PrinterCallback, Trainer, TrainerCallback

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


def bare_round(model, batch: dict, lr: float, weight_decay: float) -> list[float]:
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    times = []
    for _ in range(WARMUP + STEPS):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def trainer_round(setup: Setup, model, collator, dataset, out_dir: Path) -> list[float]:
    steps = WARMUP + STEPS
    trainer_cfg = replace(
        setup.cfg.trainer, max_steps=steps, batch_size=BATCH, save_steps=10**6, logging_steps=10**6
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


def main() -> None:
    setup = training_setup()
    out_dir = Path(setup.cfg.run_dir) / "trainer_overhead"  # the Trainer wants one; nothing is saved
    batch = fixed_batch(setup, BATCH)
    tokens = int(batch["attention_mask"].sum())
    recipe_data = SampleDataset(setup.samples[:BATCH], setup.adapter)
    models = {name: fresh_model(setup.cfg) for name in ("bare", "pre", "recipe")}
    times: dict[str, list[float]] = {name: [] for name in models}
    lr, decay = setup.cfg.trainer.lr, setup.cfg.trainer.weight_decay
    collators = {"pre": lambda _: dict(batch), "recipe": Collator(setup.adapter)}
    for _ in range(ROUNDS):
        times["bare"] += bare_round(models["bare"], batch, lr, decay)
        for name, collator in collators.items():
            times[name] += trainer_round(setup, models[name], collator, recipe_data, out_dir)

    bare, bare_best = median(times["bare"]), min(times["bare"])
    rows = []
    for name, label in (
        ("bare", "bare loop (pre-collated batch, AdamW)"),
        ("pre", "HF Trainer, pre-collated batch"),
        ("recipe", "HF Trainer, recipe collator"),
    ):
        step, best = median(times[name]), min(times[name])
        overheads = [f"{(step / bare - 1) * 100:+.0f}%", f"{(best / bare_best - 1) * 100:+.0f}%"]
        rows.append([label, f"{step * 1000:.0f}", *overheads])
    print_table(
        f"Trainer overhead: tiny Qwen2.5-VL + LoRA, batch {BATCH} ({tokens} tokens), "
        f"median of {ROUNDS}x{STEPS} steps",
        ["variant", "step ms (median)", "overhead (medians)", "overhead (fastest steps)"],
        rows,
        notes=[
            "Trainer variants include what the recipe's TrainingArguments turn on (grad-norm clipping, "
            "LR schedule, callbacks); the recipe row also renders and collates the batch every step",
            "the two overhead columns disagree when other work on the machine disturbed the steps",
        ],
    )


if __name__ == "__main__":
    main()
