"""Preference pairs as model inputs, for DPO training (train/dpo.py) and held-out scoring
(eval/preference.py).

Both render a pair through the same chat adapter as SFT and evaluation: the chosen conversation and the
rejected one (the same prompt, another final reaction), batched as TRL's DPOTrainer expects them: the
chosen rows first, then the rejected rows, with a ``completion_mask`` over the final reaction's tokens
(including its end-of-turn token) where SFT would put its labels. The prompt carries no loss.
"""

from __future__ import annotations

import torch

from data_builders.preferences import PreferencePair
from models.chat import IGNORE_INDEX, VideoChatAdapter


def pair_batch(adapter: VideoChatAdapter, pairs: list[PreferencePair]) -> dict:
    """Processor inputs of ``2 x len(pairs)`` rows (chosen, then rejected) and their ``completion_mask``."""
    chosen = [adapter.render(pair.sample, for_generation=False) for pair in pairs]
    rejected = [adapter.render(pair.rejected_sample(), for_generation=False) for pair in pairs]
    batch = dict(adapter.training_batch(chosen + rejected))
    labels = batch.pop("labels")
    batch["completion_mask"] = (labels != IGNORE_INDEX).long()
    return batch


@torch.no_grad()
def completion_logps(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """Each row's summed log-probability of its completion tokens (what DPO compares), in float32."""
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.items() if k != "completion_mask"}
    logits = model(**inputs, use_cache=False).logits[:, :-1].float()
    targets = inputs["input_ids"][:, 1:]
    mask = batch["completion_mask"][:, 1:].to(device)
    token_logps = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (token_logps * mask).sum(dim=-1).cpu()
