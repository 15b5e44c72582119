"""Multimodal RoPE positions for Qwen-VL models: what follows an image or video starts past it.

Qwen2-VL and Qwen2.5-VL give a vision block (temporal, height, width) position ids from the current
position; a video's temporal ids are spaced by ``tokens_per_second`` x seconds per temporal patch, so they
can run far past its height and width. The checkpoints were released with the text after a vision block
starting at the block's largest id + 1 (the original ``get_rope_index``, transformers up to 5.2, and the
serving engines' re-implementations). transformers 5.3 to at least 5.24 start it at the block's start
+ its spatial extent instead (``current_pos += max(h, w) // merge``), inside the video's temporal range:
a 64-frame video puts the question where the pretrained model never saw text. Training and ``generate``
agree with each other there, so nothing looks wrong; they just fine-tune and evaluate on other ids than
the checkpoint learnt and is served with.

:func:`use_released_positions` wraps a loaded model's ``get_rope_index`` so everything after a vision
block moves up to start at the largest id so far + 1. Training, ``generate`` and the OVI simulation all
take their ids from ``get_rope_index``. Where the library already follows the rule (images, Qwen3-VL's
one-frame blocks, a transformers that restores it) the shift is zero.
"""

from __future__ import annotations

import inspect

import torch


def use_released_positions(model: torch.nn.Module) -> bool:
    """Wrap the ``get_rope_index`` of ``model``'s inner model (if it has one); True if wrapped."""
    owner = next((m for m in model.modules() if callable(getattr(m, "get_rope_index", None))), None)
    if owner is None or getattr(owner.get_rope_index, "released_positions", False):
        return False
    library = owner.get_rope_index
    signature = inspect.signature(library)

    def get_rope_index(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        positions, deltas = library(*args, **kwargs)
        bound = signature.bind(*args, **kwargs).arguments
        return start_after_vision(positions, deltas, bound["mm_token_type_ids"], bound.get("attention_mask"))

    get_rope_index.released_positions = True
    owner.get_rope_index = get_rope_index
    return True


def start_after_vision(
    positions: torch.Tensor,
    deltas: torch.Tensor,
    token_types: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shift every token group that follows a vision group to start at the largest id before it + 1.

    Args:
        positions: ``(3, batch, length)`` ids from ``get_rope_index``.
        deltas: ``(batch, 1)`` its ``rope_deltas`` (largest id + 1 - unpadded length).
        token_types: ``(batch, length)`` 0 for text, 1 image, 2 video (``mm_token_type_ids``).
        attention_mask: ``(batch, length)``; padded positions are left as they are.

    Returns:
        The shifted ids and the ``rope_deltas`` that continue them.
    """
    positions, deltas = positions.clone(), deltas.clone()
    for row in range(positions.shape[1]):
        keep = torch.ones_like(token_types[row], dtype=torch.bool)
        if attention_mask is not None:
            keep = attention_mask[row].bool()
        ids = positions[:, row, keep]
        shifted = _shift_row(ids, token_types[row, keep])
        positions[:, row, keep] = shifted
        if ids.numel():
            deltas[row] += int(shifted.max() - ids.max())
    return positions, deltas


def _shift_row(ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
    """One unpadded row: ``(3, n)`` ids and ``(n,)`` token types."""
    out = ids.clone()
    kinds, lengths = torch.unique_consecutive(types, return_counts=True)
    offset, start, largest, after_vision = 0, 0, None, False
    for kind, length in zip(kinds.tolist(), lengths.tolist(), strict=True):
        block = slice(start, start + length)
        if after_vision and largest is not None:
            offset += max(0, largest + 1 - (int(ids[:, block].min()) + offset))
        out[:, block] = ids[:, block] + offset
        largest = int(out[:, block].max()) if largest is None else max(largest, int(out[:, block].max()))
        after_vision, start = kind != 0, start + length
    return out
