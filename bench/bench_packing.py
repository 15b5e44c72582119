"""Packing (``data.packing=true``) against padded rows: training tokens per second and the share of padding.

The same batches both ways: the recipe's ``Collator`` (right-padded rows) and its ``PackingCollator``
(best-fit decreasing into rows no longer than the batch's longest sample, models/packing.py), collated
before the clock starts; a step is forward (a packed one with its per-sample positions computed, as
``RecipeTrainer.compute_loss`` does), backward and an AdamW step of the tiny Qwen2.5-VL with the recipe's
LoRA, the two ways alternating round by round. Tokens per second count real (non-padding) tokens; the
padding share is padding slots over all slots of the rows the model ran on.

(a) the quickstart's training set (the synthetic V2P SFT and OVI-Train samples, common.training_setup) in
    batches of the quickstart's size (``trainer.batch_size``: 8);
(b) an ActivityNet-shaped set: one caption-like question per clip, clip durations log-uniform over 10x
    (3 to 30 s, as ActivityNet Captions' segments spread), sampled at 1 fps, so videos run from 3 to 30
    frames; batches of 8.
(c) on a CUDA GPU, (b) on a mid-size random Qwen2.5-VL (bench_gpu_lora_step.py's, bf16, SDPA): MFU and peak
    memory, padded vs packed. Without a GPU it says it skipped (``--cpu-smoke``: its code path on tiny
    sizes on the CPU, figures meaningless).

    python bench/bench_packing.py
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch
from common import BENCH_ROOT, fresh_model, median, print_table, training_setup

from core.media import FrameCache, check_media
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import make_adapter
from models.packing import PACKED_SAMPLES, packed_model_inputs, rope_owner
from train.data import Collator, PackingCollator, SampleDataset

ROUNDS = 3
BATCHES = 6  # measured per round and way
WARMUP = 1  # steps left out per round and way
CLIPS = 64  # ActivityNet-shaped samples
H200_BF16_DENSE_FLOPS = 989e12  # H100/H200 SXM dense bf16 peak; other GPUs: MFU is relative to this


def activitynet_samples(cfg, count: int = CLIPS, seed: int = 0) -> list[Sample]:
    """``count`` caption-like samples on one 40 s synthetic video, clip durations log-uniform in 3-30 s."""
    path = BENCH_ROOT / "packing" / "long.mp4"
    if not path.exists():
        rng = np.random.default_rng(seed)
        frames = rng.integers(0, 255, (40 * 4, 112, 112, 3), dtype=np.uint8)
        write_mp4(path, frames, fps=4.0)
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(count):
        duration = float(np.exp(rng.uniform(np.log(3.0), np.log(30.0))))
        start = float(rng.uniform(0.0, 40.0 - duration))
        words = int(rng.integers(6, 30))  # captions of a few words to a long sentence
        answer = " ".join(["a red circle moves to the right"] * (words // 7 + 1))
        turns = [
            Turn(
                "user", [Part.video(str(path), start, start + duration), Part.txt("Describe what happens.")]
            ),
            Turn("assistant", [Part.txt(answer)], loss=True),
        ]
        samples.append(Sample(f"anet{i}", "caption", turns, "bench", "long", (start, start + duration)))
    return samples


def batches_each_way(adapter, samples: list[Sample], size: int) -> tuple[list[list[dict]], int]:
    """Per consecutive batch of ``size`` samples: [padded, packed (rows up to the batch's longest sample),
    packed with a budget of twice the set's longest sample, rounded up to 64 tokens]; and that budget."""
    dataset = SampleDataset(samples, adapter)
    collate = Collator(adapter)
    rendered = [[dataset[i] for i in range(f, f + size)] for f in range(0, len(samples) - size + 1, size)]
    padded = [collate(r) for r in rendered]
    budget = -(-2 * max(int(b["attention_mask"].sum(dim=1).max()) for b in padded) // 64) * 64
    packers = [PackingCollator(collate), PackingCollator(collate, budget)]
    return [[b, *(pack(r) for pack in packers)] for b, r in zip(padded, rendered, strict=True)], budget


def slots(batch: dict) -> tuple[int, int]:
    """(real tokens, token slots) of a padded or packed batch."""
    if PACKED_SAMPLES in batch:
        return int(batch[PACKED_SAMPLES][:, 2].sum()), batch["input_ids"].numel()
    return int(batch["attention_mask"].sum()), batch["input_ids"].numel()


def step_seconds(model, batch: dict, optimizer, device: torch.device, owner) -> float:
    """One training step on ``batch``: forward (positions per sample for a packed one), backward, AdamW."""
    _sync(device)
    start = time.perf_counter()
    inputs = {k: v.to(device) for k, v in batch.items()}
    if PACKED_SAMPLES in inputs:
        inputs = packed_model_inputs(model, inputs, owner)
    model(**inputs).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - start


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare(model, batches: list[list[dict]], device: torch.device, rounds: int = ROUNDS) -> list[dict]:
    """Per way: summed real tokens, slots and seconds over the measured steps, each measured batch's
    step seconds, and peak memory on a GPU. Each batch is stepped every way in turn (the order rotating
    by round), so a slow spell of the shared machine hits the ways of one batch alike."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    owner = rope_owner(model)
    ways = len(batches[0])
    result = [{"tokens": 0, "slots": 0, "seconds": 0.0, "steps": [], "peak": 0.0} for _ in range(ways)]
    for round_ in range(rounds):
        for i, each_way in enumerate(batches[: WARMUP + BATCHES]):
            for way in [(round_ + k) % ways for k in range(ways)]:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                seconds = step_seconds(model, each_way[way], optimizer, device, owner)
                if i < WARMUP:
                    continue
                tokens, n = slots(each_way[way])
                entry = result[way]
                entry["tokens"] += tokens
                entry["slots"] += n
                entry["seconds"] += seconds
                entry["steps"].append(seconds)
                if device.type == "cuda":
                    peak = torch.cuda.max_memory_allocated(device) / 2**30
                    entry["peak"] = max(entry["peak"], peak)
    return result


def rows_of(
    result: list[dict], names: list[str], flops_per_token: float | None = None, peak_flops: float = 1.0
) -> list:
    """One table row per way; the speed-up is the median over batches of the padded step's time over this
    way's step on the same batch (the same real tokens, so the ratio of their tokens/s)."""
    rows = []
    for entry, name in zip(result, names, strict=True):
        rate = entry["tokens"] / entry["seconds"]
        speedup = median([p / s for p, s in zip(result[0]["steps"], entry["steps"], strict=True)])
        row = [
            name,
            f"{(1 - entry['tokens'] / entry['slots']) * 100:.1f}%",
            f"{median(entry['steps']) * 1000:.0f}",
            f"{rate:,.0f}",
            f"{speedup:.2f}",
        ]
        if flops_per_token is not None:
            row += [f"{rate * flops_per_token / peak_flops * 100:.1f}%", f"{entry['peak']:.1f}"]
        rows.append(row)
    return rows


HEADER = [
    "rows",
    "padding share of slots",
    "step ms (median)",
    "real tokens/s (sum / sum)",
    "tokens/s x padded (median over batches)",
]


def way_names(budget: int) -> list[str]:
    return [
        "padded",
        "packed (pack_tokens=null: the batch's longest sample)",
        f"packed, pack_tokens={budget}",
    ]


def pack_overhead_ms(adapter, samples: list[Sample], size: int) -> tuple[float, float]:
    """Median ms to collate a batch padded, and packed (the processor's work plus the regrouping)."""
    dataset = SampleDataset(samples, adapter)
    rendered = [dataset[i] for i in range(size)]
    collate, pack = Collator(adapter), PackingCollator(Collator(adapter))
    padded = [_timed(lambda: collate(rendered)) for _ in range(5)]
    packed = [_timed(lambda: pack(rendered)) for _ in range(5)]
    return median(padded) * 1000, median(packed) * 1000


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_tables() -> None:
    setup = training_setup()
    cfg, size = setup.cfg, setup.cfg.trainer.batch_size
    model = fresh_model(cfg)
    enough = size * (WARMUP + BATCHES)
    assert len(setup.samples) >= enough, f"the build has {len(setup.samples)} samples, {enough} wanted"
    padded_ms, packed_ms = pack_overhead_ms(setup.adapter, setup.samples, size)
    measured_table(
        f"(a) The quickstart's training set: tiny Qwen2.5-VL + LoRA, batches of {size}",
        model,
        *batches_each_way(setup.adapter, setup.samples[:enough], size),
        [
            f"collating a batch: padded {padded_ms:.0f} ms, packed {packed_ms:.0f} ms (median of 5; the "
            "processor's work is the same, packing regroups its output)"
        ],
    )

    media = replace(cfg.media, num_frames=None, fps=1.0, max_frames=32)
    cache = FrameCache(BENCH_ROOT / "packing" / "frame_cache")
    adapter = make_adapter(cfg.model.family, setup.processor, media, cache, cfg.model.chat_format)
    clips, _ = check_media(activitynet_samples(cfg), media, cache, desc="activitynet-shaped")
    measured_table(
        f"(b) ActivityNet-shaped clips (3-30 s at 1 fps, 112x112): tiny Qwen2.5-VL + LoRA, batches of {size}",
        model,
        *batches_each_way(adapter, clips[:enough], size),
    )


def measured_table(
    title: str, model, batches: list[list[dict]], budget: int, notes: list[str] | None = None
) -> None:
    """One CPU table: the batches stepped each way (padded, packed, packed with ``budget``), printed."""
    size = batches[0][0]["input_ids"].shape[0]
    print_table(
        f"{title}, {ROUNDS}x{BATCHES} steps per way",
        HEADER,
        rows_of(compare(model, batches, torch.device("cpu")), way_names(budget)),
        notes=[
            f"rows per batch of {size} (median), each way: {rows_per_batch(batches)}",
            f"sample lengths {length_range(batches)}",
            *(notes or []),
        ],
    )


def rows_per_batch(batches: list[list[dict]]) -> str:
    ways = range(len(batches[0]))
    return " / ".join(f"{median([float(b[w]['input_ids'].shape[0]) for b in batches]):.0f}" for w in ways)


def length_range(batches: list[list[dict]]) -> str:
    lengths = [int(n) for b in batches for n in b[0]["attention_mask"].sum(dim=1)]
    return f"{min(lengths)}-{max(lengths)} tokens (median {median(lengths):.0f})"


def gpu_table(smoke: bool) -> None:
    from bench_gpu_lora_step import MID, SMOKE, build_model
    from common import quickstart_config

    from core.config import PeftConfig
    from models.loading import load_model
    from train.recipe import apply_peft

    if not smoke and not torch.cuda.is_available():
        print(
            "\n(c) GPU: skipped, no CUDA GPU here (MFU and peak memory of a mid-size Qwen2.5-VL, padded vs "
            "packed, need one; --cpu-smoke runs its code path on tiny sizes)"
        )
        return
    size = SMOKE if smoke else MID
    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    cfg = quickstart_config()
    _, processor = load_model(cfg.model)  # the tiny checkpoint's processor (Qwen tokens)
    side = 112 if smoke else 224
    media = replace(cfg.media, num_frames=None, fps=1.0, max_frames=32, max_pixels=side * side)
    cache = FrameCache(BENCH_ROOT / "packing" / f"frame_cache_{side}")
    adapter = make_adapter("qwen2_5_vl", processor, media, cache)
    clips, _ = check_media(activitynet_samples(cfg), media, cache, desc="activitynet-shaped")
    batch_size = 4 if smoke else 8
    batches, budget = batches_each_way(adapter, clips, batch_size)
    batches = [
        [{k: v.to(dtype) if v.is_floating_point() else v for k, v in b.items()} for b in each_way]
        for each_way in batches
    ]
    model = apply_peft(build_model(size, processor.tokenizer, device, dtype), PeftConfig()).train()
    language = model.get_base_model().model.language_model
    # The Trainer's estimate: 6 x the non-embedding parameters, per token.
    flops_per_token = 6 * sum(p.numel() for n, p in language.named_parameters() if "embed_tokens" not in n)
    result = compare(model, batches, device, rounds=1 if smoke else 2)
    where = "the CPU, tiny sizes (a code-path check, not a figure)" if smoke else torch.cuda.get_device_name()
    print_table(
        f"(c) ActivityNet-shaped clips at {side}x{side}, random Qwen2.5-VL ({size.layers} layers, "
        f"{size.hidden} wide) + LoRA, {dtype}, batches of {batch_size}, on {where}",
        [*HEADER, "MFU", "peak GiB"],
        rows_of(result, way_names(budget), flops_per_token, H200_BF16_DENSE_FLOPS),
        notes=[
            "MFU: real tokens/s x 6 x the language model's non-embedding parameters over 989 TFLOP/s "
            "(dense bf16 peak of an H100/H200 SXM); the vision tower's FLOPs are left out, equal every way",
            f"rows per batch of {batch_size} (median), each way: {rows_per_batch(batches)}; sample lengths "
            f"{length_range(batches)}",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="(c)'s code path on tiny sizes on the CPU")
    args = parser.parse_args()
    if not args.cpu_smoke:
        cpu_tables()
    gpu_table(args.cpu_smoke)


if __name__ == "__main__":
    main()
