"""The head and the loss only where the loss reads them (issue 31): supervised fine-tuning projects the
positions whose next token is labelled only, with the stock loss and gradients; TRL's DPO and KTO trainers,
as the recipe runs them, score completion tokens through TRL's fused head, exact to full logits, and keep no
vocabulary-wide tensor for backward.

The reference is always the stock path: the HF Trainer's ``compute_loss``, which calls the model with
``labels`` (its ``ForCausalLMLoss`` over every position), on the same fp32 tiny model and batch."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import Trainer

from core.config import ModelConfig, PeftConfig, TrainerConfig
from core.decoding import MediaSpec
from core.media import FrameCache
from core.sample import Part, Sample, Turn
from core.video_io import write_mp4
from models.chat import IGNORE_INDEX, make_adapter
from models.packing import pack_batch, packed_model_inputs
from models.tiny import build_tiny_checkpoint
from models.towers import Tower, tower_of
from train.recipe import training_arguments
from train.trainer import RecipeTrainer

ACCUMULATION = 2  # micro-batches per step: the Trainer's num_items_in_batch then spans two batches
# (family, packed): Qwen2.5-VL padded and packed; LLaVA-OneVision (tiled images, and a model that takes
# num_items_in_batch where the Qwen-VL classes do not), padded.
CASES = [("qwen2_5_vl", False), ("qwen2_5_vl", True), ("llava_onevision", False)]


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> list[Sample]:
    """A video conversation of two turns (the first answer not trained), an image question, text alone."""
    root = tmp_path_factory.mktemp("labelled_media")
    frames = np.random.default_rng(0).integers(0, 255, (16, 112, 112, 3), dtype=np.uint8)
    write_mp4(root / "v.mp4", frames, fps=8.0)
    Image.fromarray(frames[0][:, :84]).save(root / "vp.jpg")
    video, vp = str(root / "v.mp4"), str(root / "vp.jpg")

    def sample(name: str, *turns: Turn) -> Sample:
        return Sample(name, "ovi", list(turns), "test", "v", (0.0, 2.0))

    return [
        sample(
            "video",
            Turn("user", [Part.video(video, 0, 1), Part.txt("What moves?")]),
            Turn("assistant", [Part.txt("A red circle moves")], loss=False),
            Turn("user", [Part.video(video, 1, 2), Part.txt("Stop.")]),
            Turn("assistant", [Part.txt("Okay, I'll stop here.")], loss=True),
        ),
        sample(
            "image",
            Turn("user", [Part.image(vp), Part.txt("What colour?")]),
            Turn("assistant", [Part.txt("red")], loss=True),
        ),
        sample(
            "text",
            Turn("user", [Part.txt("How many objects?")]),
            Turn("assistant", [Part.txt("two")], loss=True),
        ),
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``tiny(family)``: (model, adapter) of the family's tiny checkpoint, fp32, every parameter trained."""
    root, loaded = tmp_path_factory.mktemp("labelled_models"), {}

    def load(family: str):
        if family not in loaded:
            from models.loading import load_model

            path = build_tiny_checkpoint(root / family, family=family)
            model, processor = load_model(ModelConfig(name_or_path=str(path), family=family))
            adapter = make_adapter(family, processor, MediaSpec(num_frames=4), FrameCache(None))
            loaded[family] = (model.float().requires_grad_(True), adapter)
        return loaded[family]

    return load


def _batch(adapter, samples: list[Sample], packed: bool) -> dict:
    rendered = [adapter.render(s, for_generation=False) for s in samples]
    batch = dict(adapter.training_batch(rendered))
    if not packed:
        return batch
    media = [(len(r.images), len(r.videos)) for r in rendered]
    return pack_batch(batch, media, adapter.pad_id)


