"""Under gradient checkpointing a frozen vision tower stays out of the autograd graph, in every family and
on every path that turns checkpointing on (the Trainer, TRL), while what trains gets the gradients it gets
without checkpointing: LoRA, a projector in ``modules_to_save``, a vision tower that trains."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from core.config import ModelConfig, PeftConfig, PeftMethod, Tower, TrainerConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.tiny import FAMILIES, build_tiny_checkpoint
from models.towers import tower_of

PROJECTOR = {"qwen2_vl": "merger", "qwen2_5_vl": "merger", "llava_onevision": "multi_modal_projector"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family → tiny checkpoint directory, built on first use."""
    root = tmp_path_factory.mktemp("checkpointing_models")
    return lambda family: build_tiny_checkpoint(root / family, family=family)


@pytest.fixture(scope="module")
def batches(checkpoints, tmp_path_factory):
    """family → one training batch: a 4-frame clip, a question and a supervised answer."""
    from transformers import AutoProcessor

    from models.chat import make_adapter

    root = tmp_path_factory.mktemp("checkpointing_media")
    frames = np.random.default_rng(0).integers(0, 255, (8, 56, 56, 3), dtype=np.uint8)
    write_mp4(root / "v.mp4", frames, fps=8.0)
    turns = [
        Turn("user", [Part.video(str(root / "v.mp4"), 0, 1), Part.txt("What moves?")]),
        Turn("assistant", [Part.txt("A red circle")], loss=True),
    ]
    sample = Sample("s", "ovi", turns, "test", "v", (0.0, 1.0))
    cache = FrameCache(root / "cache")

    def batch(family: str) -> dict:
        processor = AutoProcessor.from_pretrained(checkpoints(family))
        adapter = make_adapter(family, processor, MediaSpec(num_frames=4), cache)
        return adapter.training_batch([adapter.render(sample, for_generation=False)])

    return batch


def _model(checkpoint, family: str, peft: PeftConfig):
    """The tiny model with ``peft`` applied as the recipe applies it; LoRA B drawn away from zero, so the
    A matrices get gradients too."""
    from models.loading import load_model
    from train.modes import apply_peft

    torch.manual_seed(0)
    model = apply_peft(load_model(ModelConfig(name_or_path=str(checkpoint), family=family))[0], peft)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.02)
    return model.train()


