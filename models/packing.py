"""Packing: the samples of one training batch laid end to end in fewer rows, each sample computing exactly
what it computes alone in a padded row.

A padded batch of video samples spends much of its compute on padding (clip lengths differ by an order of
magnitude). :func:`pack_batch` rearranges the processor's padded batch: the samples go into rows of at
most a token budget by best-fit decreasing (:func:`best_fit_decreasing`), and every per-sample tensor
(pixels, grids, frame times) follows its sample, so the vision tower sees each image and video exactly as
unpacked (Qwen-VL's vision attention is per frame, through the grids). Labels stay per sample; each
sample's first token is never a target (as a row's first token is not), so the last token of one sample
never learns to predict the next sample.

:func:`packed_model_inputs` then gives the language model what keeps samples apart:

- **positions per sample**, from the model's own ``get_rope_index`` called on each sample alone (with
  ``models.rope.use_released_positions``'s wrapper, when the model has it, applied per sample too);
- a **text row** of positions restarting at 0 for each sample, placed before the three M-RoPE rows
  (``(4, rows, length)``, as the Qwen-VL language models take them), and **no attention mask**: from the
  restarts transformers' ``masking_utils`` builds a block-diagonal causal mask for SDPA and eager
  attention (``find_packed_sequence_indices``), so attention never crosses samples. The padding at the
  end of a short row is one more segment of its own, with no labels.

Flash attention is refused (:func:`check_packable`): transformers derives its variable-length sequences
from position restarts only when the batch is a single row (``_is_packed_sequence`` returns False for more
rows), so on the rows made here each row would attend across its samples; and no GPU checks it here.

The loss is the model's own: the mean over the batch's label tokens, which are the unpacked batch's
(the Qwen-VL classes set ``accepts_loss_kwargs = False``, so the Trainer divides that mean by the
gradient accumulation steps, packed or not). Only families and attention implementations checked by
the parity tests (tests/test_packing.py) pack; :func:`check_packable` refuses the others in one line.
"""

from __future__ import annotations

import torch

from core.errors import ConfigError
from models.batch import (
    IMAGE_GRID,
    IMAGE_PIXELS,
    MEDIA_KEYS,
    TOKEN_KEYS,
    VIDEO_GRID,
    VIDEO_PIXELS,
    VIDEO_SECONDS,
)

# Families whose packed batches the parity tests check against padded ones.
PACKABLE_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
# Attention implementations that keep packed samples apart from position-id restarts (masking_utils builds
# the block-diagonal mask), checked by the parity tests. Not flash attention: see the module docstring.
PACKABLE_ATTENTION = ("sdpa", "eager")
# One row per sample of a packed batch, in the order of its media: row, start, length, images, videos.
PACKED_SAMPLES = "packed_samples"
IGNORE_INDEX = -100

# A training batch's per-token inputs and its labels, packed; not its attention mask (packed_model_inputs).
_PER_TOKEN = (*(key for key in TOKEN_KEYS if key != "attention_mask"), "labels")
_KNOWN = {*TOKEN_KEYS, "labels", *MEDIA_KEYS}


def check_packable(family: str, attn_implementation: str) -> None:
    """Raise unless ``family`` with ``attn_implementation`` packs (``data.packing=true``).

    Raises:
        ConfigError: naming what cannot pack and why.
    """
    if family not in PACKABLE_FAMILIES:
        raise ConfigError(
            f"data.packing=true: model.family={family} cannot pack; packing is implemented and checked for "
            f"{', '.join(PACKABLE_FAMILIES)} only (its processor batches media as tiles and frame stacks "
            "that models/packing.py does not rearrange per sample). Set data.packing=false"
        )
    if attn_implementation not in PACKABLE_ATTENTION:
        raise ConfigError(
            f"data.packing=true: model.attn_implementation={attn_implementation} cannot keep packed samples "
            f"apart here; use one of {', '.join(PACKABLE_ATTENTION)} (their masks are built from the "
            "per-sample position restarts; flash attention reads them for a one-row batch only), or set "
            "data.packing=false"
        )


