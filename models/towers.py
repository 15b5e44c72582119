"""Which parameters are the vision tower, the projector and the language model, per model family.

Freezing (``peft.freeze``) and the per-tower learning rates (``trainer.lr_vision``, ``trainer.lr_projector``)
both go through ``tower_of``. The prefixes are module names as the transformers classes name them (the
same for a tiny test model and a real checkpoint of a family); a parameter belongs to the tower of the
longest prefix it starts with, so Qwen-VL's merger (``model.visual.merger``) is the projector although it
lives inside the vision module.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from core.config import Tower
from core.errors import ConfigError

_LANGUAGE_MODEL = ("model.language_model", "lm_head")  # embeddings live inside model.language_model
_QWEN_VL = {
    Tower.vision: ("model.visual",),
    Tower.projector: ("model.visual.merger",),
    Tower.language_model: _LANGUAGE_MODEL,
}
_TILED = {  # LLaVA-OneVision and InternVL: a separate vision tower and projector
    Tower.vision: ("model.vision_tower",),
    Tower.projector: ("model.multi_modal_projector",),
    Tower.language_model: _LANGUAGE_MODEL,
}

TOWER_PREFIXES: dict[str, dict[Tower, tuple[str, ...]]] = {
    "qwen2_vl": _QWEN_VL,
    "qwen2_5_vl": _QWEN_VL,
    # The deepstack mergers project features of earlier vision layers into the language model too.
    "qwen3_vl": {**_QWEN_VL, Tower.projector: ("model.visual.merger", "model.visual.deepstack_merger_list")},
    # image_newline: the learnt embedding placed after each row of image features, in the LM's space.
    "llava_onevision": {**_TILED, Tower.projector: ("model.multi_modal_projector", "model.image_newline")},
    "internvl": _TILED,
}

_PEFT_PREFIX = "base_model.model."  # what peft's wrapper puts before every parameter name


def family_of(model: torch.nn.Module) -> str:
    """The model's family: its config's ``model_type`` (``load_model`` checks it equals ``model.family``)."""
    return model.config.model_type


def tower_of(name: str, family: str) -> Tower:
    """The tower of parameter ``name`` (plain, or as named inside a peft wrapper).

    Raises:
        ConfigError: ``family`` has no tower map, or the parameter is in none of its towers.
    """
    if family not in TOWER_PREFIXES:
        raise ConfigError(f"model.family={family!r} has no tower map in models/towers.py")
    name = name.removeprefix(_PEFT_PREFIX)
    matches = [
        (len(prefix), tower)
        for tower, prefixes in TOWER_PREFIXES[family].items()
        for prefix in prefixes
        if name == prefix or name.startswith(f"{prefix}.")
    ]
    if not matches:
        raise ConfigError(f"parameter {name} of the {family} model is in no tower of models/towers.py")
    return max(matches, key=lambda match: match[0])[1]


def parameters_by_tower(
    named_parameters: Iterable[tuple[str, torch.nn.Parameter]], family: str
) -> dict[Tower, list[tuple[str, torch.nn.Parameter]]]:
    """``(name, parameter)`` pairs grouped by tower, every tower present (possibly empty), in model order."""
    towers: dict[Tower, list[tuple[str, torch.nn.Parameter]]] = {tower: [] for tower in Tower}
    for name, param in named_parameters:
        towers[tower_of(name, family)].append((name, param))
    return towers


def numel(param: torch.nn.Parameter) -> int:
    """The parameter's full size, also when ZeRO-3 holds only this rank's partition of it."""
    return getattr(param, "ds_numel", param.numel())


def is_partitioned(model: torch.nn.Module) -> bool:
    """Whether every parameter is a ZeRO-3 partition (``deepspeed.zero.Init`` at load)."""
    return all(hasattr(param, "ds_id") for param in model.parameters())