@contextmanager
def vision_blocks_reached(model, family: str):
    """Yields the set, filled as backward runs, of the vision tower's checkpointed blocks whose output a
    gradient reached (each block, not its inner modules)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    reached: set[str] = set()
    blocks = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, GradientCheckpointingLayer) and tower_of(name, family) is Tower.vision
    }
    assert len(blocks) == 2, "the tiny vision towers have 2 blocks"

    def watch(name: str):
        def hook(module, inputs, output):
            output = output[0] if isinstance(output, tuple) else output
            if output.requires_grad:
                output.register_hook(lambda grad: reached.add(name))

        return hook

    handles = [module.register_forward_hook(watch(name)) for name, module in blocks.items()]
    try:
        yield reached
    finally:
        for handle in handles:
            handle.remove()


def _gradients(
    model, batch: dict, family: str, checkpointing: dict | None = None
) -> tuple[dict[str, torch.Tensor], set[str]]:
    """One forward and backward on ``batch``: the trained parameters' gradients and the vision blocks
    reached. ``checkpointing``: the keyword arguments to turn it on with first, by the call the Trainer
    makes (``{}``: the Trainer's defaults)."""
    if checkpointing is not None:
        model.activation_checkpointing_enable(**checkpointing)
    with vision_blocks_reached(model, family) as reached:
        model(**batch).loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    return grads, reached


def _assert_same_gradients(checkpointed: dict, plain: dict) -> None:
    assert checkpointed.keys() == plain.keys()
    for name, grad in plain.items():
        assert grad is not None and grad.abs().sum() > 0, f"{name}: no gradient even without checkpointing"
        assert checkpointed[name] is not None, f"{name} gets no gradient under checkpointing"
        torch.testing.assert_close(checkpointed[name], grad, rtol=0.0, atol=1e-6, msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_frozen_vision_tower_runs_no_backward_in_a_checkpointed_training_step(
    family, checkpoints, batches, tmp_path
):
    from train.recipe import training_arguments
    from train.trainer import RecipeTrainer

    model = _model(checkpoints(family), family, PeftConfig())  # LoRA on the language model, vision frozen
    trainer_cfg = TrainerConfig(max_steps=1, batch_size=1, gradient_checkpointing=True)
    trainer = RecipeTrainer(
        model=model,
        args=training_arguments(trainer_cfg, tmp_path),
        trainer_cfg=trainer_cfg,
        train_dataset=[batches(family)],
        data_collator=lambda rows: rows[0],
    )
    with vision_blocks_reached(model, family) as reached:
        trainer.train()  # turns checkpointing on as every stage's trainer does, then one step
    assert model.is_activation_checkpointing and trainer.state.global_step == 1
    assert reached == set()  # without the fix: both blocks (Qwen3-VL's tower exposes no input embeddings)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava_onevision"])
def test_lora_and_projector_gradients_are_those_without_checkpointing(family, checkpoints, batches):
    peft = PeftConfig(dropout=0.0, modules_to_save=[PROJECTOR[family]])
    plain, _ = _gradients(_model(checkpoints(family), family, peft), batches(family), family)
    checkpointed, reached = _gradients(
        _model(checkpoints(family), family, peft), batches(family), family, checkpointing={}
    )
    assert any(tower_of(name, family) is Tower.projector for name in plain), "the projector trains"
    _assert_same_gradients(checkpointed, plain)
    assert reached == set()


@pytest.mark.parametrize("family", ["qwen2_5_vl", "internvl"])
@pytest.mark.parametrize("freeze", [[], [Tower.vision]], ids=["vision_trained", "vision_frozen"])
def test_full_fine_tuning_under_checkpointing_differentiates_the_vision_tower_only_when_it_trains(
    family, freeze, checkpoints, batches
):
    peft = PeftConfig(method=PeftMethod.full, freeze=freeze)
    plain, _ = _gradients(_model(checkpoints(family), family, peft), batches(family), family)
    checkpointed, reached = _gradients(
        _model(checkpoints(family), family, peft), batches(family), family, checkpointing={}
    )
    _assert_same_gradients(checkpointed, plain)
    vision_trains = any(tower_of(name, family) is Tower.vision for name in plain)
    assert vision_trains == (Tower.vision not in freeze)
    assert len(reached) == (2 if vision_trains else 0)


def test_lora_on_the_vision_tower_trains_under_reentrant_checkpointing(checkpoints, batches):
    """Reentrant checkpointing (TRL forces it for LoRA under ZeRO-3) passes gradients into a block only
    when its input requires grad: a vision tower with adapters keeps its input hook."""
    family = "qwen2_5_vl"
    targets = r".*(visual\.blocks|language_model).*\.(qkv|q_proj)"  # the vision blocks' attention too
    peft = PeftConfig(dropout=0.0, target_modules=targets, freeze=[])
    plain, _ = _gradients(_model(checkpoints(family), family, peft), batches(family), family)
    checkpointed, reached = _gradients(
        _model(checkpoints(family), family, peft),
        batches(family),
        family,
        checkpointing={"activation_checkpointing_kwargs": {"use_reentrant": True}},
    )
    assert any(tower_of(name, family) is Tower.vision for name in plain)
    _assert_same_gradients(checkpointed, plain)
    assert len(reached) == 2


def test_trl_turning_checkpointing_off_and_on_keeps_the_frozen_tower_out(checkpoints, batches):
    """What TRL's DPO and KTO trainers do to a peft model: input grads enabled in their constructor, then
    checkpointing turned off and on around every reference forward, on top of the Trainer's own call."""
    from trl.models.utils import disable_gradient_checkpointing

    family = "qwen2_5_vl"
    model = _model(checkpoints(family), family, PeftConfig(dropout=0.0))
    model.enable_input_require_grads()  # DPOTrainer / KTOTrainer.__init__, for a peft model
    model.activation_checkpointing_enable()  # Trainer.train
    for _ in range(3):
        with torch.no_grad(), disable_gradient_checkpointing(model):
            model(**batches(family))
    embeddings = model.get_input_embeddings()
    assert model.is_activation_checkpointing
    assert len(embeddings._forward_hooks) == 1, "one input hook, however often checkpointing was turned on"
    _, reached = _gradients(model, batches(family), family)
    assert reached == set()
