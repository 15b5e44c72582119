"""How many tokens a video or an image takes in a model's sequence, from its size alone (no pixels), exactly
as the family's processor classes expand it.

A medium's tokens are what ``models.chat``'s placeholder for it becomes in ``input_ids``: the processor's
placeholder tokens (the ones the vision features replace), the special and text tokens the processor adds
around them (Qwen3-VL's ``<t seconds>`` and vision markers per frame pair, InternVL's ``<img>``/``</img>``
and ``FrameN:`` labels), and what the chat format writes around the placeholder (Qwen2-VL's vision markers,
the newline after LLaVA-OneVision's and InternVL's). The text among them is counted with the processor's
own tokenizer: exact for a checkpoint's tokenizer; with ``models.released.released_processor``'s small
offline one only the placeholders and special tokens are the released counts.

Sizes are the frame size as handed to the processor, i.e. after the media spec's own resize
(``core.decoding``). Counts are cached per processor and size, as a plan asks for thousands of samples: a
processor is not to be changed in place once counted with.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from core.config import Family
from models.chat import chat_format_for

if TYPE_CHECKING:
    from transformers import ProcessorMixin

# The processor classes' own sampling rate when a video comes without metadata (Qwen3-VL's timestamps).
_DEFAULT_FPS = 24.0


def video_tokens(
    family: Family | str,
    processor: ProcessorMixin,
    frames: int,
    height: int,
    width: int,
    *,
    video_metadata: dict | None = None,
) -> int:
    """The tokens one video of ``frames`` frames of ``height`` x ``width`` takes in the sequence.

    Args:
        processor: the family's processor (``released_processor``, or a checkpoint's).
        video_metadata: what the chat adapter hands the processor with the video
            (``core.decoding.Clip.processor_metadata``: ``fps`` and the sampled ``frames_indices``); only
            Qwen3-VL reads it, for the timestamps it writes. None: frames 0, 1, ... at 24 fps, as the
            processor assumes without it.
    """
    times = _frame_times(frames, video_metadata) if family == Family.qwen3_vl else ()
    return _video_tokens(Family(family).value, processor, frames, height, width, times)


def image_tokens(family: Family | str, processor: ProcessorMixin, height: int, width: int) -> int:
    """The tokens one image of ``height`` x ``width`` takes in the sequence, as the only image of its sample
    (LLaVA-OneVision gives each image of a sample with several 729 + 1 tokens, not its anyres tiles)."""
    return _image_tokens(Family(family).value, processor, height, width)


def _frame_times(frames: int, video_metadata: dict | None) -> tuple[float, ...]:
    metadata = video_metadata or {}
    fps = metadata.get("fps") or _DEFAULT_FPS
    indices = metadata.get("frames_indices") or range(frames)
    return tuple(index / fps for index in indices)


@lru_cache(maxsize=4096)
def _video_tokens(family: str, processor, frames: int, height: int, width: int, times: tuple) -> int:
    chat_tokens = _text_tokens(processor, chat_format_for(family).video.replace(processor.video_token, ""))
    if family == Family.internvl:
        return chat_tokens + _internvl_video(processor, frames)
    if family in (Family.qwen2_vl, Family.qwen2_5_vl):
        return chat_tokens + _qwen2_vl_video_placeholders(processor, frames, height, width)
    placeholders = processor._get_num_multimodal_tokens(video_sizes=[(frames, height, width)])
    if family == Family.qwen3_vl:
        return chat_tokens + _qwen3_vl_video(processor, placeholders.num_video_tokens[0], times)
    return chat_tokens + placeholders.num_video_tokens[0]  # LLaVA-OneVision: its newline is a <video> too


@lru_cache(maxsize=4096)
def _image_tokens(family: str, processor, height: int, width: int) -> int:
    chat_tokens = _text_tokens(processor, chat_format_for(family).image.replace(processor.image_token, ""))
    # InternVL's count holds its <img> and </img>; the others' are placeholders alone.
    return (
        chat_tokens + processor._get_num_multimodal_tokens(image_sizes=[(height, width)]).num_image_tokens[0]
    )


@lru_cache(maxsize=65536)
def _text_tokens(processor, text: str) -> int:
    return len(processor.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def _qwen2_vl_video_placeholders(processor, frames: int, height: int, width: int) -> int:
    """Qwen2-VL's video placeholders: its processor's own count ignores the per-frame pixel cap that its
    resize applies when ``cap_pixels_per_frame`` is set, so the size is worked out as that resize does."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import smart_resize

    video = processor.video_processor
    factor = video.patch_size * video.merge_size
    max_pixels = video.size["longest_edge"]
    if video.cap_pixels_per_frame:
        total_pixels = int(video.max_video_tokens * factor * factor * 0.9)
        share = total_pixels * video.temporal_patch_size // frames
        max_pixels = max(min(max_pixels, share), int(video.size["shortest_edge"] * 1.05))
    h, w = smart_resize(height, width, factor, min_pixels=video.size["shortest_edge"], max_pixels=max_pixels)
    temporal_patches = math.ceil(frames / video.temporal_patch_size)
    return temporal_patches * (h // factor) * (w // factor)


def _qwen3_vl_video(processor, placeholders: int, times: tuple[float, ...]) -> int:
    """Qwen3-VL writes ``<t seconds><|vision_start|>`` + one frame pair's placeholders + ``<|vision_end|>``
    per frame pair, t the pair's mean time."""
    # Its own averaging of the frames' times (given in seconds, so at a rate of 1).
    pairs = processor._calculate_timestamps(list(times), 1.0, processor.video_processor.temporal_patch_size)
    stamps = sum(_text_tokens(processor, f"<{seconds:.1f} seconds>") for seconds in pairs)
    markers = _text_tokens(processor, processor.vision_start_token + processor.vision_end_token)
    return placeholders + stamps + markers * len(pairs)


def _internvl_video(processor, frames: int) -> int:
    """InternVL writes ``FrameN: <img>`` + 256 placeholders + ``</img>`` per frame, newline-separated (its
    video processor resizes every frame to one tile, whatever its size)."""
    labels = _text_tokens(processor, "Frame1: ")
    labels += sum(_text_tokens(processor, f"\nFrame{n}: ") for n in range(2, frames + 1))
    markers = _text_tokens(processor, processor.start_image_token + processor.end_image_token)
    return labels + frames * (markers + processor.image_seq_length)
