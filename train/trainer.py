"""The HF Trainer with the recipe's two changes: the optimizer's parameters grouped by tower, each at its
own learning rate (train/optim.py), and, with several ranks, a sample order that gives every rank the
same kinds of media at every step (train.data.MediaKindSampler)."""

from __future__ import annotations

import torch
from transformers import Trainer

from train.config import TrainerConfig
from train.data import MediaKindSampler, SampleDataset
from train.optim import param_groups, tower_learning_rates


class RecipeTrainer(Trainer):
    def __init__(self, *args, trainer_cfg: TrainerConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainer_cfg = trainer_cfg

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
