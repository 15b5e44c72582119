"""Gradient checkpointing that keeps a frozen tower out of the autograd graph.

Under checkpointing the input embeddings' outputs are made to require grad, so that checkpointed blocks
whose inputs would otherwise need no gradient still pass one to the adapters inside them (reentrant
checkpointing needs it; TRL forces it for LoRA under ZeRO-3). transformers' ``enable_input_require_grads``
does it for the input embeddings of *every* sub-model: the language model's token embeddings, and also the
vision tower's patch embedding (``patch_embed``, ``patch_embedding``, ``patch_embeddings``). A frozen
vision tower is then checkpointed, recomputed and differentiated in every backward, though nothing in it
trains: at 64 frames on the 7-8B families, 1.9-3.7 GiB held and roughly 16% more compute per step.

That method is what every stage reaches: the HF Trainer calls it as it turns checkpointing on
(``activation_checkpointing_enable``, in ``train()``: SFT and GRPO), TRL's DPO and KTO trainers call it
for a peft model, and TRL calls it again each time it turns checkpointing back on around the reference's
forward. :func:`require_input_grads_where_trained` replaces it on the model with one that hooks the input
embeddings of a tower only when a parameter of that tower trains.
"""

from __future__ import annotations

import types

import torch

from models.towers import family_of, tower_of


def require_input_grads_where_trained(model: torch.nn.Module) -> None:
    """Make ``model.enable_input_require_grads`` hook a sub-model's input embeddings only when a parameter
    of their tower (``models.towers``) trains when it is called.

    ``model`` is the transformers model itself (a peft wrapper forwards the call to it). LoRA on the
    language model keeps its token embeddings hooked; a frozen vision tower gets no hook, so no gradient
    enters it (Qwen-VL's merger, the projector inside it, trains on its own parameters' gradients); a
    vision tower that trains (full fine-tuning without it in ``peft.freeze``, or LoRA on it) is hooked as
    before. What trains must be settled before checkpointing is turned on, as the recipe does.
    """
    model.enable_input_require_grads = types.MethodType(_enable_input_require_grads, model)


def _enable_input_require_grads(model: torch.nn.Module) -> None:
    # TRL turns checkpointing off and on around every reference forward: without removing the previous
    # hooks first, each call would add one more of each.
    model.disable_input_require_grads()
    hooks = [embeddings.register_forward_hook(_output_requires_grad) for embeddings in _trained_inputs(model)]
    model._require_grads_hooks = hooks  # where transformers' disable_input_require_grads finds them
    if hooks:
        model._require_grads_hook = hooks[0]  # transformers' older name for the first, kept as it keeps it


def _trained_inputs(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The input embeddings of every sub-model whose tower has a parameter that trains."""
    family = family_of(model)
    trained = {tower_of(name, family) for name, param in model.named_parameters() if param.requires_grad}
    return [
        embeddings
        for name, embeddings in _input_embeddings(model).items()
        if tower_of(name, family) in trained
    ]


def _input_embeddings(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every sub-model's input embeddings by module name, found as ``enable_input_require_grads`` finds
    them: ``get_input_embeddings`` of each ``PreTrainedModel`` inside ``model``, itself included."""
    from transformers import PreTrainedModel

    names = {id(module): name for name, module in model.named_modules()}
    found = {}
    for module in model.modules():
        if not isinstance(module, PreTrainedModel):
            continue
        try:
            embeddings = module.get_input_embeddings()
        except NotImplementedError:  # a sub-model without input embeddings of its own
            continue
        if embeddings is not None and id(embeddings) in names:
            found[names[id(embeddings)]] = embeddings
    return found


def _output_requires_grad(module: torch.nn.Module, inputs, output: torch.Tensor) -> None:
    output.requires_grad_(True)
