"""The optimizer: one parameter group per tower and weight decay, each tower at its own learning rate.

``trainer.lr`` is the language model's learning rate; ``trainer.lr_vision`` and ``trainer.lr_projector``
(null: ``trainer.lr``) those of the other towers (models/towers.py). The HF Trainer builds the optimizer
through ``RecipeTrainer.create_optimizer`` (train/trainer.py) also under DeepSpeed, which then wraps it
(ZeRO-2/3) instead of building its own, and the Trainer's scheduler scales every group's learning rate
alike.
"""

from __future__ import annotations

import torch

from core.config import Tower, TrainerConfig
from core.errors import ConfigError
from models.towers import family_of, parameters_by_tower

# The Trainer logs the first group's learning rate: the language model's, trainer.lr.
_GROUP_ORDER = (Tower.language_model, Tower.projector, Tower.vision)


def tower_learning_rates(cfg: TrainerConfig) -> dict[Tower, float]:
    """Each tower's learning rate."""
    return {
        Tower.language_model: cfg.lr,
        Tower.projector: cfg.lr if cfg.lr_projector is None else cfg.lr_projector,
        Tower.vision: cfg.lr if cfg.lr_vision is None else cfg.lr_vision,
    }


def trainable_towers(model: torch.nn.Module) -> set[Tower]:
    """The towers holding at least one parameter that trains."""
    towers = parameters_by_tower(model.named_parameters(), family_of(model))
    return {tower for tower, params in towers.items() if any(p.requires_grad for _, p in params)}


def check_learning_rates(cfg: TrainerConfig, model: torch.nn.Module) -> None:
    """Raises ConfigError when a tower's own learning rate is set but nothing in that tower trains."""
    trainable = trainable_towers(model)
    for tower, key, value in (
        (Tower.vision, "trainer.lr_vision", cfg.lr_vision),
        (Tower.projector, "trainer.lr_projector", cfg.lr_projector),
    ):
        if value is not None and tower not in trainable:
            raise ConfigError(
                f"{key}={value} is set but no {tower.value} parameter trains "
                f"(see peft.freeze, peft.target_modules and peft.modules_to_save)"
            )


def param_groups(
    model: torch.nn.Module, learning_rates: dict[Tower, float], weight_decay: float, decay_names: set[str]
) -> list[dict]:
    """The trainable parameters as optimizer groups, one per (tower, decayed or not); empty ones left out.

    ``decay_names``: the parameters weight decay applies to (the Trainer's ``get_decay_parameter_names``).
    """
    towers = parameters_by_tower(model.named_parameters(), family_of(model))
    groups = []
    for tower in _GROUP_ORDER:
        for decayed in (True, False):
            params = [p for name, p in towers[tower] if p.requires_grad and (name in decay_names) == decayed]
            if params:
                decay = weight_decay if decayed else 0.0
                groups.append({"params": params, "lr": learning_rates[tower], "weight_decay": decay})
    return groups
