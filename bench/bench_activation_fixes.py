"""Activation memory per sample at the released sizes, before and after the fixes the plan showed.

For each of the five released 7-8B checkpoints, built on the meta device (no weights; ``models.released``),
with the shipped LoRA (r64, the recipe's targets, vision frozen), cast to bf16 as DeepSpeed casts it, one
V2P-Bench-shaped sample at the official input: a 64-frame 720p video and a 720p prompt frame, 250 tokens of
text, 40 of them labelled. One forward and backward each is measured on the meta device
(``models.meta_memory``: bytes saved for backward and the live peak, attention as the GPU kernels save it),
gradient checkpointing off and on:

- before: every family's frames resized by V2P's Qwen budget (``media=qwen_64f``: 28-px grid, ~336^2), then
  again by its own processor (Qwen3-VL to 32 px, LLaVA-OneVision and InternVL up to 384^2 / 448^2); under
  checkpointing, input gradients hooked on every tower (transformers' ``enable_input_require_grads``: the
  frozen vision tower is differentiated); the head and its fp32 log-softmax at every position;
- after: each family's own media, resized once (``conf/media/<family>_64f``); input gradients only where a
  tower trains (``models.checkpointing``); the head at the labelled positions only
  (``train.trainer.labelled_positions_only``, as ``train.plan.labelled_head_and_loss`` measures it).

    python bench/bench_activation_fixes.py            # all five; about a minute on 2 cores
    python bench/bench_activation_fixes.py qwen2_5_vl
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from common import REPO, print_table  # noqa: E402
from transformers import PreTrainedModel  # noqa: E402
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize  # noqa: E402

from core.config import PeftConfig  # noqa: E402
from core.decoding import MediaSpec, frame_size  # noqa: E402
from models.meta_memory import full_head_and_loss, measure_step  # noqa: E402
from models.released import meta_model, released_config, released_processor  # noqa: E402
from models.visual_tokens import image_tokens, video_tokens  # noqa: E402
from train.modes import apply_peft  # noqa: E402
from train.plan import labelled_head_and_loss, sample_shape  # noqa: E402
from train.plan_inputs import SampleTokens  # noqa: E402

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_onevision", "internvl")
SOURCE = (720, 1280)  # a 720p video and prompt frame
FRAMES, TEXT, LABELLED = 64, 250, 40
GIB = 1024**3


def media(name: str) -> MediaSpec:
    """A shipped media config (conf/media/<name>.yaml) as the spec decode uses."""
    from omegaconf import OmegaConf

    shipped = OmegaConf.load(REPO / "conf" / "media" / f"{name}.yaml")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(MediaSpec), shipped))


def official_media(family: str) -> str:
    return {"qwen2_vl": "qwen_64f", "qwen2_5_vl": "qwen_64f"}.get(family, f"{family}_64f")


def sample_at(family: str, processor, spec: MediaSpec, *, reprocessed: bool) -> SampleTokens:
    """The V2P-shaped sample: frames as ``spec`` sizes them and, ``reprocessed``, as the processor then
    resizes them again (Qwen3-VL's 32-px grid; the tiled families' tiles are fixed either way)."""
    video = frame_size(spec, *SOURCE, image=False)
    still = frame_size(spec, *SOURCE, image=True)
    if reprocessed and family == "qwen3_vl":
        video, still = smart_resize(*video, factor=32), smart_resize(*still, factor=32)
    return SampleTokens(
        sample_id="v2p 720p",
        video=[video_tokens(family, processor, FRAMES, *video)],
        images=[image_tokens(family, processor, *still)],
        text=TEXT,
        labelled=LABELLED,
        video_frames=[(FRAMES, *video)],
        image_sizes=[still],
    )


def lora_model(family: str, *, fixed: bool, dropout: float = 0.05) -> torch.nn.Module:
    model = apply_peft(meta_model(released_config(family)), PeftConfig(r=64, alpha=128, dropout=dropout))
    if not fixed:  # transformers' own input-gradient hooks: every tower's input embeddings
        base = model.get_base_model()
        base.enable_input_require_grads = PreTrainedModel.enable_input_require_grads.__get__(base)
    return model.to(torch.bfloat16)


def measure(family: str) -> dict:
    config, processor = released_config(family), released_processor(family)
    before = sample_at(family, processor, media("qwen_64f"), reprocessed=True)
    after = sample_at(family, processor, media(official_media(family)), reprocessed=False)
    row = {"family": family, "tokens": f"{before.total} -> {after.total}"}
    start = time.perf_counter()
    for checkpointing in (False, True):
        peaks = []
        for sample, fixed in ((before, False), (after, True)):
            shape = sample_shape(family, config, processor, sample)
            loss = labelled_head_and_loss(LABELLED) if fixed else full_head_and_loss
            step = measure_step(lora_model(family, fixed=fixed), shape, 1, checkpointing, head_and_loss=loss)
            peaks.append(step.peak_bytes / GIB)
        label = "GC on" if checkpointing else "GC off"
        row[f"{label} GiB"] = f"{peaks[0]:.1f} -> {peaks[1]:.1f}"
        row[f"{label} after/before"] = f"{peaks[1] / peaks[0]:.2f}"
    row["seconds"] = f"{time.perf_counter() - start:.0f}"
    return row


def dropout_cost(family: str = "qwen2_5_vl") -> list[list[str]]:
    """LoRA dropout's cost on the fixed path: 0.05 (the default) against 0, checkpointing off and on."""
    config, processor = released_config(family), released_processor(family)
    shape = sample_shape(
        family, config, processor, sample_at(family, processor, media("qwen_64f"), reprocessed=False)
    )
    rows = []
    for checkpointing in (False, True):
        peaks = [
            measure_step(
                lora_model(family, fixed=True, dropout=dropout), shape, 1, checkpointing,
                head_and_loss=labelled_head_and_loss(LABELLED),
            ).peak_bytes / GIB
            for dropout in (0.05, 0.0)
        ]  # fmt: skip
        rows.append([family, "on" if checkpointing else "off", f"{peaks[0]:.2f}", f"{peaks[1]:.2f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help=f"any of {', '.join(FAMILIES)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.families) - set(FAMILIES)
    if unknown:
        parser.error(f"unknown families {sorted(unknown)}: choose from {', '.join(FAMILIES)}")
    rows = [measure(family) for family in args.families or FAMILIES]
    header = list(rows[0])
    print_table(
        "Activation peak of one sample (forward + backward), LoRA r64 in bf16, measured on the meta device",
        header,
        [[row[key] for key in header] for row in rows],
        ["tokens: the sample before -> after (the media resized once); GiB: before -> after"],
    )
    print_table(
        "LoRA dropout's cost, the same sample after the fixes (peak GiB)",
        ["family", "checkpointing", "dropout 0.05", "dropout 0"],
        dropout_cost(),
    )


if __name__ == "__main__":
    main()
