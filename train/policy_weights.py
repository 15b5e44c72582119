"""The policy as a whole checkpoint, for a server to load (GRPO's served rollouts, train/served_rollouts.py):
the LoRA adapter merged into copies of the weights it wraps, ZeRO-3's partitions gathered, and a generation
config that samples as the loss scores."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import GenerationConfig

from core import distributed
from core.files import atomic_dir


@torch.no_grad()
def save_policy(policy, processor, out: Path, generation: GenerationConfig | None = None) -> None:
    """The policy as a whole checkpoint at ``out`` (written atomically by rank 0): its weights as
    ``policy_state_dict`` gives them, with the processor and its chat template (what any loader or server
    takes) and ``generation`` as its generation config, where given. Under ZeRO-3 every rank must call it
    (the weights are gathered from all of them); elsewhere rank 0 alone."""
    state = policy_state_dict(policy)
    if not distributed.is_main():
        return
    with atomic_dir(out) as tmp:
        _base_model(policy).save_pretrained(tmp, state_dict=state)
        processor.save_pretrained(tmp)
        if generation is not None:
            generation.save_pretrained(tmp)


def plain_sampling(policy) -> GenerationConfig:
    """The policy's generation config made to sample from the tempered distribution alone, which is what
    the loss scores: a server applies a checkpoint's own settings to every request that does not override
    them, and the Qwen-VL Instruct checkpoints ship top_k 1 and top_p 0.001 (near-greedy groups from another
    distribution), while ``transformers serve`` samples only where ``do_sample`` says so."""
    config = copy.deepcopy(_base_model(policy).generation_config)
    config.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.0)
    return config


@torch.no_grad()
def policy_state_dict(policy) -> dict[str, torch.Tensor]:
    """The policy's weights under its base model's own names, copied to the CPU: a PEFT model's active LoRA
    adapter merged into copies of the layers it wraps (the live weights are never merged and unmerged in
    place, which would drift them by rounding) and each ``modules_to_save`` copy standing for its original;
    a fully trained model's as they are.

    Under ZeRO-3 each weight is gathered whole in turn, a LoRA layer's with its factors (every rank takes
    part; only rank 0 keeps the copies, the others get an empty dict), so no rank ever holds the whole
    model twice.
    """
    model = _base_model(policy)
    adapter = policy.active_adapter if hasattr(policy, "peft_config") else None
    keep = distributed.is_main() or not distributed.zero3_enabled()
    merged = _merged_lora_weights(model, adapter, keep) if adapter else {}
    parameters = dict(model.named_parameters(remove_duplicate=False))  # tied weights under each name
    state = {}
    for key, value in model.state_dict().items():  # under ZeRO-3 a parameter's value here is a stub
        if ".lora_" in key or ".original_module." in key:
            continue
        key_in_base = _name_in_base(key, adapter)
        if key_in_base in merged:
            state[key_in_base] = merged[key_in_base]
            continue
        tensor = parameters.get(key, value)
        with _gathered([tensor] if key in parameters else []):
            if keep:
                state[key_in_base] = tensor.detach().to("cpu", copy=True)
    return state if keep else {}


def _base_model(policy):
    """The model a PEFT policy wraps; a fully trained one itself."""
    return policy.get_base_model() if hasattr(policy, "peft_config") else policy


def _name_in_base(key: str, adapter: str | None) -> str:
    """A PEFT model's state key as its base model names the weight (a ``modules_to_save`` copy's
    original, a LoRA layer's base weight); without an adapter, the key itself."""
    if adapter is None:
        return key
    return key.replace(f".modules_to_save.{adapter}.", ".").replace(".base_layer.", ".")


def _merged_lora_weights(model, adapter: str, keep: bool) -> dict[str, torch.Tensor | None]:
    """Each LoRA layer's base weight with the adapter's delta added, under the base weight's name (None
    where not ``keep``: a ZeRO-3 rank that only helps gather)."""
    from peft.tuners.lora import LoraLayer

    merged = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and adapter in (*module.lora_A, *module.lora_embedding_A):
            with _gathered(module.parameters()):  # the delta needs the base weight and both factors
                weight = module.get_base_layer().weight
                delta = module.get_delta_weight(adapter).to(weight.dtype)
                merged[f"{name}.weight"] = (weight + delta).cpu() if keep else None
    return merged


@contextmanager
def _gathered(parameters: Iterable[torch.nn.Parameter]):
    """ZeRO-3's partitioned parameters whole on every rank for the block, read only (a collective: every
    rank must enter it); nothing to do without ZeRO-3."""
    if not distributed.zero3_enabled():
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(parameters), modifier_rank=None):
        yield
