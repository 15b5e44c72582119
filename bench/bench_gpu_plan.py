"""The plan against a real GPU: one training step of a released shape, peak memory measured vs planned.

``python -m train +exp=v2p_lora model=qwen2_5_vl_7b plan=true`` predicts the per-GPU memory of a run from the
meta device (train/plan.py). This script takes the plan's worst sample (the media limits: a 64-frame video
and a prompt frame at the image pixel limit), builds the released Qwen2.5-VL-7B with random weights on the
GPU in bf16 (no download), attaches the run's LoRA as the run does (``train.modes.apply_peft``), turns
checkpointing on as the Trainer does, and takes one step (forward, backward with the head at the labelled
positions only, as ``RecipeTrainer`` computes it, AdamW step) on inputs of exactly that shape. It prints
``torch.cuda.max_memory_allocated`` against the plan's total less the CUDA context (which the allocator does
not see), and the ratio.

    python bench/bench_gpu_plan.py               # a CUDA GPU with ~60 GB free; says so and exits 0 without
    python bench/bench_gpu_plan.py --cpu-smoke   # the same code path on the CPU: one decoder layer, 4 frames
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from common import REPO, machine_line  # noqa: E402

from models.meta_memory import SampleShape  # noqa: E402
from models.released import released_config  # noqa: E402
from train.modes import apply_peft  # noqa: E402
from train.plan import CONTEXT_BYTES, plan_run  # noqa: E402
from train.trainer import labelled_positions_only  # noqa: E402

GIB = 1024**3


def planned(overrides: list[str]):
    """The plan of ``+exp=v2p_lora`` for Qwen2.5-VL-7B at batch 1 (and whatever ``overrides`` add)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from core.config import register_configs
    from eval.benchmarks import settings_schemas
    from train.stage_settings import STAGE_SETTINGS

    register_configs(settings_schemas(), STAGE_SETTINGS)
    root = tempfile.mkdtemp(prefix="plan-")
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        run = ["+exp=v2p_lora", "model=qwen2_5_vl_7b", "trainer.batch_size=1", f"output_root={root}"]
        cfg = compose("train", [*run, *overrides])
    return plan_run(OmegaConf.to_object(cfg)), OmegaConf.to_object(cfg)


def inputs_of(shape: SampleShape, config, device: str) -> dict:
    """Random token ids with each video's and image's placeholders where the model expects them (apart,
    text between), random pixels of the shape's patch grids, and the last ``labelled_tokens`` labelled."""
    vision = config.vision_config
    patch = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    merge = vision.spatial_merge_size**2
    videos = torch.tensor(shape.video_grid_thw, dtype=torch.long).reshape(-1, 3)
    images = torch.tensor(shape.image_grid_thw, dtype=torch.long).reshape(-1, 3)
    media = [(config.video_token_id, 2, int(g.prod()) // merge) for g in videos]
    media += [(config.image_token_id, 1, int(g.prod()) // merge) for g in images]
    ids = torch.randint(0, 150_000, (shape.tokens,))
    kinds = torch.zeros(shape.tokens, dtype=torch.long)  # mm_token_type_ids: text 0, image 1, video 2
    gap = (shape.tokens - sum(n for _, _, n in media) - shape.labelled_tokens) // (len(media) + 1)
    start = gap
    for token, kind, count in media:  # videos first, then images, as the placeholders' grids are read
        ids[start : start + count], kinds[start : start + count] = token, kind
        start += count + gap
    labels = torch.full((shape.tokens,), -100)
    labels[-shape.labelled_tokens :] = ids[-shape.labelled_tokens :]
    batch = {
        "input_ids": ids[None],
        "attention_mask": torch.ones(1, shape.tokens, dtype=torch.long),
        "mm_token_type_ids": kinds[None],
        "labels": labels[None],
        "pixel_values_videos": torch.randn(int(videos.prod(-1).sum()), patch, dtype=torch.bfloat16),
        "video_grid_thw": videos,
        "second_per_grid_ts": torch.ones(len(videos)),
    }
    if len(images):
        batch["pixel_values"] = torch.randn(int(images.prod(-1).sum()), patch, dtype=torch.bfloat16)
        batch["image_grid_thw"] = images
    return {k: v.to(device) for k, v in batch.items()}


def one_step(config, cfg, shape: SampleShape, device: str) -> float:
    """Seconds of one training step; the peak is read by the caller."""
    from transformers import AutoModelForImageTextToText

    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model = apply_peft(model, cfg.peft)
    model.train()
    model.activation_checkpointing_enable()  # what the Trainer calls for trainer.gradient_checkpointing
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    batch = labelled_positions_only(inputs_of(shape, config, device))
    start = time.perf_counter()
    with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="one decoder layer, 4 frames, on the CPU")
    args = parser.parse_args()
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("bench_gpu_plan: no CUDA GPU here; run it on one (or --cpu-smoke to check the code path)")
        return
    overrides = ["media.num_frames=4", "media.image_max_pixels=200704"] if args.cpu_smoke else []
    plan, cfg = planned(overrides)
    worst = max((a for a in plan.activations if a.gradient_checkpointing), key=lambda a: a.peak_bytes)
    shape_tokens = plan.tokens["worst_case"]
    from train.plan import sample_shape
    from train.plan_inputs import SampleTokens

    config = released_config("qwen2_5_vl")
    if args.cpu_smoke:
        config.text_config.num_hidden_layers, config.vision_config.depth = 1, 1
    sample = SampleTokens(**shape_tokens)
    shape = sample_shape("qwen2_5_vl", config, None, sample)
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = one_step(config, cfg, shape, device)
    predicted = plan.total_bytes - CONTEXT_BYTES
    print(f"plan: {predicted / GIB:.2f} GiB allocated at most ({worst.tokens} tokens, checkpointing on)")
    if device == "cuda":
        measured = torch.cuda.max_memory_allocated()
        print(f"measured: {measured / GIB:.2f} GiB (max_memory_allocated), one step in {seconds:.1f} s")
        print(f"measured / planned: {measured / predicted:.3f}")
    else:
        print(f"cpu smoke: one step of a 1-layer model in {seconds:.1f} s (no memory figure on the CPU)")
    print(machine_line())


if __name__ == "__main__":
    sys.exit(main())
