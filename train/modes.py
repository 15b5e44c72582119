"""Training modes: which parameters train under LoRA, QLoRA and full fine-tuning (``peft.*``).

Full fine-tuning trains every tower (models/towers.py) that ``peft.freeze`` does not list. Under LoRA and
QLoRA, ``peft.target_modules`` and ``peft.modules_to_save`` decide, and ``peft.freeze`` guards them: a
frozen tower they would train is a ConfigError before training starts. Under gradient checkpointing,
only the towers that train get input gradients (``models.checkpointing``): a frozen vision tower stays out
of the autograd graph.
"""

from __future__ import annotations

import torch

from core.config import PeftConfig, PeftMethod, Tower
from core.errors import ConfigError
from models.checkpointing import require_input_grads_where_trained
from models.qlora import prepare_quantized
from models.towers import family_of, tower_of


def apply_peft(model: torch.nn.Module, cfg: PeftConfig) -> torch.nn.Module:
    """Wrap the model for LoRA or QLoRA, or mark the unfrozen towers trainable for full fine-tuning.

    Raises:
        ConfigError: ``peft.freeze`` contradicts the LoRA targets or freezes every tower; a QLoRA
            ``modules_to_save`` entry names a quantized module; a parameter is in no tower.
    """
    require_input_grads_where_trained(model)  # the model itself: a peft wrapper forwards the call to it
    if cfg.method is PeftMethod.full:
        _train_unfrozen_towers(model, cfg.freeze)
        return model
    from peft import LoraConfig, get_peft_model

    if cfg.method is PeftMethod.qlora:
        model = prepare_quantized(model, cfg.modules_to_save)
    lora = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.target_modules,
        modules_to_save=list(cfg.modules_to_save) or None,
    )
    model = get_peft_model(model, lora)
    _check_frozen_towers_stay_frozen(model, cfg.freeze)
    return model


def _train_unfrozen_towers(model: torch.nn.Module, freeze: list[Tower]) -> None:
    if set(freeze) == set(Tower):
        raise ConfigError("peft.freeze lists every tower: nothing would train under peft.method=full")
    family = family_of(model)
    for name, param in model.named_parameters():
        param.requires_grad = tower_of(name, family) not in freeze


def _check_frozen_towers_stay_frozen(model: torch.nn.Module, freeze: list[Tower]) -> None:
    family = family_of(model)
    for name, param in model.named_parameters():
        tower = tower_of(name, family)  # every parameter, so a gap in the tower map shows on any run
        if param.requires_grad and tower in freeze:
            raise ConfigError(
                f"peft.freeze lists {tower.value}, but peft.target_modules / peft.modules_to_save train "
                f"{name}; drop {tower.value} from peft.freeze or change the LoRA targets"
            )
