"""The recipe's changes to the trainer a stage runs (the HF Trainer for SFT, and for GRPO with a loss of
its own; TRL's DPO and KTO trainers for the preference stages), in one mixin: the optimizer's parameters
grouped by tower, each at its own learning rate (train/optim.py); with several ranks, a sample order that
gives every rank the same kinds of media at every step (train.data.MediaKindSampler); two per-step costs
of the stock Trainer removed (``bench/bench_trainer_overhead.py`` measures them); and, for TRL's trainers,
our rendered rows kept as they are.

The private hooks. Where HF or TRL offer a public hook, it is used (``create_optimizer``,
``get_optimizer_cls_and_kwargs``, ``get_decay_parameter_names``, ``floating_point_ops``). Three changes have
none, and are made here only, each tested against the installed libraries (tests/test_private_hooks.py
fails loudly when they change):

- ``Trainer._get_train_sampler``: the training sampler. The public hook, ``get_train_dataloader``, would
  mean rebuilding the Trainer's dataloader (column removal, worker seeding, accelerate's preparation) from
  more of its internals, not fewer.
- ``Trainer._clip_grad_norm``: the gradient clip of every step.
- ``DPOTrainer._prepare_dataset`` / ``KTOTrainer._prepare_dataset``: TRL tokenises text columns there;
  our collators render each batch from the rows, so the rows are returned as they are. TRL skips it itself
  only for datasets with image columns.

And one convention of TRL's: a PEFT model given without a reference gets a frozen copy of its adapter
named ``"ref"``; for a fresh adapter it computes what the model with the adapter switched off computes,
which TRL then uses once the copy is gone, so the copy is deleted (no second adapter held or run).

The head only where the loss reads it. Supervised fine-tuning labels the assistant tokens only (tens of
tokens in a sample of thousands), yet the stock path applies the head and an fp32 log-softmax over the whole
vocabulary at every position: 608 KB a token at 152k words, 3.4 GiB of a 6k-token Qwen2.5-VL sample saved
for backward. :class:`RecipeTrainer` runs the head at the positions whose next token is labelled only
(:func:`labelled_positions_only`), with the stock loss and gradients (tests/test_labelled_loss.py). TRL
1.16's DPO and KTO trainers already score completion tokens only, through their fused LM head
(``add_fused_lm_head``: tiled, nothing vocabulary-wide kept for backward; on CUDA the completion positions
only, on a CPU every position, tile by tile); GRPO's scoring projects the completions only
(``train.rollouts.completion_logps``).
"""

from __future__ import annotations

import torch
from accelerate.utils import DistributedType
from transformers import Trainer

from core.config import TrainerConfig
from models.packing import IGNORE_INDEX, PACKED_SAMPLES, packed_model_inputs, rope_owner
from train.data import MediaKindSampler
from train.optim import param_groups, tower_learning_rates

TRL_REFERENCE_ADAPTER = "ref"  # the name TRL gives its frozen copy of a PEFT model's adapter


