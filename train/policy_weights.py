"""The policy as a whole checkpoint, for a server to load (GRPO's served rollouts, train/served_rollouts.py):
the LoRA adapter merged into copies of the weights it wraps, and a generation config that samples as the
loss scores."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import GenerationConfig

from core.files import atomic_dir


@torch.no_grad()
def save_policy(policy, processor, out: Path, generation: GenerationConfig | None = None) -> None:
    """The policy as a whole checkpoint at ``out`` (written atomically): a LoRA adapter's deltas added to
    fresh copies of its base weights, and its ``modules_to_save`` in place of the originals, so the live
    weights are never merged and unmerged in place (which would drift them by rounding); a fully trained
    model as it is. With the processor and its chat template: what any loader or server takes; and
    ``generation`` as its generation config, where given."""
    with atomic_dir(out) as tmp:
        if hasattr(policy, "peft_config"):
            base = policy.get_base_model()
            base.save_pretrained(tmp, state_dict=merged_state_dict(policy))
        else:
            policy.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        if generation is not None:
            generation.save_pretrained(tmp)


def plain_sampling(policy) -> GenerationConfig:
    """The policy's generation config made to sample from the tempered distribution alone, which is what
    the loss scores: a server applies a checkpoint's own settings to every request that does not override
    them, and the Qwen-VL Instruct checkpoints ship top_k 1 and top_p 0.001 (near-greedy groups from another
    distribution), while ``transformers serve`` samples only where ``do_sample`` says so."""
    config = copy.deepcopy(getattr(policy, "get_base_model", lambda: policy)().generation_config)
    config.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.0)
    return config


def merged_state_dict(policy) -> dict[str, torch.Tensor]:
    """A PEFT model's weights under its base model's own names, the active LoRA adapter merged into copies
    of the layers it wraps and each ``modules_to_save`` copy standing for its original (on the CPU)."""
    from peft.tuners.lora import LoraLayer

    adapter = policy.active_adapter
    merged = {}
    for name, module in policy.get_base_model().named_modules():
        if isinstance(module, LoraLayer) and adapter in (*module.lora_A, *module.lora_embedding_A):
            weight = module.get_base_layer().weight
            merged[f"{name}.weight"] = (weight + module.get_delta_weight(adapter).to(weight.dtype)).cpu()
    state = {}
    for key, value in policy.get_base_model().state_dict().items():
        if ".lora_" in key or ".original_module." in key:
            continue
        key = key.replace(f".modules_to_save.{adapter}.", ".").replace(".base_layer.", ".")
        state[key] = merged.get(key, value.detach().cpu())
    return state
