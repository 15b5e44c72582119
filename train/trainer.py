"""The HF Trainer with the recipe's changes: the optimizer's parameters grouped by tower, each at its own
learning rate (train/optim.py); with several ranks, a sample order that gives every rank the same kinds of
media at every step (train.data.MediaKindSampler); and two per-step costs of the stock Trainer removed
(``bench/bench_trainer_overhead.py`` measures them)."""

from __future__ import annotations

import torch
from accelerate.utils import DistributedType
from transformers import Trainer

from core.config import TrainerConfig
from train.data import MediaKindSampler, SampleDataset
from train.optim import param_groups, tower_learning_rates


class RecipeTrainer(Trainer):
    def __init__(self, *args, trainer_cfg: TrainerConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainer_cfg = trainer_cfg
        self._trainable: list[torch.nn.Parameter] | None = None
        self._parameters_without_embeddings: int | None = None

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            model = self.model if model is None else model
            decay_names = set(self.get_decay_parameter_names(model))
            lrs = tower_learning_rates(self.trainer_cfg)
            groups = param_groups(model, lrs, self.args.weight_decay, decay_names)
            optimizer_cls, kwargs = self._optimizer_cls_and_kwargs(model)
            self.optimizer = optimizer_cls(groups, **kwargs)
        return self.optimizer

    def _optimizer_cls_and_kwargs(self, model) -> tuple[type, dict]:
        if self.trainer_cfg.offload:
            # ZeRO-Offload steps on the CPU, which DeepSpeed's CPU Adam does efficiently (DeepSpeed refuses
            # torch's AdamW there). The groups carry lr and weight decay, decoupled as in the Trainer's AdamW.
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            betas = (self.args.adam_beta1, self.args.adam_beta2)
            return DeepSpeedCPUAdam, {"betas": betas, "eps": self.args.adam_epsilon, "adamw_mode": True}
        return self.get_optimizer_cls_and_kwargs(self.args, model)

    def _get_train_sampler(self, train_dataset=None) -> torch.utils.data.Sampler | None:
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if self.args.world_size == 1 or not isinstance(dataset, SampleDataset):
            return super()._get_train_sampler(train_dataset)
        return MediaKindSampler(
            dataset.samples, self._train_batch_size, self.args.world_size, seed=self.args.data_seed
        )

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

    def floating_point_ops(self, inputs: dict) -> int:
        """The stock estimate (6 x tokens x non-embedding parameters, for ``total_flos``) with the parameter
        count taken once: the stock one recounts every parameter of the model at every step."""
        if self._parameters_without_embeddings is None:
            count = getattr(self.model, "num_parameters", None)
            self._parameters_without_embeddings = count(exclude_embeddings=True) if count else 0
        tokens = inputs.get(getattr(self.model, "main_input_name", "input_ids"))
        return 6 * tokens.numel() * self._parameters_without_embeddings if tokens is not None else 0