class RecipeHooks:
    """Mixed in before the trainer class a stage runs (``class X(RecipeHooks, Trainer)``)."""

    def __init__(self, *args, trainer_cfg: TrainerConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainer_cfg = trainer_cfg
        self._trainable: list[torch.nn.Parameter] | None = None
        self._parameters_without_embeddings: int | None = None
        if TRL_REFERENCE_ADAPTER in getattr(self.model, "peft_config", {}):
            self.model.delete_adapter(TRL_REFERENCE_ADAPTER)

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            model = self.model if model is None else model
            decay_names = set(self.get_decay_parameter_names(model))
            lrs = tower_learning_rates(self.trainer_cfg)
            groups = param_groups(model, lrs, self.args.weight_decay, decay_names)
            optimizer_cls, kwargs = self._optimizer_class(model)
            self.optimizer = optimizer_cls(groups, **kwargs)
        return self.optimizer

    def _optimizer_class(self, model) -> tuple[type, dict]:
        """The optimizer class and its arguments: the Trainer's, or DeepSpeed's CPU Adam under offload.
        (Not ``optimizer_cls_and_kwargs``: the Trainer keeps its constructor argument of that name.)"""
        if self.trainer_cfg.offload:
            # ZeRO-Offload steps on the CPU, which DeepSpeed's CPU Adam does efficiently (DeepSpeed refuses
            # torch's AdamW there). The groups carry lr and weight decay, decoupled as in the Trainer's AdamW.
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            betas = (self.args.adam_beta1, self.args.adam_beta2)
            return DeepSpeedCPUAdam, {"betas": betas, "eps": self.args.adam_epsilon, "adamw_mode": True}
        return self.get_optimizer_cls_and_kwargs(self.args, model)

    def floating_point_ops(self, inputs: dict) -> int:
        """The stock estimate (6 x tokens x non-embedding parameters, for ``total_flos``) with the parameter
        count taken once: the stock one recounts every parameter of the model at every step."""
        if self._parameters_without_embeddings is None:
            count = getattr(self.model, "num_parameters", None)
            self._parameters_without_embeddings = count(exclude_embeddings=True) if count else 0
        tokens = inputs.get(getattr(self.model, "main_input_name", "input_ids"))
        return 6 * tokens.numel() * self._parameters_without_embeddings if tokens is not None else 0

    # -- private hooks (module docstring) ------------------------------------------------------------

    def _get_train_sampler(self, train_dataset=None) -> torch.utils.data.Sampler | None:
        dataset = self.train_dataset if train_dataset is None else train_dataset
        key = getattr(dataset, "step_key", None)  # what the samples of one step across ranks must share
        if self.args.world_size == 1 or key is None:
            return super()._get_train_sampler(train_dataset)
        world, seed = self.args.world_size, self.args.data_seed
        return MediaKindSampler(dataset.samples, self._train_batch_size, world, seed=seed, key=key)

    def _clip_grad_norm(self, model) -> torch.Tensor:
        """The stock clip, on the trainable parameters listed once instead of every parameter every step.

        accelerate's ``clip_grad_norm_`` walks all of the model's parameters each step (the frozen ones too,
        most of them under LoRA) to sort out distributed tensors the recipe never makes with plain or DDP
        training. Frozen parameters have no gradient, so the norm and the clipping are the same.
        DeepSpeed (which clips inside its engine), FSDP and the rest keep the stock path.
        """
        plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
        if self.accelerator.distributed_type not in plain:
            return super()._clip_grad_norm(model)
        if self._trainable is None:
            self._trainable = [p for p in model.parameters() if p.requires_grad]
        self.accelerator.unscale_gradients()  # fp16 loss scaling, as the stock path does
        return torch.nn.utils.clip_grad_norm_(self._trainable, self.args.max_grad_norm)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset  # TRL's trainers: the collator renders each batch from the rows


class RecipeTrainer(RecipeHooks, Trainer):
    """The HF Trainer with the recipe's hooks: supervised fine-tuning, on padded or packed batches."""

    _rope_owner: torch.nn.Module | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The stock loss, with the head applied at the labelled positions only
        (:func:`labelled_positions_only`); a packed batch (``data.packing``) first gets its per-sample
        positions from the model (models/packing.py), here in the training process, where the model is."""
        if PACKED_SAMPLES in inputs:
            if self._rope_owner is None:
                self._rope_owner = rope_owner(model)
            inputs = packed_model_inputs(model, inputs, self._rope_owner)
        if "labels" in inputs:
            inputs = labelled_positions_only(inputs)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def labelled_positions_only(inputs: dict) -> dict:
    """The model's inputs with its head applied only at the positions whose next token is labelled.

    ``logits_to_keep``, a boolean ``(rows, length)`` mask, makes every family's model (transformers'
    ``slice_logits_to_keep``) project those positions only, flattened: its logits are ``(labelled, vocab)``.
    ``shift_labels``, their next tokens, is what the model's own loss (``ForCausalLMLoss``) then scores
    instead of shifting ``labels``: the same cross-entropy over the same tokens, with ``num_items_in_batch``
    where the Trainer passes it. ``labels`` stay, so the model computes its loss and the Trainer counts
    them as before.
    """
    labels = inputs["labels"]
    next_labels = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    keep = next_labels != IGNORE_INDEX
    return {**inputs, "logits_to_keep": keep, "shift_labels": next_labels[keep]}