def _labelled(batch: dict) -> int:
    """Positions whose next token is labelled: the rows the head needs."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def _step(trainer: Trainer, model, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One micro-batch's ``training_step`` of an accumulated step, as the training loop runs it: the
    loss (normalised by the Trainer's count of the step's labelled tokens, or divided by the accumulation)
    and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    trainer.current_gradient_accumulation_steps = ACCUMULATION  # set by the training loop
    num_items = torch.tensor(_labelled(inputs) * ACCUMULATION)  # what the Trainer counts over the step
    loss = trainer.training_step(model, dict(inputs), num_items)
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return loss, grads


@contextmanager
def vocabulary_wide_saved(model, vocab: int):
    """Collects the shapes of the tensors autograd saves for backward whose last dimension is the
    vocabulary, parameters left out (the head's weight is held anyway)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes: list[tuple[int, ...]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        is_parameter = tensor.untyped_storage().data_ptr() in parameters
        if tensor.dim() and tensor.shape[-1] == vocab and not is_parameter:
            shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield shapes


def _trainers(model, tmp_path) -> tuple[Trainer, RecipeTrainer]:
    trainer_cfg = TrainerConfig(grad_accum=ACCUMULATION)
    args = training_arguments(trainer_cfg, tmp_path)
    return Trainer(model=model, args=args), RecipeTrainer(model=model, args=args, trainer_cfg=trainer_cfg)


@pytest.mark.parametrize(("family", "packed"), CASES)
def test_sft_loss_and_gradients_are_the_stock_ones(family, packed, tiny, samples, tmp_path):
    model, adapter = tiny(family)
    batch = _batch(adapter, samples, packed)
    stock, recipe = _trainers(model, tmp_path)
    # The stock path on a packed batch: the model's inputs as packing makes them, then the stock loss.
    stock_inputs = packed_model_inputs(model, batch) if packed else batch

    stock_loss, stock_grads = _step(stock, model, stock_inputs)
    loss, grads = _step(recipe, model, batch)

    torch.testing.assert_close(loss, stock_loss, rtol=1e-5, atol=1e-5)
    assert set(grads) == set(stock_grads)
    assert {tower_of(name, family) for name in grads} == set(Tower), "every tower gets its gradients"
    for name, grad in stock_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize(("family", "packed"), CASES)
def test_sft_runs_the_head_and_keeps_log_probabilities_at_the_labelled_positions_only(
    family, packed, tiny, samples, tmp_path
):
    """The memory effect, without a GPU: the head's output and the fp32 log-probabilities saved for
    backward have one row per labelled position, not one per position of the batch."""
    model, adapter = tiny(family)
    batch = _batch(adapter, samples, packed)
    _, recipe = _trainers(model, tmp_path)
    vocab = model.config.get_text_config().vocab_size
    labelled, positions = _labelled(batch), batch["input_ids"].numel()
    assert 0 < 4 * labelled < positions, "the test needs far fewer labelled positions than positions"
    heads = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, out: heads.append(out.shape))
    try:
        with vocabulary_wide_saved(model, vocab) as saved:
            recipe.compute_loss(model, batch)
    finally:
        hook.remove()
    assert heads == [(labelled, vocab)]
    assert saved and all(shape == (labelled, vocab) for shape in saved), saved


# -- DPO and KTO: TRL's fused head ---------------------------------------------------------------


@pytest.fixture(scope="module")
def preference_model(tiny):
    """The tiny Qwen2.5-VL under LoRA with a trained adapter (the policy differs from the reference)."""
    from train.modes import apply_peft

    model, adapter = tiny("qwen2_5_vl")
    peft_model = apply_peft(copy.deepcopy(model), PeftConfig(dropout=0.0))  # the SFT tests' model stays
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    return peft_model, adapter


def _pair_samples(samples: list[Sample]):
    """Two preference pairs of the test's samples: each trained answer chosen, a wrong one rejected."""
    from core.pairs import PreferencePair

    return [
        PreferencePair(samples[0], "Sure, go on.", "ignores the stop", "continue", []),
        PreferencePair(samples[1], "blue", "wrong colour", "answer", []),
    ]


def _dpo_trainer(peft_model, adapter, samples, tmp_path):
    import datasets
    from trl import DPOConfig

    from train.preference import PairCollator, PreferenceTrainer

    pairs = _pair_samples(samples)
    trainer_cfg = TrainerConfig(batch_size=2)
    args = training_arguments(
        trainer_cfg, tmp_path, None, DPOConfig, beta=0.1, max_length=None, gradient_checkpointing=False
    )
    trainer = PreferenceTrainer(
        model=peft_model,
        args=args,
        trainer_cfg=trainer_cfg,
        processing_class=adapter.processor,
        train_dataset=datasets.Dataset.from_list([p.to_row() for p in pairs]),
        data_collator=PairCollator(adapter),
    )
    return trainer, PairCollator(adapter)([p.to_row() for p in pairs])


