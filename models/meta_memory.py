"""A training step's activation memory at any size, measured on the meta device (no weights, no compute).

A released 7-8B model built on meta (``torch.device("meta")``), with LoRA or freezing applied as the run
applies them and cast as DeepSpeed casts it, runs one forward and backward at the real shapes of a sample in
seconds of CPU. The whole model cannot be called at once on meta (its forward reads data: grid sizes,
placeholder counts, ``nonzero``), so ``measure_step`` calls it piece by piece, as the model's own forward
does: the vision tower with its index tensors computed on the CPU from the real grid, the projector, the
placeholder scatter into the token embeddings, the language model on ``inputs_embeds``, then the head and
the loss. Two counters watch it:

- the bytes saved for backward (a saved-tensors hook, one count per storage, parameters excluded);
- the live bytes of every tensor an op makes (a dispatch mode holding a weak reference on each storage),
  whose peak over forward *and* backward (recomputation under checkpointing included) is what the GPU must
  hold beyond its model states.

Attention runs through ``models.meta_attention`` (what the fused GPU kernels save), not SDPA's math path.
The same code runs on a CPU model, which is how the tests check that meta measures what real compute holds.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import masking_utils, vision_utils

from models.meta_attention import fused_kernel_sdpa

HeadAndLoss = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]

VISION, PROJECTOR, LANGUAGE_MODEL, HEAD_AND_LOSS = "vision", "projector", "language_model", "head_and_loss"
BACKWARD = "backward"  # where a peak falls in the backward pass (recomputation under checkpointing too)
_QWEN_VL = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
_PROJECTORS = ("merger", "deepstack_merger_list", "multi_modal_projector")  # module names, any depth

Grid = tuple[int, int, int]


@dataclass(frozen=True)
class SampleShape:
    """What one training sample feeds the model.

    ``tokens`` is the sequence length N (text and visual placeholders), ``labelled_tokens`` the positions
    that carry a label (the assistant's targets). The media, per family:

    - Qwen2-VL, Qwen2.5-VL, Qwen3-VL: ``video_grid_thw`` / ``image_grid_thw`` rows, as the processor gives;
    - LLaVA-OneVision: ``video_frames`` at the tower's 384 x 384, and ``image_sizes`` (H, W) of each image
      in pixels before tiling (anyres picks its tiles and unpads from it);
    - InternVL: ``video_frames`` and ``image_tiles`` at the tower's 448 x 448 (thumbnail included).
    """

    tokens: int
    labelled_tokens: int
    video_grid_thw: tuple[Grid, ...] = ()
    image_grid_thw: tuple[Grid, ...] = ()
    video_frames: int = 0
    image_tiles: int = 0
    image_sizes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class StepMemory:
    """One training step's activation memory, in bytes, beyond the model states.

    ``saved_bytes`` is what autograd saved for backward during the forward (outside checkpointed layers
    under checkpointing); ``held_bytes`` everything still live when the loss is made (saved tensors and
    what checkpointing keeps: each layer's input); ``peak_bytes`` the most live at once over forward and
    backward, temporaries included. ``saved_by_part`` splits ``saved_bytes`` over the vision tower, the
    projector, the language model and the head with its loss; ``peak_at`` names the part (and pass) where
    the peak fell. ``approximations`` says what was not measured exactly.
    """

    saved_bytes: int
    held_bytes: int
    peak_bytes: int
    saved_by_part: dict[str, int]
    peak_at: str
    approximations: tuple[str, ...] = field(default_factory=tuple)


def full_head_and_loss(
    model: torch.nn.Module, hidden_states: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """The head on every position and the model's own ``loss_function``, as training computes them today."""
    base = unwrapped(model)
    logits = base.lm_head(hidden_states)
    vocab_size = base.config.get_text_config().vocab_size
    return base.loss_function(logits=logits, labels=labels, vocab_size=vocab_size)


def measure_step(
    model: torch.nn.Module,
    sample: SampleShape,
    batch_size: int,
    gradient_checkpointing: bool,
    *,
    head_and_loss: HeadAndLoss = full_head_and_loss,
    drop_param_grads: bool = True,
) -> StepMemory:
    """Measure one forward and backward of ``batch_size`` copies of ``sample`` on ``model``'s device.

    ``model`` is the run's model after ``train.modes.apply_peft`` and the dtype cast DeepSpeed would make,
    without checkpointing: with ``gradient_checkpointing`` it is enabled as the Trainer enables it and
    removed after. ``drop_param_grads`` frees each parameter gradient as it is made (DeepSpeed takes it into
    its buckets); without it they stay, as plain DDP keeps them.

    Raises:
        ValueError: the family is not one of the five, or the sample's media do not fit its tokens.
    """
    base = unwrapped(model)
    family = base.config.model_type
    if family not in _WIRING:
        raise ValueError(f"no meta-memory wiring for model family {family!r}")
    model_storages = _model_storages(base)
    live = _LiveBytes(model_storages)
    saved = _SavedBytes(model_storages, live)
    was_training = model.training
    model.train()
    with ExitStack() as stack:
        if gradient_checkpointing:
            model.activation_checkpointing_enable()  # what the Trainer calls: non-reentrant, inputs need grad
            stack.callback(_disable_checkpointing, model)
        if drop_param_grads:
            for handle in _drop_grads_when_made(base):
                stack.callback(handle.remove)
        stack.enter_context(fused_kernel_sdpa())
        stack.enter_context(_no_packed_sequence_check())
        stack.enter_context(_static_rope(base))
        stack.enter_context(_projector_label(base, live))
        stack.enter_context(live)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, _unpack):
            loss, approximations = _WIRING[family](base, sample, batch_size, model, head_and_loss, live)
        held = live.current
        live.part = BACKWARD
        loss.backward()
        del loss
    model.train(was_training)
    return StepMemory(
        saved_bytes=sum(saved.by_part.values()),
        held_bytes=held,
        peak_bytes=live.peak,
        saved_by_part=dict(saved.by_part),
        peak_at=live.peak_at,
        approximations=(*approximations, *_batch_approximation(batch_size)),
    )


# ----------------------------------------------------------------------------------------------- counters


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _model_storages(model: torch.nn.Module) -> set[int]:
    """The storages of the parameters and buffers: model states, not activations."""
    return {_storage_key(t) for t in (*model.parameters(), *model.buffers())}


class _SavedBytes:
    """Bytes saved for backward, once per storage, by the part running when it was first saved."""

    def __init__(self, model_storages: set[int], live: _LiveBytes) -> None:
        self.model_storages = model_storages
        self.live = live  # whose ``part`` names what runs
        self.seen: set[int] = set()
        self.by_part: dict[str, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self.model_storages and key not in self.seen:
            self.seen.add(key)
            # A freed storage's address may be given to the next one: forget it then, or a later storage at
            # the same address would go uncounted (on real memory far more often than on meta).
            weakref.finalize(storage, self.seen.discard, key)
            part = self.live.part
            self.by_part[part] = self.by_part.get(part, 0) + storage.nbytes()
        return tensor


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


class _LiveBytes(TorchDispatchMode):
    """Live bytes of every storage an op outputs (model states excluded) and their peak, until each is freed.

    A storage is counted from the op that makes it until its last reference goes (a weak reference's
    finaliser), whoever holds it: a saved tensor, checkpointing's kept inputs, autograd's gradients.
    """

    def __init__(self, model_storages: set[int]) -> None:
        super().__init__()
        self.model_storages = model_storages
        self.live: set[int] = set()
        self.current = self.peak = 0
        self.part = VISION
        self.peak_at = VISION

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in _tensors(out):
            self._track(tensor)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live or key in self.model_storages:
            return
        self.live.add(key)
        self.current += storage.nbytes()
        weakref.finalize(storage, self._free, key, storage.nbytes())
        if self.current > self.peak:
            self.peak, self.peak_at = self.current, self.part

    def _free(self, key: int, nbytes: int) -> None:
        self.live.discard(key)
        self.current -= nbytes


def _tensors(out) -> Iterator[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            yield from _tensors(item)


@contextmanager
def _projector_label(base: torch.nn.Module, live: _LiveBytes) -> Iterator[None]:
    """Name the projector's modules' forward work (recomputation included) as the projector's; the wiring
    names the vision tower's, the language model's and the head's."""
    handles, outer = [], []

    def enter(*_) -> None:
        outer.append(live.part)
        live.part = PROJECTOR

    def leave(*_) -> None:
        live.part = outer.pop()

    for name, module in base.named_modules():
        if name.rsplit(".", 1)[-1] in _PROJECTORS:
            handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _drop_grads_when_made(model: torch.nn.Module) -> list:
    def drop(param: torch.Tensor) -> None:
        param.grad = None

    return [p.register_post_accumulate_grad_hook(drop) for p in model.parameters() if p.requires_grad]


def _disable_checkpointing(model: torch.nn.Module) -> None:
    model.activation_checkpointing_disable()
    unwrapped(model).disable_input_require_grads()


@contextmanager
def _no_packed_sequence_check() -> Iterator[None]:
    """The causal-mask code reads position values to detect packed samples (``.item()``, which meta has
    not); one unpacked sample per row is what is measured, so the answer is known: none."""
    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


@contextmanager
def _static_rope(base: torch.nn.Module) -> Iterator[None]:
    """Dynamic NTK rotary embeddings (InternVL3's language model) read the longest position (``.item()``) to
    rescale their frequencies: other values, the same tensors, so the measurement takes them as static."""
    dynamic = [m for m in base.modules() if "dynamic" in str(getattr(m, "rope_type", ""))]
    kinds = [m.rope_type for m in dynamic]
    for module in dynamic:
        module.rope_type = "default"
    try:
        yield
    finally:
        for module, kind in zip(dynamic, kinds, strict=True):
            module.rope_type = kind


def _batch_approximation(batch_size: int) -> tuple[str, ...]:
    if batch_size == 1:
        return ()
    return (
        f"batch of {batch_size} equal samples without a padding mask (a padded batch gives SDPA a mask: "
        "the efficient kernel then gets k and v repeated over the query heads, a few % more)",
    )


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


# ------------------------------------------------------------------------------------------------ wiring


def _device(base: torch.nn.Module) -> torch.device:
    return next(base.parameters()).device


def _dtype(base: torch.nn.Module) -> torch.dtype:
    return base.model.language_model.embed_tokens.weight.dtype


def _token_inputs(base: torch.nn.Module, sample: SampleShape, batch_size: int) -> tuple[torch.Tensor, ...]:
    """Token ids and labels as the collator makes them (values only matter for real compute)."""
    device, vocab = _device(base), base.config.get_text_config().vocab_size
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(vocab, (batch_size, sample.tokens), generator=generator).to(device)
    labels = torch.full((batch_size, sample.tokens), -100, dtype=torch.long)
    labels[:, sample.tokens - sample.labelled_tokens :] = torch.randint(
        vocab, (batch_size, sample.labelled_tokens), generator=generator
    )
    return input_ids, labels.to(device)


def _scatter_features(embeds: torch.Tensor, features: torch.Tensor, start: int) -> torch.Tensor:
    """Put ``features`` (rows of B samples, each's placeholders consecutive from ``start``) into the token
    embeddings, as the model's ``masked_scatter`` of its placeholder mask does."""
    batch, tokens, _ = embeds.shape
    per_sample = features.shape[0] // batch
    if start + per_sample > tokens:
        raise ValueError(f"{per_sample} visual tokens from position {start} do not fit in {tokens} tokens")
    mask = torch.zeros(batch, tokens, 1, dtype=torch.bool)
    mask[:, start : start + per_sample] = True
    mask = mask.to(embeds.device).expand_as(embeds)
    return embeds.masked_scatter(mask, features.to(embeds.dtype))


def _language_model_and_loss(
    base, model, head_and_loss, live, embeds, labels, position_ids, **lm_kwargs
) -> torch.Tensor:
    live.part = LANGUAGE_MODEL
    hidden = base.model.language_model(inputs_embeds=embeds, position_ids=position_ids, **lm_kwargs)
    live.part = HEAD_AND_LOSS
    return head_and_loss(model, hidden.last_hidden_state, labels)


def _qwen_vision_kwargs(visual: torch.nn.Module, grid: torch.Tensor, family: str) -> dict:
    """The vision tower's data-dependent index tensors, from the grid on the CPU (``cu_seqlens`` stay on
    the CPU: the tower only reads them into Python lists)."""
    device, config, merge = _device(visual), visual.config, visual.config.spatial_merge_size
    kwargs = {
        "position_ids": vision_utils.get_vision_position_ids(grid, merge).to(device),
        "cu_seqlens": vision_utils.get_vision_cu_seqlens(grid),
    }
    if family == "qwen2_5_vl":
        window_index, cu_window_seqlens = vision_utils.get_vision_window_index(
            grid, merge, config.window_size, config.patch_size
        )
        kwargs |= {"window_index": window_index.to(device), "cu_window_seqlens": cu_window_seqlens}
    if family == "qwen3_vl":
        indices, weights = vision_utils.get_vision_interpolation_indices_and_weights(
            grid,
            num_grid_per_side=visual.num_grid_per_side,
            mode=visual.interpolation_mode,
            align_corners=visual.interpolation_align_corners,
            spatial_merge_size=merge,
        )
        kwargs |= {"interp_indices": indices.to(device), "interp_weights": weights.to(device)}
    return kwargs


def _qwen_visual(base, rows: tuple[Grid, ...], batch_size: int):
    """One vision-tower call on the batch's images (or videos), as ``get_image_features`` makes it."""
    visual, family = base.model.visual, base.config.model_type
    grid = torch.tensor(rows * batch_size, dtype=torch.long)
    patch_dim = visual.config.in_channels * visual.config.temporal_patch_size * visual.config.patch_size**2
    pixels = torch.zeros(int(grid.prod(-1).sum()), patch_dim, dtype=_dtype(base), device=_device(base))
    return visual(pixels, grid_thw=grid, **_qwen_vision_kwargs(visual, grid, family))


def _qwen_step(base, sample, batch_size, model, head_and_loss, live):
    input_ids, labels = _token_inputs(base, sample, batch_size)
    live.part = LANGUAGE_MODEL
    embeds = base.model.language_model.embed_tokens(input_ids)
    deepstack, start, approximations = [], 1, ()
    for rows in (sample.image_grid_thw, sample.video_grid_thw):  # images first, as the model's forward
        if not rows:
            continue
        live.part = VISION
        output = _qwen_visual(base, rows, batch_size)
        embeds = _scatter_features(embeds, output.pooler_output, start)
        start += output.pooler_output.shape[0] // batch_size
        deepstack.append(getattr(output, "deepstack_features", None))
    position_ids = torch.zeros(3, batch_size, sample.tokens, dtype=torch.long, device=_device(base))
    lm_kwargs = {}
    if base.config.model_type == "qwen3_vl" and deepstack:
        lm_kwargs, approximations = _deepstack_inputs(base, deepstack, batch_size, sample.tokens, start)
    with _deepstack_by_index(base):
        loss = _language_model_and_loss(
            base, model, head_and_loss, live, embeds, labels, position_ids, **lm_kwargs
        )
    return loss, approximations


def _deepstack_inputs(base, deepstack, batch_size: int, tokens: int, end: int):
    """Qwen3-VL's deepstack features of every visual token, per injected layer, and their flat positions."""
    per_layer = [torch.cat(features) for features in zip(*deepstack, strict=True)]
    positions = torch.arange(1, end)
    index = (torch.arange(batch_size)[:, None] * tokens + positions).flatten().to(_device(base))
    note = (
        "Qwen3-VL deepstack: visual positions indexed by an int64 index instead of a bool mask "
        "(8 bytes per visual token instead of 1 per token)",
    )
    return {"visual_pos_masks": index, "deepstack_visual_embeds": per_layer}, note


@contextmanager
def _deepstack_by_index(base) -> Iterator[None]:
    """Qwen3-VL adds the deepstack features at the visual positions through a bool mask, which needs
    ``nonzero`` (no shape on meta); this does the same clone, gather-add and scatter with the index."""
    text_model = base.model.language_model
    if base.config.model_type != "qwen3_vl":
        yield
        return

    def deepstack_process(self, hidden_states, index, visual_embeds):
        hidden_states = hidden_states.clone()
        flat = hidden_states.view(-1, hidden_states.shape[-1])
        flat[index] = flat[index] + visual_embeds.to(hidden_states.dtype)
        return hidden_states

    text_model._deepstack_process = types.MethodType(deepstack_process, text_model)
    try:
        yield
    finally:
        del text_model._deepstack_process


def _tiles(base, count: int, batch_size: int) -> torch.Tensor:
    size = base.config.vision_config.image_size  # an int, or InternVL's [height, width]
    height, width = size if isinstance(size, (list, tuple)) else (size, size)
    return torch.zeros(batch_size * count, 3, height, width, dtype=_dtype(base), device=_device(base))


def _llava_onevision_step(base, sample, batch_size, model, head_and_loss, live):
    input_ids, labels = _token_inputs(base, sample, batch_size)
    live.part = LANGUAGE_MODEL
    embeds, start = base.model.language_model.embed_tokens(input_ids), 1
    if sample.image_sizes:
        live.part = VISION
        features = _llava_onevision_images(base, sample.image_sizes, batch_size)
        embeds = _scatter_features(embeds, features, start)
        start += features.shape[0] // batch_size
    if sample.video_frames:
        live.part = VISION
        frames = _tiles(base, sample.video_frames, batch_size).unflatten(0, (batch_size, sample.video_frames))
        features = base.model.get_video_features(frames).pooler_output.flatten(0, 1)
        embeds = _scatter_features(embeds, features, start)
    return _language_model_and_loss(base, model, head_and_loss, live, embeds, labels, None), ()


def _llava_onevision_images(base, image_sizes: tuple[tuple[int, int], ...], batch_size: int) -> torch.Tensor:
    """Each image's anyres tiles through the tower, projected, unpadded and packed with newlines."""
    from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

    config, sizes = base.config, torch.tensor(image_sizes * batch_size)
    counts = [
        image_size_to_num_patches(size, config.image_grid_pinpoints, config.vision_config.image_size)
        for size in sizes
    ]
    pixels = torch.cat([_tiles(base, count, 1) for count in counts])
    output = base.model.get_image_features(pixels, sizes)
    return torch.cat(output.pooler_output)


def _internvl_step(base, sample, batch_size, model, head_and_loss, live):
    input_ids, labels = _token_inputs(base, sample, batch_size)
    live.part = LANGUAGE_MODEL
    embeds = base.model.language_model.embed_tokens(input_ids)
    live.part = VISION
    tiles = _tiles(base, sample.image_tiles + sample.video_frames, batch_size)  # frames are 1-tile images
    features = base.model.get_image_features(tiles).pooler_output.flatten(0, 1)
    embeds = _scatter_features(embeds, features, 1)
    return _language_model_and_loss(base, model, head_and_loss, live, embeds, labels, None), ()


_WIRING = {
    "qwen2_vl": _qwen_step,
    "qwen2_5_vl": _qwen_step,
    "qwen3_vl": _qwen_step,
    "llava_onevision": _llava_onevision_step,
    "internvl": _internvl_step,
}
