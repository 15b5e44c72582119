"""The DeepSpeed config, derived from the Hydra trainer config (never a JSON file of its own).

Batch sizes, gradient accumulation, clipping and precision are ``"auto"`` (or left out): the HF Trainer
fills them from its own arguments, which come from ``TrainerConfig``, so the two never disagree. Only what
DeepSpeed alone knows (ZeRO stage, offload) is set here. There is no optimizer section: the Trainer builds
the optimizer, with its parameters grouped by tower (train/optim.py, DeepSpeed's CPU Adam under offload),
and DeepSpeed wraps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import TrainerConfig
from core.errors import ConfigError
from core.files import write_json_atomic

ZERO_STAGES = (2, 3)


def deepspeed_config(cfg: TrainerConfig) -> dict[str, Any] | None:
    """The DeepSpeed config for ``TrainingArguments(deepspeed=...)``, or None without ZeRO.

    Raises:
        ConfigError: on a ZeRO stage other than 2 or 3, or offload without ZeRO.
    """
    if cfg.zero is None:
        if cfg.offload:
            raise ConfigError("trainer.offload needs trainer.zero (2 or 3): offload is a ZeRO feature")
        return None
    if cfg.zero not in ZERO_STAGES:
        raise ConfigError(f"trainer.zero must be one of {ZERO_STAGES} or null, got {cfg.zero!r}")
    config: dict[str, Any] = {
        # No train_batch_size: DeepSpeed derives it (micro batch x accumulation x world size). As "auto" the
        # Trainer fills it while building its arguments, before it knows the world size, and puts 1 there.
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": _zero_section(cfg),
        "steps_per_print": 10**9,  # the Trainer logs the loss; DeepSpeed's own prints only add noise
    }
    return config


# ZeRO-2's gradient-reduce and weight-allgather buckets, in elements. DeepSpeed's default, 5e8, holds
# 0.93 GiB per bucket in bf16 on every GPU (train/model_states.py counts them in the plan); 2e8 holds 0.37 GiB
# and is still more than a LoRA r64 run trains on any supported 7-8B model (161-175M parameters: one reduce
# a step, as before), while full fine-tuning reduces in ~40 buckets instead of ~16 (8B / 2e8).
ZERO2_BUCKET = int(2e8)


def _zero_section(cfg: TrainerConfig) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": cfg.zero, "overlap_comm": False, "contiguous_gradients": True}
    if cfg.zero == 2:
        zero["reduce_bucket_size"] = zero["allgather_bucket_size"] = ZERO2_BUCKET
    if cfg.zero == 3:
        # Gather the partitioned weights when saving, so checkpoints and final/ hold ordinary weights that
        # `python -m eval` and from_pretrained load without DeepSpeed.
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if cfg.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    return zero


def write_deepspeed_config(config: dict[str, Any] | None, path: str | Path) -> None:
    """Record the config (``RunDir.deepspeed_file``) before the Trainer fills in the "auto"s."""
    if config is not None:
        write_json_atomic(path, config, indent=2)