def _full_logit_completion_logps(model, batch: dict) -> torch.Tensor:
    """Each row's summed completion log-probability from the whole logits and a full log-softmax."""
    inputs = {k: v for k, v in batch.items() if k != "completion_mask"}
    logits = model(**inputs, use_cache=False).logits[:, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return (picked * batch["completion_mask"][:, 1:]).sum(dim=-1)


def test_dpo_scores_completions_as_full_logits_do_and_keeps_no_vocabulary_wide_tensor(
    preference_model, samples, tmp_path
):
    """TRL's fused head (what DPO and KTO score with) gives the full-logit DPO loss and gradients within
    1e-5, never calls the head module on the batch and saves nothing vocabulary-wide for backward."""
    import torch.nn.functional as F

    peft_model, adapter = preference_model
    trainer, batch = _dpo_trainer(peft_model, adapter, samples, tmp_path)
    model = trainer.model
    vocab = model.config.get_text_config().vocab_size
    calls = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, out: calls.append(out.shape))
    model.zero_grad(set_to_none=True)
    try:
        with vocabulary_wide_saved(model, vocab) as saved:
            loss = trainer.compute_loss(model, batch)
    finally:
        hook.remove()
    assert calls == [] and saved == [], (calls, saved)
    loss.backward()
    fused = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    policy = _full_logit_completion_logps(model, batch)
    with torch.no_grad(), model.disable_adapter():
        reference = _full_logit_completion_logps(model, batch)
    chosen, rejected = (policy - reference).chunk(2)
    full_loss = -F.logsigmoid(trainer.beta * (chosen - rejected)).mean()  # DPO's sigmoid loss
    full_loss.backward()
    torch.testing.assert_close(loss, full_loss, rtol=1e-5, atol=1e-5)
    assert fused, "gradients must flow"
    for name, grad in fused.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, rtol=1e-5, atol=1e-5)
    model.zero_grad(set_to_none=True)


def test_kto_keeps_no_vocabulary_wide_tensor_for_backward(preference_model, samples, tmp_path):
    import datasets

    from core.config import StageConfig, TrainConfig
    from core.pairs import unpaired
    from core.run import Run
    from core.rundir import RunDir
    from train.data import TrainingSet
    from train.preference import UnpairedCollator, UnpairedTrainer, kto_arguments
    from train.preference_config import PreferenceConfig

    peft_model, adapter = preference_model
    reactions = unpaired(_pair_samples(samples))
    trainer_cfg = TrainerConfig(batch_size=len(reactions))
    stage = StageConfig(preference=PreferenceConfig())  # as the run resolves it
    run = Run(TrainConfig(trainer=trainer_cfg, stage=stage), RunDir(tmp_path))
    arguments_class, kto_kwargs = kto_arguments(run, TrainingSet(reactions, [], {}))
    args = training_arguments(trainer_cfg, tmp_path, None, arguments_class, **kto_kwargs, use_cpu=True)
    trainer = UnpairedTrainer(
        model=peft_model,
        args=args,
        trainer_cfg=trainer_cfg,
        processing_class=adapter.processor,
        train_dataset=datasets.Dataset.from_list([r.to_row() for r in reactions]),
        data_collator=UnpairedCollator(adapter),
    )
    batch = UnpairedCollator(adapter)([r.to_row() for r in reactions])
    model = trainer.model
    calls = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, out: calls.append(out.shape))
    try:
        with vocabulary_wide_saved(model, model.config.get_text_config().vocab_size) as saved:
            loss = trainer.compute_loss(model, batch)
    finally:
        hook.remove()
    assert calls == [] and saved == [], (calls, saved)
    loss.backward()
    assert any(p.grad is not None for p in model.parameters()), "gradients must flow"
    model.zero_grad(set_to_none=True)
