"""Tiny random-weight checkpoints of every supported model family, saved as ordinary HF checkpoint dirs.

Used by the quickstart and the tests in place of a real checkpoint (no hub access here). One is made on
first use and then loaded by exactly the code that loads a real model (``AutoModelForImageTextToText`` /
``AutoProcessor``). Each family gets its own model class, its own processor classes and a small
byte-level BPE tokenizer trained offline with the special tokens that family's processor looks for, so
the prompt format is the real one. Each also carries its family's released chat template (written from
``models.chat``'s released format), so an OpenAI-compatible server (``transformers serve`` ...) serves it
as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.config import TinyWords
from core.files import atomic_dir

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_onevision", "internvl")

_CHATML_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_QWEN_MEDIA_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
QWEN_SPECIAL_TOKENS = (*_CHATML_TOKENS, *_QWEN_MEDIA_TOKENS)
# InternVL's processor reads these by name from the tokenizer (tokenizer.context_image_token, ...).
_INTERNVL_NAMED_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
_SPECIAL_TOKENS = {
    "qwen2_vl": QWEN_SPECIAL_TOKENS,
    "qwen2_5_vl": QWEN_SPECIAL_TOKENS,
    "qwen3_vl": QWEN_SPECIAL_TOKENS,
    "llava_onevision": (*_CHATML_TOKENS, "<image>", "<video>"),
    "internvl": (*_CHATML_TOKENS, *_INTERNVL_NAMED_TOKENS.values()),
}
# Written with every tiny checkpoint; one built before they carried a chat template is built again.
CHAT_TEMPLATE_FILE = "chat_template.jinja"

# Words the synthetic world, the builders and the benchmarks use, so the BPE learns whole words
# for them; anything else still tokenises (byte-level fallback).
_BENCHMARK_WORDS = """
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
# The generic skills' wording (data_builders/generic_skills.py), learnt by the stand-in's tokenizer only:
# split into bytes, "travelling" is 6 tokens and "Finish" 5, and the stand-in learns them slowly. Last,
# the words the rest of a finished sentence or a named word class can start with, each at a line's start
# (no space before).
_GENERIC_SKILLS_WORDS = """
Which colour has the square? The circle is red.
Tell me the shape of the green thing.
It is a triangle. It is travelling left, right, up or down.
Count the shapes you can see in this clip.
I can see 3 shapes. I can see 1 shape.
Which way is the blue circle travelling?
Of the red square and the yellow circle, which came into view earlier?
The red square came first.
Is there a yellow triangle anywhere in this clip?
Yes, there is a red square.
No, I see no blue circle.
Give a short account of this clip.
I see a red square travelling left, then a blue circle travelling up.
There is a green triangle travelling down.
Finish this sentence about the clip: "I see a ..."
Answer with the letter of the right option.
Which of these words names a direction: red, square, 3 or left? Which names a number or a shape?
Red names a colour.
Square names a shape.
Left names a direction.
A. square
B. circle
(C) There is a red square.
(D) yes or no
red
green
blue
yellow
square
circle
triangle
travelling
left
right
up
down
then
a
Green
Blue
Yellow
Circle
Triangle
Right
Up
Down
"""
_WORDS = {
    TinyWords.benchmarks: _BENCHMARK_WORDS,
    TinyWords.benchmarks_and_skills: _BENCHMARK_WORDS + _GENERIC_SKILLS_WORDS,
}


# Every tiny checkpoint's chat template after a header setting these variables from a models.chat
# ChatFormat (see chat_template). transformers serve passes content as a list of text/image/video parts.
_TEMPLATE_BODY = r"""
{%- for message in messages -%}
    {%- if loop.first and system is not none and message['role'] != 'system' -%}
        {{ turn_start + 'system\n' + system + turn_end + '\n' }}
    {%- endif -%}
    {{ turn_start + message['role'] + '\n' }}
    {%- if message['content'] is string -%}
        {{ message['content'] }}
    {%- else -%}
        {%- set parts = message['content'] -%}
        {%- if media_first -%}
            {%- set parts = (parts | selectattr('type', 'equalto', 'image') | list)
                + (parts | selectattr('type', 'equalto', 'video') | list)
                + (parts | selectattr('type', 'equalto', 'text') | list) -%}
        {%- endif -%}
        {%- for part in parts -%}
            {%- if part['type'] == 'image' -%}
                {{ image }}
            {%- elif part['type'] == 'video' -%}
                {{ video }}
            {%- elif part['type'] == 'text' -%}
                {{ part['text'] }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ turn_end + '\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ turn_start + 'assistant\n' }}
{%- endif -%}
"""


