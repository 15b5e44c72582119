"""How much of a training step is spent waiting for data, with 0 and 2 dataloader workers.

A plain loop over the recipe's data path: ``SampleDataset`` (frames from the warm frame cache, rendered
to the chat format) and ``Collator`` (the processor, labels) in a shuffled ``DataLoader`` of batch 4,
then forward, backward and an AdamW step of the tiny model with LoRA. The wait is the time blocked in
``next(loader)``; with workers, batches are prepared in other processes while the model computes. Each
batch is stamped when its collation ends, so the table also says how many batches were finished before
the training loop asked for them: for those, the whole wait is handing the batch over to the training
process (torch's default: a file descriptor per tensor, each fetched from a thread in the worker). The
settings run in alternating rounds, so a slow spell of the shared machine hits them alike. With a CUDA GPU
the model trains there and the loader pins memory, as the HF Trainer's does on a GPU machine.
``--packing``: the collator packs each batch (``data.packing=true``: ``PackingCollator``, in the workers
too) and the step computes the packed batch's per-sample positions, as ``RecipeTrainer.compute_loss`` does.

    python bench/bench_data_wait.py
    python bench/bench_data_wait.py --packing
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from common import fresh_model, median, print_table, training_setup

from models.packing import PACKED_SAMPLES, packed_model_inputs, rope_owner
from train.data import Collator, PackingCollator, SampleDataset

BATCH = 4
ROUNDS = 2
STEPS = 10  # measured steps per round and setting
WARMUP = 2  # left out: worker start-up, optimizer state creation
WORKERS = (0, 2)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class StampedCollator(Collator):
    """The recipe's collator, adding when the batch was finished. ``time.perf_counter`` reads Linux's
    monotonic clock, which is the same in every process of the machine."""

    def __call__(self, rendered: list) -> dict:
        batch = super().__call__(rendered)
        batch["finished_at"] = time.perf_counter()
        return batch


class StampedPackingCollator(PackingCollator):
    """The recipe's packing collator (``data.packing=true``), stamped as :class:`StampedCollator`."""

    def __call__(self, rendered: list) -> dict:
        batch = super().__call__(rendered)
        batch["finished_at"] = time.perf_counter()
        return batch


@dataclass
class Step:
    wait: float  # seconds blocked in next(loader)
    whole: float  # seconds for the whole step, wait included
    finished_before_asked: bool


def measure(setup, model, num_workers: int, packing: bool = False) -> list[Step]:
    """The measured steps of one pass."""
    collate = StampedPackingCollator(Collator(setup.adapter)) if packing else StampedCollator(setup.adapter)
    owner = rope_owner(model) if packing else None
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=setup.cfg.trainer.lr)
    loader = torch.utils.data.DataLoader(
        SampleDataset(setup.samples, setup.adapter),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=collate,
        num_workers=num_workers,
        pin_memory=DEVICE == "cuda",  # the Trainer's default (dataloader_pin_memory) where there is a GPU
    )
    steps = []
    batches = iter(loader)
    for _ in range(WARMUP + STEPS):
        start = time.perf_counter()
        batch = next(batches)
        fetched = time.perf_counter()
        finished_at = batch.pop("finished_at")
        batch = {key: value.to(DEVICE, non_blocking=True) for key, value in batch.items()}
        if PACKED_SAMPLES in batch:  # the per-sample positions, in the step as the Trainer computes them
            batch = packed_model_inputs(model, batch, owner)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # the step ends when the GPU is done with it
        steps.append(Step(fetched - start, time.perf_counter() - start, finished_at < start))
    del batches  # stops the workers
    return steps[WARMUP:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packing", action="store_true", help="pack each batch (data.packing=true)")
    args = parser.parse_args()
    setup = training_setup()
    assert len(setup.samples) >= BATCH * (WARMUP + STEPS), "the build has too few samples for one epoch"
    models = {workers: fresh_model(setup.cfg).to(DEVICE) for workers in WORKERS}
    results: dict[int, list[Step]] = {workers: [] for workers in WORKERS}
    for _ in range(ROUNDS):
        for workers in WORKERS:
            results[workers] += measure(setup, models[workers], workers, args.packing)
    base_step = median([s.whole for s in results[0]])
    rows = []
    for workers, steps in results.items():
        waits, wholes = [s.wait for s in steps], [s.whole for s in steps]
        ahead = sum(s.finished_before_asked for s in steps)
        rows.append(
            [
                str(workers),
                f"{median(wholes) * 1000:.0f}",
                f"{median(waits) * 1000:.1f}",
                f"{sum(waits) / sum(wholes) * 100:.1f}%",
                f"{median(wholes) / base_step:.2f}",
                f"{ahead}/{len(steps)}" if workers else "(made when asked)",
            ]
        )
    print_table(
        f"Data wait: tiny Qwen2.5-VL + LoRA, batch {BATCH}{', packed' if args.packing else ''}, "
        f"{ROUNDS}x{STEPS} steps per setting (frame cache warm)",
        [
            "workers",
            "step ms (median)",
            "wait ms (median)",
            "wait share of step time",
            "step x 0 workers",
            "batches finished before asked for",
        ],
        rows,
        notes=[
            "wait share = time blocked in next(loader) / whole step time, summed over the measured steps",
            "workers share the same CPU cores as the model's compute here (hence the slower steps with "
            "workers); on a GPU machine they do not",
            "with a GPU, the DataLoader's pin-memory thread receives the batches from the workers, so the "
            "hand-over no longer runs on the training thread; on this CPU it does",
        ],
    )


if __name__ == "__main__":
    main()
