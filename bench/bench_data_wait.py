"""How much of a training step is spent waiting for data, with 0 and 2 dataloader workers.

A plain loop over the recipe's data path: ``SampleDataset`` (frames from the warm frame cache, rendered
to the chat format) and ``Collator`` (the processor, labels) in a shuffled ``DataLoader`` of batch 4,
then forward, backward and an AdamW step of the tiny model with LoRA. The wait is the time blocked in
``next(loader)``; with workers, batches are prepared in other processes while the model computes.

    python bench/bench_data_wait.py
"""

from __future__ import annotations

import time

import torch
from common import fresh_model, median, print_table, training_setup

from train.data import Collator, SampleDataset

BATCH = 4
STEPS = 12  # measured steps per setting
WARMUP = 2  # left out: worker start-up, optimizer state creation
WORKERS = (0, 2)


def measure(setup, num_workers: int) -> tuple[list[float], list[float]]:
    """(wait seconds, whole-step seconds) for each measured step."""
    model = fresh_model(setup.cfg)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=setup.cfg.trainer.lr)
    loader = torch.utils.data.DataLoader(
        SampleDataset(setup.samples, setup.adapter),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=Collator(setup.adapter),
        num_workers=num_workers,
    )
    waits, steps = [], []
    batches = iter(loader)
    for _ in range(WARMUP + STEPS):
        start = time.perf_counter()
        batch = next(batches)
        fetched = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        waits.append(fetched - start)
        steps.append(time.perf_counter() - start)
    del batches  # stops the workers
    return waits[WARMUP:], steps[WARMUP:]


def main() -> None:
    setup = training_setup()
    assert len(setup.samples) >= BATCH * (WARMUP + STEPS), "the build has too few samples for one epoch"
    results = {w: measure(setup, w) for w in WORKERS}
    base_step = median(results[WORKERS[0]][1])
    rows = []
    for workers, (waits, steps) in results.items():
        rows.append(
            [
                str(workers),
                f"{median(steps) * 1000:.0f}",
                f"{median(waits) * 1000:.0f}",
                f"{sum(waits) / sum(steps) * 100:.0f}%",
                f"{median(steps) / base_step:.2f}",
            ]
        )
    print_table(
        f"Data wait: tiny Qwen2.5-VL + LoRA, batch {BATCH}, {STEPS} steps per setting (frame cache warm)",
        ["workers", "step ms (median)", "wait ms (median)", "wait share of step time", "step x 0 workers"],
        rows,
        notes=[
            "wait share = time blocked in next(loader) / whole step time, summed over the measured steps",
            "workers share the same CPU cores as the model's compute here; on a GPU machine they do not",
        ],
    )


if __name__ == "__main__":
    main()
