"""Tokens per second and peak GPU memory of a LoRA training step on a mid-size Qwen2.5-VL.

The model is built from a config with random weights (nothing is downloaded): a 24-layer, 2048-wide
language model (Qwen2.5-VL-3B's shape, 24 instead of 36 layers) with the real 32-block vision tower,
bf16, SDPA attention, the recipe's default LoRA (r=16 on every language-model projection). The batch is
one 448x448 video of 32 frames (4096 visual tokens) plus a question and an answer, rendered and
collated by the recipe's adapter, so the step is the one training takes. Two rows: without and with
gradient checkpointing. A second table: the recipe's Trainer on the same model and batch (gradient
checkpointing on), each of its steps paired with the same arithmetic in a bare loop on a twin model
(``paired_steps.py``): the framework's cost per step at this size. Sized to finish in well under 5
minutes on one H200.

    python bench/bench_gpu_lora_step.py               # needs a CUDA GPU; says so and exits 0 without one
    python bench/bench_gpu_lora_step.py --cpu-smoke   # tiny sizes on the CPU: checks the code path only
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import torch
from common import BENCH_ROOT, median, print_table, quickstart_config
from paired_steps import BareLoop, InOrderRecipeTrainer, paired_steps

from core.config import PeftConfig, TrainerConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import make_adapter
from train.recipe import apply_peft


@dataclass(frozen=True)
class Size:
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int | None  # None: the tokenizer's own size
    vision_depth: int
    vision_hidden: int
    vision_heads: int
    side: int  # frame side in pixels
    frames: int
    warmup: int
    steps: int


MID = Size(2048, 24, 11008, 16, 2, 151936, 32, 1280, 16, side=448, frames=32, warmup=2, steps=5)
SMOKE = Size(128, 2, 256, 4, 2, None, 2, 64, 4, side=112, frames=4, warmup=2, steps=3)


def build_model(size: Size, tokenizer, device: torch.device, dtype: torch.dtype):
    """A random-weight Qwen2.5-VL of ``size``, created directly on ``device``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")}
    head_dim = size.hidden // size.heads
    temporal = head_dim // 2 // 4  # M-RoPE: a quarter of the rotary pairs for time, the rest for h and w
    spatial = (head_dim // 2 - temporal) // 2
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": size.vocab or len(tokenizer),
            "hidden_size": size.hidden,
            "intermediate_size": size.intermediate,
            "num_hidden_layers": size.layers,
            "num_attention_heads": size.heads,
            "num_key_value_heads": size.kv_heads,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": [temporal, spatial, spatial],
            },
            "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": size.vision_depth,
            "hidden_size": size.vision_hidden,
            "intermediate_size": size.vision_hidden * 8 // 3,
            "num_heads": size.vision_heads,
            "out_hidden_size": size.hidden,
            # Qwen2.5-VL: every 8th block attends over the whole frame, the others within windows.
            "fullatt_block_indexes": [i for i in range(size.vision_depth) if i % 8 == 7]
            or [size.vision_depth - 1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with device:  # created on the device: no CPU copy to initialise and move
        return Qwen2_5_VLForConditionalGeneration._from_config(
            config, dtype=dtype, attn_implementation="sdpa"
        )


def make_batch(size: Size, processor, device: torch.device, dtype: torch.dtype) -> dict:
    """One video sample rendered and collated by the recipe's adapter, moved to ``device``."""
    path = BENCH_ROOT / "gpu" / f"video_{size.side}.mp4"
    fps, seconds = 8.0, 8
    if not path.exists():
        ramp = np.linspace(0, 255, size.side, dtype=np.float32)
        frames = [(np.stack([np.roll(ramp, 7 * t)[None, :].repeat(size.side, 0)] * 3, -1)) for t in range(64)]
        write_mp4(path, np.asarray(frames, np.uint8), fps=fps)
    media = MediaSpec(num_frames=size.frames, max_frames=size.frames, max_pixels=size.side**2)
    adapter = make_adapter("qwen2_5_vl", processor, media, FrameCache(None))
    sample = Sample(
        id="bench",
        task="v2p",
        turns=[
            Turn("user", [Part.video(str(path), 0.0, seconds), Part.txt("What happens in the video?")]),
            Turn("assistant", [Part.txt("A bright band moves to the right. " * 4)], loss=True),
        ],
        source="bench",
        source_id="bench",
        segment=(0.0, seconds),
    )
    batch = adapter.training_batch([adapter.render(sample, for_generation=False)])
    return {k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in batch.items()}


def measure(model, batch: dict, size: Size, device: torch.device) -> tuple[float, float | None]:
    """(median step seconds, peak memory GiB or None on the CPU) over ``size.steps`` steps."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    cuda = device.type == "cuda"
    times = []
    for step in range(size.warmup + size.steps):
        if cuda and step == size.warmup:
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    return median(times[size.warmup :]), peak


def trainer_pairs(size: Size, model, batch: dict, tokenizer, device, dtype) -> list[tuple[float, float]]:
    """(recipe's Trainer seconds, bare seconds) per step on ``model``, the bare steps on a twin."""
    from train.recipe import training_arguments

    trainer_cfg = TrainerConfig(
        max_steps=1 + size.warmup + size.steps, batch_size=1, gradient_checkpointing=True, num_workers=0
    )
    out_dir = BENCH_ROOT / "gpu" / "trainer"  # the Trainer wants one; nothing is saved
    twin = apply_peft(build_model(size, tokenizer, device, dtype), PeftConfig()).train()
    twin.activation_checkpointing_enable()  # as the Trainer does for its model (use_reentrant=False)
    # Both start each step from the batch in CPU memory, as training does (the DataLoader may pin it, and
    # refuses tensors already on the GPU).
    cpu_batch = {key: value.cpu() for key, value in batch.items()}
    bare = BareLoop(twin, cpu_batch, training_arguments(trainer_cfg, out_dir))
    collate = lambda _: dict(cpu_batch)  # noqa: E731
    return paired_steps(InOrderRecipeTrainer, trainer_cfg, out_dir, model, collate, [None], bare, size.warmup)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU (code path only)")
    args = parser.parse_args()
    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "bench_gpu_lora_step: no CUDA GPU here. It builds a ~3B-parameter model and is meant for one "
            "GPU; nothing was measured. Run it with --cpu-smoke to check the code path on tiny sizes."
        )
        return
    size = SMOKE if args.cpu_smoke else MID
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16

    from models.loading import load_model

    _, processor = load_model(quickstart_config().model)  # the tiny checkpoint's processor (Qwen tokens)
    batch = make_batch(size, processor, device, dtype)
    tokens = int(batch["attention_mask"].sum())
    visual = int((batch["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")).sum())
    model = apply_peft(build_model(size, processor.tokenizer, device, dtype), PeftConfig()).train()
    n_total = sum(p.numel() for p in model.parameters())
    n_lora = sum(p.numel() for p in model.parameters() if p.requires_grad)

    results = {}
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        results[checkpointing] = measure(model, batch, size, device)
    base_step, base_peak = results[False]
    rows = []
    for checkpointing, (step, peak) in results.items():
        rows.append(
            [
                "on" if checkpointing else "off",
                f"{step * 1000:.0f}",
                f"{tokens / step:,.0f}",
                f"{base_step / step:.2f}",
                "n/a (CPU)" if peak is None else f"{peak:.1f}",
                "n/a" if peak is None else f"{peak / base_peak:.2f}",
            ]
        )
    where = (
        "the CPU, tiny sizes (a code-path check, not a figure)"
        if args.cpu_smoke
        else torch.cuda.get_device_name()
    )
    print_table(
        f"LoRA step, random Qwen2.5-VL ({n_total / 1e6:,.1f}M params, {n_lora / 1e6:.1f}M of them LoRA), "
        f"{size.frames} frames {size.side}x{size.side}, {tokens} tokens ({visual} visual), {dtype}, "
        f"on {where}",
        ["grad checkpointing", "step ms", "tokens/s", "tokens/s x off", "peak GiB", "peak x off"],
        rows,
        notes=[f"median of {size.steps} steps after {size.warmup} warm-up steps; batch of one sample"],
    )
    pairs = trainer_pairs(size, model, batch, processor.tokenizer, device, dtype)
    trainer_ms = median([t for t, _ in pairs]) * 1000
    bare_ms = median([b for _, b in pairs]) * 1000
    overhead = median([t / b - 1 for t, b in pairs]) * 100
    print_table(
        f"The recipe's Trainer on the same model and batch (gradient checkpointing on), on {where}",
        ["Trainer step ms (median)", "paired bare step ms (median)", "over the paired bare step (median)"],
        [[f"{trainer_ms:.0f}", f"{bare_ms:.0f}", f"{overhead:+.1f}%"]],
        notes=[
            f"{len(pairs)} pairs after {size.warmup} warm-up steps: each Trainer step is followed by the "
            "same arithmetic (forward, backward, clipping, AdamW and LR-schedule steps) in a bare loop on a "
            "twin model; both copy the pre-collated batch from CPU memory to the model's device every step",
        ],
    )


if __name__ == "__main__":
    main()
