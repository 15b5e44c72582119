"""The layout of a processor batch (``VideoChatAdapter.batch``): which inputs have one entry per token and
which one per media item, and the few ways a batch is put together from pieces.

Per-token inputs are ``(rows, length)``: pieces of one conversation join along the sequence. Media inputs
are stacked along their first dimension, item after item: an image's or a video's pixel rows (as many as
the product of its grid row), its grid, and a video's seconds per temporal patch. Joining pieces keeps
the items in order; repeating a conversation for several rows repeats its items, one copy per row.
"""

from __future__ import annotations

import torch

# The processor's inputs with one entry per token (token_type_ids: some tokenizers'; text 0, image 1,
# video 2 in mm_token_type_ids).
TOKEN_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
IMAGE_PIXELS, IMAGE_GRID = "pixel_values", "image_grid_thw"
VIDEO_PIXELS, VIDEO_GRID = "pixel_values_videos", "video_grid_thw"
VIDEO_SECONDS = "second_per_grid_ts"  # one value per video
GRID_KEYS = (IMAGE_GRID, VIDEO_GRID, VIDEO_SECONDS)  # the media inputs get_rope_index reads
MEDIA_KEYS = (IMAGE_PIXELS, VIDEO_PIXELS, *GRID_KEYS)


def to_device(batch: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def text_piece(tokens: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Text tokens ``(rows, length)`` as a batch piece with no media: every token text, ``mask`` its
    attention mask (None: every token real)."""
    return {
        "input_ids": tokens,
        "attention_mask": torch.ones_like(tokens) if mask is None else mask,
        "mm_token_type_ids": torch.zeros_like(tokens),
    }


def concat(pieces: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pieces of one conversation (the same rows) one after the other: per-token inputs along the sequence,
    media items in order. A per-token input that some piece lacks is left out (it would not cover the
    whole sequence): a text piece's token types, say, after a processor that gives none."""
    out = {}
    for key in dict.fromkeys(k for piece in pieces for k in piece):
        parts = [piece[key] for piece in pieces if key in piece]
        if key not in TOKEN_KEYS:
            out[key] = torch.cat(parts)
        elif len(parts) == len(pieces):
            out[key] = torch.cat(parts, dim=1)
    return out


def repeat(batch: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """A batch of one row as ``rows`` identical rows: per-token inputs repeated along the rows, the media
    items once per row, in order."""
    return {
        key: value.repeat(rows, 1) if key in TOKEN_KEYS else torch.cat([value] * rows)
        for key, value in batch.items()
    }
