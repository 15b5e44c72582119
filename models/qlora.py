"""QLoRA: LoRA on a base loaded in 4-bit NF4 by bitsandbytes, computing in bf16. CUDA GPUs only.

The language model's linear layers are quantized; the vision tower, the projector and ``lm_head`` stay in
bf16 (they are small, and quantizing the vision side costs accuracy out of proportion). CI has no GPU: the
checks, the quantization config and the preparation are tested there, the 4-bit load itself is not.
"""

from __future__ import annotations

import torch

from core.config import Tower, TrainerConfig
from core.errors import ConfigError
from models.towers import TOWER_PREFIXES, family_of


def check_qlora(trainer: TrainerConfig) -> None:
    """Refuse, before anything loads, a QLoRA run that cannot work here.

    Raises:
        ConfigError: with ZeRO-3, without a CUDA GPU with bf16, or without bitsandbytes.
    """
    if trainer.zero == 3:
        raise ConfigError(
            "peft.method=qlora does not combine with trainer.zero=3: transformers loads a 4-bit model "
            "without zero.Init (every rank holds the whole base anyway) and ZeRO-3 partitioning of packed "
            "4-bit weights is untested here; use trainer=zero2 (the 4-bit base is small) or peft=lora"
        )
    if not torch.cuda.is_available():
        raise ConfigError("peft.method=qlora needs a CUDA GPU (bitsandbytes' 4-bit layers); use peft=lora")
    if not torch.cuda.is_bf16_supported():
        raise ConfigError("peft.method=qlora computes in bf16, which this GPU lacks; use peft=lora")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ConfigError("peft.method=qlora needs bitsandbytes: pip install bitsandbytes") from None


def unquantized_modules(family: str) -> list[str]:
    """Module names bitsandbytes leaves as they are: the vision tower, the projector and ``lm_head``."""
    towers = TOWER_PREFIXES[family]
    return [*towers[Tower.vision], *towers[Tower.projector], "lm_head"]


def quantization_config(family: str):
    """The ``BitsAndBytesConfig`` for ``from_pretrained``: NF4 with double quantization, bf16 compute."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
        llm_int8_skip_modules=unquantized_modules(family),
    )


def prepare_quantized(model: torch.nn.Module, modules_to_save: list[str]) -> torch.nn.Module:
    """peft's k-bit preparation: every base parameter frozen, the unquantized ones upcast to fp32.

    Gradient checkpointing is left to the Trainer (``trainer.gradient_checkpointing``), which enables it
    with ``use_reentrant=False`` and input gradients, as peft would.

    Raises:
        ConfigError: a ``modules_to_save`` entry names a quantized module (its 4-bit weights cannot train).
    """
    from peft import prepare_model_for_kbit_training

    _check_modules_to_save(model, modules_to_save)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _check_modules_to_save(model: torch.nn.Module, modules_to_save: list[str]) -> None:
    keep = unquantized_modules(family_of(model))
    for name, module in model.named_modules():
        # peft's own rule for modules_to_save: the module name ends with the entry.
        entry = next((key for key in modules_to_save if name.endswith(key)), None)
        if entry is None:
            continue
        for inner, layer in module.named_modules(prefix=name):
            if isinstance(layer, torch.nn.Linear) and not any(
                inner == k or inner.startswith(f"{k}.") for k in keep
            ):
                raise ConfigError(
                    f"peft.modules_to_save entry {entry!r} names {name}, whose {inner} QLoRA quantizes to "
                    f"4 bits, which cannot train fully; adapt it with LoRA (peft.target_modules) instead"
                )