def best_fit_decreasing(lengths: list[int], budget: int) -> list[list[int]]:
    """Sample indices grouped into rows of at most ``budget`` tokens: longest first, each into the row it
    fills most tightly (the first such row on a tie), a new row when none has room. A sample longer than
    ``budget`` gets a row of its own. Deterministic: ties in length keep the samples' order."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fitting = [r for r in range(len(rows)) if room[r] >= lengths[index]]
        if fitting:
            best = min(fitting, key=lambda r: (room[r], r))
            rows[best].append(index)
            room[best] -= lengths[index]
        else:
            rows.append([index])
            room.append(budget - lengths[index])
    return rows


def pack_batch(
    batch: dict, media_counts: list[tuple[int, int]], pad_id: int, budget: int | None = None
) -> dict:
    """A right-padded training batch (``VideoChatAdapter.training_batch``) packed into rows.

    Args:
        batch: the processor's outputs and ``labels``, one row per sample, right-padded.
        media_counts: per sample, its (images, videos), in the batch's order.
        pad_id: the token that fills the end of a short packed row.
        budget: tokens per packed row; None: the longest sample's length (no row is longer than the padded
            batch's rows, so per-row attention never costs more than unpacked).

    Returns:
        The packed batch: per-token tensors ``(rows, length)``, media tensors reordered to follow their
        samples, ``PACKED_SAMPLES``; no ``attention_mask`` (see :func:`packed_model_inputs`).

    Raises:
        ValueError: a key this module does not know how to rearrange (it would otherwise be dropped).
    """
    unknown = set(batch) - _KNOWN
    if unknown:
        raise ValueError(f"pack_batch: no rule to pack the batch's {sorted(unknown)}")
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    if batch["attention_mask"][:, 0].min() == 0:
        raise ValueError("pack_batch: the batch must be right-padded (training_batch pads right)")
    rows = best_fit_decreasing(lengths, budget or max(lengths))
    order = [i for row in rows for i in row]
    width = max(sum(lengths[i] for i in row) for row in rows)
    packed = {
        key: torch.full((len(rows), width), pad_id if key == "input_ids" else 0, dtype=batch[key].dtype)
        for key in _PER_TOKEN
        if key in batch
    }
    packed["labels"].fill_(IGNORE_INDEX)
    placed = []
    for row_index, row in enumerate(rows):
        start = 0
        for i in row:
            for key in packed:
                packed[key][row_index, start : start + lengths[i]] = batch[key][i, : lengths[i]]
            packed["labels"][row_index, start] = IGNORE_INDEX  # never a target, as a row's first token
            placed.append([row_index, start, lengths[i], *media_counts[i]])
            start += lengths[i]
    packed.update(_media_in_order(batch, media_counts, order, {IMAGE_PIXELS: IMAGE_GRID}, kind=0))
    videos = {VIDEO_PIXELS: VIDEO_GRID}
    packed.update(_media_in_order(batch, media_counts, order, videos, kind=1, values=(VIDEO_SECONDS,)))
    packed[PACKED_SAMPLES] = torch.tensor(placed, dtype=torch.long)
    return packed


def _media_in_order(
    batch: dict,
    media_counts: list[tuple[int, int]],
    order: list[int],
    pixels_to_grid: dict[str, str],
    kind: int,
    values: tuple[str, ...] = (),
) -> dict:
    """One kind of media (images: kind 0, videos: kind 1) reordered to follow ``order`` of the samples."""
    out = {}
    for pixels_key, grid_key in pixels_to_grid.items():
        if grid_key not in batch:
            continue
        grid = batch[grid_key]
        first = [0]  # index of each sample's first item of this kind
        for counts in media_counts:
            first.append(first[-1] + counts[kind])
        assert first[-1] == len(grid), f"{grid_key}: {len(grid)} items, the samples hold {first[-1]}"
        rows_per_item = grid.prod(dim=1)
        item_start = torch.cat([rows_per_item.new_zeros(1), rows_per_item.cumsum(0)])
        items = [item for i in order for item in range(first[i], first[i + 1])]
        out[grid_key] = grid[items]
        if pixels_key in batch:
            pieces = [batch[pixels_key][item_start[item] : item_start[item + 1]] for item in items]
            out[pixels_key] = torch.cat(pieces)
        for key in values:
            if key in batch:
                out[key] = batch[key][items]
    return out


def rope_owner(model: torch.nn.Module) -> torch.nn.Module:
    """The module of ``model`` (wrapped by PEFT, DDP, … or not) whose ``get_rope_index`` gives positions.

    Raises:
        ConfigError: the model has none (a family that does not pack).
    """
    owner = next((m for m in model.modules() if callable(getattr(m, "get_rope_index", None))), None)
    if owner is None:
        raise ConfigError(f"{type(model).__name__} has no get_rope_index: it cannot take packed batches")
    return owner


def packed_model_inputs(model: torch.nn.Module, batch: dict, owner: torch.nn.Module | None = None) -> dict:
    """The model's inputs for a packed batch: its positions per sample and no attention mask.

    Args:
        model: the model the batch goes to (its ``get_rope_index`` gives every sample's positions).
        batch: a packed batch (:func:`pack_batch`), on any device.
        owner: ``rope_owner(model)``, when the caller keeps it.
    """
    owner = owner or rope_owner(model)
    inputs = {key: value for key, value in batch.items() if key != PACKED_SAMPLES}
    inputs["position_ids"] = sample_positions(owner, batch)
    inputs["use_cache"] = False  # a cache would turn masking_utils' packed-sequence detection off
    return inputs


def sample_positions(owner: torch.nn.Module, batch: dict) -> torch.Tensor:
    """``(4, rows, length)`` positions of a packed batch: a text row restarting at 0 for every sample (and
    for the padding that ends a row), then each sample's own three M-RoPE rows from ``get_rope_index``."""
    input_ids = batch["input_ids"]
    rows, width = input_ids.shape
    positions = torch.arange(width, device=input_ids.device).repeat(4, rows, 1)
    media = {key: batch[key] for key in (IMAGE_GRID, VIDEO_GRID) if key in batch}
    seconds = {VIDEO_SECONDS: batch[VIDEO_SECONDS]} if VIDEO_SECONDS in batch else {}
    images = videos = 0
    ends = {}
    for row, start, length, n_images, n_videos in batch[PACKED_SAMPLES].tolist():
        span = slice(start, start + length)
        kwargs = {}
        if n_images:
            kwargs[IMAGE_GRID] = media[IMAGE_GRID][images : images + n_images]
        if n_videos:
            kwargs[VIDEO_GRID] = media[VIDEO_GRID][videos : videos + n_videos]
            kwargs.update({key: value[videos : videos + n_videos] for key, value in seconds.items()})
        own, _ = owner.get_rope_index(
            input_ids[row : row + 1, span],
            mm_token_type_ids=batch["mm_token_type_ids"][row : row + 1, span],
            **kwargs,
        )
        positions[1:, row, span] = own[:, 0]
        positions[0, row, span] = torch.arange(length, device=input_ids.device)
        images, videos = images + n_images, videos + n_videos
        ends[row] = max(ends.get(row, 0), start + length)
    for row, end in ends.items():  # the padding after a row's last sample: a segment of its own
        positions[:, row, end:] = torch.arange(width - end, device=input_ids.device)
    return positions
