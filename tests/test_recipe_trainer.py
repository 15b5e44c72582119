"""The recipe's Trainer takes two per-step costs off the stock one (bench/bench_trainer_overhead.py
measures them); what it computes must stay exactly what the stock Trainer computes."""

from __future__ import annotations

import pytest
import torch
from transformers import Trainer

from core.config import ModelConfig, PeftConfig, TrainerConfig
from models.loading import load_model
from train.modes import apply_peft
from train.recipe import training_arguments
from train.trainer import RecipeTrainer


@pytest.fixture
def trainers(tiny_checkpoint, tmp_path):
    """(stock Trainer, recipe's Trainer) on one tiny model with the default LoRA, and a text batch."""
    model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    model = apply_peft(model, PeftConfig(modules_to_save=["lm_head"]))
    trainer_cfg = TrainerConfig()
    args = training_arguments(trainer_cfg, tmp_path)
    ids = torch.randint(
        0, model.config.get_text_config().vocab_size, (2, 24), generator=torch.Generator().manual_seed(0)
    )
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    return (
        Trainer(model=model, args=args),
        RecipeTrainer(model=model, args=args, trainer_cfg=trainer_cfg),
        batch,
    )


def test_clipping_gives_the_stock_norm_and_the_stock_clipped_gradients(trainers, monkeypatch):
    stock, recipe, batch = trainers
    model = stock.model
    (model(**batch).loss * 1000).backward()  # far above max_grad_norm: the clip has work to do
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    assert grads and len(grads) < len(list(model.parameters())), "LoRA: only some parameters have grads"

    stock_norm = stock._clip_grad_norm(model)
    stock_clipped = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        if name in grads:
            p.grad.copy_(grads[name])
    assert recipe.accelerator is not stock.accelerator

    def walk_every_parameter(*args, **kwargs):
        raise AssertionError("the recipe's Trainer took the stock clipping path")

    monkeypatch.setattr(recipe.accelerator, "clip_grad_norm_", walk_every_parameter)
    recipe_norm = recipe._clip_grad_norm(model)

    assert stock_norm > stock.args.max_grad_norm
    assert torch.equal(recipe_norm, stock_norm)
    for name, p in model.named_parameters():
        if name in grads:
            assert torch.equal(p.grad, stock_clipped[name]), name
        else:
            assert p.grad is None, name


def test_the_flops_estimate_is_the_stock_one_at_every_step(trainers):
    stock, recipe, batch = trainers
    expected = stock.floating_point_ops(batch)
    assert expected > 0
    assert recipe.floating_point_ops(batch) == expected
    longer = {key: torch.cat([value, value], dim=1) for key, value in batch.items()}
    assert recipe.floating_point_ops(longer) == stock.floating_point_ops(longer) == 2 * expected
    assert recipe.floating_point_ops({"labels": batch["labels"]}) == 0  # no input ids: no estimate