def chat_template(chat) -> str:
    """A Jinja chat template that writes a conversation as ``chat`` (a ``models.chat.ChatFormat``) does:
    its default system turn unless the conversation opens with its own, its placeholder for each image and
    video part (a turn's images, then its videos, then its text when ``media_first``) and its turn
    markers."""
    # JSON literals are Jinja literals, but for None.
    header = "".join(
        f"{{%- set {name} = {'none' if value is None else json.dumps(value)} -%}}\n"
        for name, value in asdict(chat).items()
    )
    return header + _TEMPLATE_BODY.strip() + "\n"


def train_tokenizer(family: str, words: TinyWords = TinyWords.benchmarks, vocab_size: int = 1024):
    """A small byte-level BPE trained offline on ``words``, with ``family``'s special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(_SPECIAL_TOKENS[family]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([line for line in _WORDS[words].splitlines() if line] * 4, trainer)
    named = _INTERNVL_NAMED_TOKENS if family == "internvl" else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        extra_special_tokens=named,
    )


def _text_config(tokenizer, hidden: int, layers: int, head_dim: int, **extra) -> dict:
    """The language model: the same small decoder shape for every family."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // head_dim,
        "num_key_value_heads": max(1, hidden // head_dim // 2),
        "max_position_embeddings": 4096,
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "tie_word_embeddings": False,
        **extra,
    }


def _qwen_token_ids(tokenizer) -> dict:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


def _mrope(head_dim: int) -> dict:
    """Multimodal rotary positions: head_dim / 2 rotary channels split between time, height and width as
    the released Qwen2.5-VL splits its 64 ([16, 24, 24])."""
    return {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "mrope_section": [head_dim // 8, head_dim * 3 // 16, head_dim * 3 // 16],
    }


# The vision tower shared by Qwen2.5-VL and Qwen3-VL (each adds its own keys).
_VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4}


