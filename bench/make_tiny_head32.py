"""The tiny Qwen2.5-VL with a head size of 32 instead of 16: vLLM's CPU attention takes no smaller head.

Random weights again (the attention shapes change), the same tokenizer, processor and chat template.

    python bench/make_tiny_head32.py outputs/models/tiny-head32
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

from core.files import atomic_dir
from models.tiny import build_tiny_checkpoint

HEAD_DIM = 32


def main(out: Path) -> None:
    source = build_tiny_checkpoint(out.with_name(out.name + "-source"), family="qwen2_5_vl")
    config = AutoConfig.from_pretrained(source)
    text = config.text_config
    text.num_key_value_heads = max(
        1, text.num_key_value_heads * text.hidden_size // text.num_attention_heads // HEAD_DIM
    )
    text.num_attention_heads = text.hidden_size // HEAD_DIM
    text.head_dim = HEAD_DIM
    text.rope_parameters["mrope_section"] = [4, 6, 6]  # temporal, height, width: sums to HEAD_DIM / 2
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        AutoProcessor.from_pretrained(source).save_pretrained(tmp)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
