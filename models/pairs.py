"""Preference pairs as model inputs, for DPO training and held-out scoring (the ovi_pairs benchmark), and
the same reactions unpaired for KTO training (train/preference.py).

Both render a pair through the same chat adapter as SFT and evaluation: the chosen conversation and the
rejected one (the same prompt, another final reaction), batched as TRL's DPOTrainer expects them: the
chosen rows first, then the rejected rows, with a ``completion_mask`` over the final reaction's tokens
(including its end-of-turn token) where SFT would put its labels. The prompt carries no loss. KTO's batches
are one row per reaction with its ``label``, plus TRL's KL rows: each prompt with another row's reaction.
"""

from __future__ import annotations

import torch

from core.pairs import LabelledReaction, PreferencePair
from core.sample import Sample
from models.batch import TOKEN_KEYS
from models.chat import IGNORE_INDEX, VideoChatAdapter

# Inputs with one entry per token: KTO's KL rows have their own (``KL_<key>``, the names TRL reads); the
# others (the media) are the same for a KL row as for its own row, so the KL forward reuses the rows'.
_PER_TOKEN = (*TOKEN_KEYS, "completion_mask")


def pair_batch(adapter: VideoChatAdapter, pairs: list[PreferencePair]) -> dict:
    """Processor inputs of ``2 x len(pairs)`` rows (chosen, then rejected) and their ``completion_mask``."""
    return completion_batch(adapter, [p.sample for p in pairs] + [p.rejected_sample() for p in pairs])


def unpaired_batch(adapter: VideoChatAdapter, reactions: list[LabelledReaction]) -> dict:
    """Processor inputs of one row per reaction, their ``completion_mask`` and ``label`` (desirable or not),
    and KTO's KL rows (``KL_input_ids``, ``KL_attention_mask``, ``KL_completion_mask``): row i's conversation
    ending with row i-1's reaction (row 0: the last row's), as TRL pairs them."""
    batch = completion_batch(adapter, [r.sample for r in reactions])
    batch.update(_kl_rows(batch, adapter.processor.tokenizer.pad_token_id))
    batch["label"] = torch.tensor([r.desirable for r in reactions], dtype=torch.bool)
    return batch


def _kl_rows(batch: dict, pad_token_id: int) -> dict:
    """The KL rows spliced from the batch's own tokens: row i's prompt, row i-1's reaction (in-context
    tokens, end-of-turn included), then row i's closing tokens; right-padded. Nothing is processed again, and
    each KL row's video tokens are its own row's, so the rows' media inputs serve the KL forward too."""
    keys = [key for key in _PER_TOKEN if key in batch]
    completion, real = batch["completion_mask"].bool(), batch["attention_mask"].bool()
    rows = []
    for row in range(len(completion)):
        previous = row - 1  # -1: the last row
        start = int(completion[row].nonzero()[0])
        end = int(completion[row].nonzero()[-1]) + 1
        rows.append(
            {
                key: torch.cat(
                    [
                        batch[key][row, :start],
                        batch[key][previous][completion[previous]],
                        batch[key][row, end:][real[row, end:]],
                    ]
                )
                for key in keys
            }
        )
    width = max(len(row["input_ids"]) for row in rows)
    kl = {}
    for key in keys:
        pad = pad_token_id if key == "input_ids" else 0
        padded = torch.full((len(rows), width), pad, dtype=batch[key].dtype)
        for index, row in enumerate(rows):
            padded[index, : len(row[key])] = row[key]
        kl[f"KL_{key}"] = padded
    return kl


def completion_batch(adapter: VideoChatAdapter, samples: list[Sample]) -> dict:
    """Processor inputs of the samples and a ``completion_mask`` over each one's final reaction."""
    batch = dict(adapter.training_batch([adapter.render(s, for_generation=False) for s in samples]))
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