def _qwen_processor(processor_cls, video_processor_cls, tokenizer, patch: int, max_pixels: int):
    """A Qwen-VL processor whose own pixel caps are generous on purpose: frames arrive already resized
    to the run's media spec, which is the one place the pixel budget is set."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    size = {"shortest_edge": (2 * patch) ** 2, "longest_edge": max_pixels}
    return processor_cls(
        image_processor=Qwen2VLImageProcessor(size=size, patch_size=patch),
        tokenizer=tokenizer,
        video_processor=video_processor_cls(size=size, patch_size=patch, cap_pixels_per_frame=True),
    )


def _build_qwen2_vl(tokenizer, hidden: int, layers: int, head_dim: int, max_pixels: int):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    config = Qwen2VLConfig(
        text_config=_text_config(tokenizer, hidden, layers, head_dim, rope_parameters=_mrope(head_dim)),
        vision_config={"depth": 2, "embed_dim": 64, "hidden_size": hidden, "num_heads": 4, "mlp_ratio": 2},
        tie_word_embeddings=False,
        **_qwen_token_ids(tokenizer),
    )
    processor = _qwen_processor(Qwen2VLProcessor, Qwen2VLVideoProcessor, tokenizer, 14, max_pixels)
    return Qwen2VLForConditionalGeneration(config), processor


def _build_qwen2_5_vl(tokenizer, hidden: int, layers: int, head_dim: int, max_pixels: int):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    config = Qwen2_5_VLConfig(
        text_config=_text_config(tokenizer, hidden, layers, head_dim, rope_parameters=_mrope(head_dim)),
        vision_config={**_VISION, "out_hidden_size": hidden, "fullatt_block_indexes": [1], "window_size": 56},
        tie_word_embeddings=False,
        **_qwen_token_ids(tokenizer),
    )
    processor = _qwen_processor(Qwen2_5_VLProcessor, Qwen2VLVideoProcessor, tokenizer, 14, max_pixels)
    return Qwen2_5_VLForConditionalGeneration(config), processor


def _build_qwen3_vl(tokenizer, hidden: int, layers: int, head_dim: int, max_pixels: int):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    rope = {**_mrope(head_dim), "mrope_interleaved": True}
    config = Qwen3VLConfig(
        text_config={
            **_text_config(tokenizer, hidden, layers, head_dim, rope_parameters=rope),
            "head_dim": head_dim,
        },
        vision_config={
            **_VISION,
            "out_hidden_size": hidden,
            "num_position_embeddings": 64,  # an 8 x 8 grid, interpolated to each frame's patch grid
            "deepstack_visual_indexes": [0],
        },
        tie_word_embeddings=False,
        **_qwen_token_ids(tokenizer),
    )
    # Qwen3-VL sees 16-px patches merged 2x2.
    processor = _qwen_processor(Qwen3VLProcessor, Qwen3VLVideoProcessor, tokenizer, 16, max_pixels)
    return Qwen3VLForConditionalGeneration(config), processor


# LLaVA-OneVision and InternVL see fixed-size tiles; a 32-px tile of 8-px patches keeps them tiny.
_TILE, _PATCH = 32, 8


def _build_llava_onevision(tokenizer, hidden: int, layers: int, head_dim: int, max_pixels: int):
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    # anyres: an image is one base tile plus a grid of tiles picked from these resolutions.
    pinpoints = [[_TILE * r, _TILE * c] for r in (1, 2) for c in (1, 2)]
    config = LlavaOnevisionConfig(
        text_config=_text_config(tokenizer, hidden, layers, head_dim, model_type="qwen2"),
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": _TILE,
            "patch_size": _PATCH,
            "vision_use_head": False,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_grid_pinpoints=pinpoints,
        vision_aspect_ratio="anyres_max_4",
        tie_word_embeddings=False,
    )
    size = {"height": _TILE, "width": _TILE}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=pinpoints),
        tokenizer=tokenizer,
        video_processor=LlavaOnevisionVideoProcessor(size=size),
        num_image_tokens=(_TILE // _PATCH) ** 2,
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        vision_aspect_ratio=config.vision_aspect_ratio,
    )
    return LlavaOnevisionForConditionalGeneration(config), processor


def _build_internvl(tokenizer, hidden: int, layers: int, head_dim: int, max_pixels: int):
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    downsample = 0.5  # pixel shuffle: 2 x 2 patches become one token
    config = InternVLConfig(
        text_config=_text_config(tokenizer, hidden, layers, head_dim, model_type="qwen2"),
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": [_TILE, _TILE],
            "patch_size": [_PATCH, _PATCH],
        },
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=int((_TILE // _PATCH) ** 2 * downsample**2),
        downsample_ratio=downsample,
        tie_word_embeddings=False,
    )
    size = {"height": _TILE, "width": _TILE}
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size=size, crop_to_patches=True, max_patches=4),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(size=size),
        image_seq_length=config.image_seq_length,
    )
    return InternVLForConditionalGeneration(config), processor


_BUILDERS = {
    "qwen2_vl": _build_qwen2_vl,
    "qwen2_5_vl": _build_qwen2_5_vl,
    "qwen3_vl": _build_qwen3_vl,
    "llava_onevision": _build_llava_onevision,
    "internvl": _build_internvl,
}


def build_tiny_checkpoint(
    path: str | Path,
    *,
    family: str = "qwen2_5_vl",
    hidden: int = 128,
    layers: int = 2,
    head_dim: int = 16,
    words: TinyWords = TinyWords.benchmarks,
    vocab_size: int = 1024,
    seed: int = 0,
    max_pixels: int = 448 * 448,
    prepare: Callable[[Any, Any], None] | None = None,
) -> Path:
    """Write a tiny random checkpoint (model, tokenizer, processor, chat template) of ``family`` to
    ``path`` if absent (or built before tiny checkpoints carried a chat template).

    Args:
        family: one of ``FAMILIES``.
        hidden, layers, head_dim: the language model's width, depth and attention head size (a divisor
            of ``hidden`` and of 16, for the rotary channels' split).
        words: the wording its tokenizer learns as whole words.
        prepare: run on the new model and its processor before they are saved (models/centring.py).
        max_pixels: the Qwen processors' own pixel cap (generous: frames arrive already resized).

    Returns:
        The checkpoint directory, loadable with ``from_pretrained`` like any real checkpoint.

    Raises:
        ConfigError: ``family`` is not one of ``FAMILIES``, or ``head_dim`` does not divide as it must.
    """
    from filelock import FileLock

    from core.errors import ConfigError

    if family not in _BUILDERS:
        raise ConfigError(f"model.family={family!r} is not one of {', '.join(FAMILIES)}")
    if hidden % head_dim or head_dim % 16:
        raise ConfigError(
            f"model.tiny_head_dim={head_dim} must divide model.tiny_hidden={hidden} and be a multiple of 16"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):  # every rank may call this; one builds, the others wait and reuse
        if not (path / CHAT_TEMPLATE_FILE).exists():
            shape = (hidden, layers, head_dim)
            tokens = (TinyWords(words), vocab_size)
            _write_tiny_checkpoint(path, family, shape, tokens, seed, max_pixels, prepare)
    return path


def _write_tiny_checkpoint(
    path: Path,
    family: str,
    shape: tuple[int, int, int],
    tokens: tuple[TinyWords, int],
    seed: int,
    max_pixels: int,
    prepare: Callable[[Any, Any], None] | None,
):
    import torch

    from core.config import ChatFormatVariant
    from models.chat import chat_format_for

    tokenizer = train_tokenizer(family, *tokens)
    torch.manual_seed(seed)
    model, processor = _BUILDERS[family](tokenizer, *shape, max_pixels)
    if prepare is not None:
        prepare(model, processor)
    template = chat_template(chat_format_for(family, ChatFormatVariant.released))
    processor.chat_template = tokenizer.chat_template = template  # a client may load either one
    with atomic_dir(path) as tmp:  # a killed build never leaves half a checkpoint
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
