"""A tiny Qwen2.5-VL with random weights, saved as an ordinary HF checkpoint directory.

Used by the quickstart and the tests in place of a real checkpoint (no hub access here). It is made
once on first use and then loaded by exactly the code that loads a real model
(``AutoModelForImageTextToText`` / ``AutoProcessor``). The tokenizer is a small byte-level BPE
trained offline, with the Qwen special tokens, so the prompt format is the real one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Words the synthetic world, the builders and the benchmarks use, so the BPE learns whole words
# for them; anything else still tokenises (byte-level fallback).
_CORPUS = """
system user assistant You are a helpful assistant.
What colour is the object marked by the box circle arrow dot triangle contour scribble number tag?
Which direction is the object moving? left right up down. What shape is it? square circle triangle
How many objects appear in the video? one two three four 1 2 3 4 0 5
Did the object first appear before or after the red green blue yellow square circle triangle?
Select the best option that accurately addresses the question. Give only your option letter, no other words.
A: B: C: D: Z: The video does not provide enough information.
What happens in the video between and seconds s? Describe what the does.
a red circle appears and moves to the right. the green triangle leaves the scene. a blue square enters.
Stop, never mind. Okay, that's enough. Uh-huh. Hold on honey, I'm on a call. Sorry, I meant the
Okay, I'll stop here. Choose the best continuation of your answer and name the interruption type
(Cancellation, False Trigger or Correction). Reply with the letter, then the type in parentheses, e.g.
A (Correction) B (Cancellation) C (False Trigger) D (Correction)
"""


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(QWEN_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for line in _CORPUS.splitlines() if line] * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )


def _tiny_config(tokenizer, hidden: int, layers: int):
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    head_dim = 16
    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden,
            "intermediate_size": hidden * 2,
            "num_hidden_layers": layers,
            "num_attention_heads": hidden // head_dim,
            "num_key_value_heads": max(1, hidden // head_dim // 2),
            "max_position_embeddings": 4096,
            # mrope_section must sum to head_dim / 2 (temporal, height, width rotary channels).
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 4,
            "out_hidden_size": hidden,
            "fullatt_block_indexes": [1],
            "window_size": 56,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_checkpoint(
    path: str | Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    vocab_size: int = 1024,
    seed: int = 0,
    max_pixels: int = 448 * 448,
) -> Path:
    """Write a tiny random Qwen2.5-VL checkpoint (model, tokenizer, processor) to ``path`` if absent.

    The processor's own pixel cap is generous on purpose: frames arrive already resized to the run's
    media spec, which is the one place the pixel budget is set.

    Returns:
        The checkpoint directory, loadable with ``from_pretrained`` like any real checkpoint.
    """
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):  # every rank may call this; one builds, the others wait and reuse
        if not (path / "config.json").exists():
            _write_tiny_checkpoint(path, hidden, layers, vocab_size, seed, max_pixels)
    return path


def _write_tiny_checkpoint(path: Path, hidden: int, layers: int, vocab_size: int, seed: int, max_pixels: int):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tokenizer = _train_tokenizer(vocab_size)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(_tiny_config(tokenizer, hidden, layers))
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=max_pixels),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(
            min_pixels=28 * 28, max_pixels=max_pixels, cap_pixels_per_frame=True
        ),
    )
    # Build in a sibling temp dir and rename, so a killed build never leaves a half checkpoint.
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
