"""What the HF Trainer costs per step over a bare PyTorch loop, on the recipe's tiny model and batch.

Every Trainer step is paired with a step of a bare loop taken right after it, on a twin model and the
same fixed batch (the first 4 training samples, collated once beforehand): forward, backward, grad-norm
clipping, AdamW and LR-schedule steps — the same arithmetic as the Trainer's step, without the framework
around it (``paired_steps.py`` says why in pairs). The overhead is the median over pairs of (Trainer step
/ bare step - 1). The Trainer runs four ways:

- stock HF Trainer and the recipe's Trainer (``train.trainer.RecipeTrainer``), pre-collated: the recipe's
  TrainingArguments, the same batch handed over by the collator — the difference to the bare loop is the
  framework's own cost per step, and the stock row shows what the recipe's Trainer takes off it;
- the recipe's Trainer with the recipe's data path: its collator (render + processor every step) in the
  main process (``num_workers=0``), and with 2 dataloader workers preparing batches ahead.

With a CUDA GPU both train there (bf16 where the Trainer's arguments turn it on), and each step's time
ends when the GPU has finished it.

A second table times, on a model of Qwen2.5-VL-7B's shape with the default LoRA (built on the meta
device: the structure without weights, so it takes no memory), the walks over the model that the stock
Trainer makes at every step, and what the recipe's Trainer makes of them: costs that grow with the
model's size, which the tiny model hides.

    python bench/bench_trainer_overhead.py
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from common import fixed_batch, fresh_model, median, print_table, training_setup
from paired_steps import BareLoop, InOrderRecipeTrainer, InOrderStockTrainer, paired_steps

from train.data import Collator, SampleDataset
from train.recipe import training_arguments

BATCH = 4
ROUNDS = 3
STEPS = 20  # measured pairs per round and variant
WARMUP = 2  # steps per round left out (optimizer state creation, first-touch allocations)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


VARIANTS = {  # name: (label, Trainer class, collate per step, dataloader workers)
    "stock": ("stock HF Trainer, pre-collated batch", InOrderStockTrainer, False, 0),
    "pre": ("recipe's Trainer, pre-collated batch", InOrderRecipeTrainer, False, 0),
    "recipe": ("recipe's Trainer, recipe data path, 0 workers", InOrderRecipeTrainer, True, 0),
    "workers": ("recipe's Trainer, recipe data path, 2 workers", InOrderRecipeTrainer, True, 2),
}


def qwen2_5_vl_7b_shape() -> torch.nn.Module:
    """Qwen2.5-VL-7B's published shape with the default LoRA (``peft=lora``), on the meta device."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from core.config import PeftConfig
    from train.modes import apply_peft

    config = Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
        },
        vision_config={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "out_hidden_size": 3584},
    )
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(config)
    return apply_peft(model, PeftConfig())


def per_call_ms(call, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return median(times) * 1000


def print_bookkeeping_at_scale() -> None:
    from accelerate import Accelerator

    model = qwen2_5_vl_7b_shape()
    trainable = [p for p in model.parameters() if p.requires_grad]
    accelerator = Accelerator()
    # No parameter has a gradient here: what is timed is the bookkeeping around the norm, not the norm.
    count_ms = per_call_ms(lambda: model.num_parameters(exclude_embeddings=True))
    stock_clip_ms = per_call_ms(lambda: accelerator.clip_grad_norm_(model.parameters(), 1.0))
    recipe_clip_ms = per_call_ms(lambda: torch.nn.utils.clip_grad_norm_(trainable, 1.0))
    train_ms, zero_grad_ms = per_call_ms(model.train), per_call_ms(model.zero_grad)
    rows = [
        ["FLOP estimate: model.num_parameters(exclude_embeddings=True)", f"{count_ms:.1f}", "0 (once)"],
        [
            "clipping: accelerate over model.parameters() / torch over the trainable ones, listed once",
            f"{stock_clip_ms:.1f}",
            f"{recipe_clip_ms:.1f}",
        ],
        ["model.train() (the stock loop's, in both)", f"{train_ms:.1f}", f"{train_ms:.1f}"],
        ["model.zero_grad() (the stock loop's, in both)", f"{zero_grad_ms:.1f}", f"{zero_grad_ms:.1f}"],
        [
            "per step, in all",
            f"{count_ms + stock_clip_ms + train_ms + zero_grad_ms:.1f}",
            f"{recipe_clip_ms + train_ms + zero_grad_ms:.1f}",
        ],
    ]
    parameters = sum(p.numel() for p in model.parameters()) / 1e9
    print_table(
        f"Per-step walks over the model: Qwen2.5-VL-7B's shape + the default LoRA ({parameters:.1f}B "
        f"parameters in {len(list(model.parameters()))} tensors, {len(list(model.modules()))} modules; "
        "meta device), median of 20 calls",
        ["call", "stock HF Trainer, ms per step", "recipe's Trainer, ms per step"],
        rows,
    )


def main() -> None:
    setup = training_setup()
    out_dir = Path(setup.cfg.run_dir) / "trainer_overhead"  # the Trainer wants one; nothing is saved
    batch = fixed_batch(setup, BATCH)
    tokens = int(batch["attention_mask"].sum())
    recipe_data = SampleDataset(setup.samples[:BATCH], setup.adapter)
    args = training_arguments(setup.cfg.trainer, out_dir)
    bare = BareLoop(fresh_model(setup.cfg).to(DEVICE), batch, args)
    models = {name: fresh_model(setup.cfg) for name in VARIANTS}
    pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for _ in range(ROUNDS):
        for name, (_, trainer_cls, collate, workers) in VARIANTS.items():
            # Pre-collated: the dataset hands out placeholders, so nothing is read or rendered per step.
            collator = Collator(setup.adapter) if collate else (lambda _: dict(batch))
            data = recipe_data if collate else [None] * BATCH
            trainer_cfg = replace(
                setup.cfg.trainer, max_steps=1 + WARMUP + STEPS, batch_size=BATCH, num_workers=workers
            )
            pairs[name] += paired_steps(
                trainer_cls, trainer_cfg, out_dir, models[name], collator, data, bare, WARMUP
            )

    rows = []
    for name, (label, *_) in VARIANTS.items():
        step_ms = median([t for t, _ in pairs[name]]) * 1000
        bare_ms = median([b for _, b in pairs[name]]) * 1000
        overhead = median([t / b - 1 for t, b in pairs[name]]) * 100
        extra_ms = median([t - b for t, b in pairs[name]]) * 1000
        rows.append([label, f"{step_ms:.0f}", f"{bare_ms:.0f}", f"{overhead:+.1f}%", f"{extra_ms:+.1f}"])
    print_table(
        f"Trainer overhead: tiny Qwen2.5-VL + LoRA, batch {BATCH} ({tokens} tokens), "
        f"{ROUNDS}x{STEPS} steps per variant, each paired with a bare-loop step taken right after it",
        [
            "variant",
            "step ms (median)",
            "paired bare step ms (median)",
            "over the paired bare step (median)",
            "ms over it (median)",
        ],
        rows,
        notes=[
            "bare step: forward, backward, clipping, AdamW and LR-schedule steps on the pre-collated batch, "
            "the arithmetic of every Trainer variant; over it, the pre-collated rows are the framework's "
            "own cost, the data-path rows add preparing the batch (render and processor)",
            "pairs of steps on a shared machine still differ by a few percent either way: differences "
            "under about 3% are noise",
            "with workers, batches are prepared in other processes, which here share the 2 cores with the "
            "model's compute; on a GPU machine they do not",
        ],
    )
    print_bookkeeping_at_scale()


if __name__ == "__main__":
    main()
