"""Rollouts of the GRPO stage: for each prompt, G completions sampled from the very inputs the evaluation
renders (the one chat adapter), the prompt encoded once and its key/value cache shared by the group
(``models.sampling``).

An OVI item in open form is rolled out on policy, with OVIBench's offline simulation as the environment
(``models.ovi_simulation.interrupt``): the model answers in its own words (greedy) up to the item's
interruption point, the interruption (its words and its clip) is appended to the same cache, and the G
reactions are sampled from there; the model's own cut answer goes into the item's ``meta["spoken"]`` for the
rewards. Every other item (V2P in either form, OVI multiple choice) samples its G answers from its prompt.

:func:`completion_logps` then scores the sampled tokens again, teacher-forced, with gradients: the group's
context once per completion and the completion after it, as training would see that conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch.utils.checkpoint import checkpoint

from core.sample import Sample
from eval.benchmarks.ovi import is_open_item
from models.batch import concat, repeat, text_piece, to_device
from models.cached_decoder import CachedDecoder
from models.chat import VideoChatAdapter
from models.ovi_simulation import interrupt, interruption_cut
from models.sampling import Group, sample_group


@dataclass
class Rollout:
    """One prompt's group of completions.

    Attributes:
        item: the prompt's item (an interruption rollout's with ``meta["spoken"]``, the model's cut answer).
        context: processor inputs of everything before the completions (batch of one, on the CPU).
        group: the sampled completions (``models.sampling.Group``).
        texts: the completions as text (special tokens removed): what the rewards read.
    """

    item: Sample
    context: dict[str, torch.Tensor]
    group: Group
    texts: list[str]

    @property
    def truncated(self) -> list[bool]:
        """Completions that reached the length limit without an end-of-turn token."""
        return [not ended for ended in self.group.ended]


@torch.no_grad()
def rollout(
    model,
    adapter: VideoChatAdapter,
    item: Sample,
    *,
    generations: int,
    temperature: float,
    max_tokens: int,
    shared: bool = True,
    synced: bool = False,
) -> Rollout:
    """``generations`` completions of ``item`` (the model in eval mode, no gradients).

    Args:
        shared: encode the prompt once for the group (False: once per completion, for comparison).
        synced: every rank steps together (ZeRO-3); all ranks' items must be of one kind.
    """
    decoder = CachedDecoder(model, adapter)
    if is_open_item(item):  # rolled out through the interruption simulation
        cut = interruption_cut(item)
        interrupted = interrupt(decoder, adapter, item, cut, synced=synced)
        context, logits = interrupted.full, interrupted.logits
        spoken = adapter.decode_generated(torch.tensor([interrupted.answer_ids]), 0)[0]
        item = replace(item, meta={**item.meta, "spoken": spoken})
    else:
        rendered = adapter.render(item, for_generation=True)
        context = to_device(dict(adapter.batch([rendered], padding_side="left")), decoder.device)
        logits = decoder.encode(context, positions=decoder.positions(context), cache=None)
    if shared:
        group = sample_group(decoder, logits, generations, max_tokens, temperature, synced)
    else:
        group = _one_by_one(decoder, context, generations, max_tokens, temperature, synced)
    texts = [adapter.decode_generated(torch.tensor([tokens]), 0)[0] for tokens in group.tokens]
    return Rollout(item, {k: v.cpu() for k, v in context.items()}, group, texts)


def _one_by_one(decoder: CachedDecoder, context, generations: int, max_tokens: int, temperature, synced):
    """The group sampled without sharing the prompt: it is encoded again for every completion."""
    parts = []
    for _ in range(generations):
        logits = decoder.encode(context, positions=decoder.positions(context), cache=None)
        parts.append(sample_group(decoder, logits, 1, max_tokens, temperature, synced))
    return Group([p.tokens[0] for p in parts], [p.ended[0] for p in parts], [p.logps[0] for p in parts])


def completion_logps(
    model,
    rollouts: list[Rollout],
    temperature: float,
    suppressed: torch.Tensor | None = None,
    *,
    one_at_a_time: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each completion's per-token log-probabilities under ``model`` (with gradients when it trains), of the
    distribution its tokens were sampled from (the logits divided by ``temperature``; the token ids in
    ``suppressed``, the media placeholders the sampler never picks, left out), and their mask.

    Args:
        one_at_a_time: with gradients, score each completion in a pass of its own whose activations are
            recomputed in the backward (``torch.utils.checkpoint``): the activations of one sequence are
            held at a time instead of every completion of the micro-batch's (G x prompts sequences of the
            whole prompt each: at 64 frames, far beyond a GPU). The same log-probabilities and gradients for
            one more forward pass; the trainer asks for it under gradient checkpointing.

    Returns:
        ``(logps, mask)``, both ``(completions, longest)`` in rollout and completion order, right-padded.
    """
    rows = [_group_logps(model, r, temperature, suppressed, one_at_a_time) for r in rollouts]
    width = max(logps.shape[1] for logps, _ in rows)
    logps = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for lp, _ in rows])
    mask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for _, m in rows])
    return logps, mask


def sampler_logps(rollouts: list[Rollout], like: torch.Tensor) -> torch.Tensor:
    """Each completion's per-token log-probabilities under the engine that sampled it (``Group.logps``), in
    the layout of :func:`completion_logps`' output ``like``; NaN where the engine gave none and past a
    completion's end."""
    out = torch.full_like(like, float("nan"))
    for row, logps in enumerate(lp for r in rollouts for lp in r.group.logps):
        out[row, : len(logps)] = torch.tensor(logps, dtype=like.dtype)
    return out


def _group_logps(
    model, rollout: Rollout, temperature: float, suppressed, one_at_a_time: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = rollout.group.tokens
    width = max(1, max(map(len, tokens)))
    device = next(model.parameters()).device
    completions = torch.zeros((len(tokens), width), dtype=torch.long)
    mask = torch.zeros((len(tokens), width), dtype=torch.long)
    for row, ids in enumerate(tokens):
        completions[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    completions, mask = completions.to(device), mask.to(device)
    context = {key: value.to(device) for key, value in rollout.context.items()}
    if one_at_a_time and torch.is_grad_enabled():
        picked = torch.cat([
            checkpoint(
                _picked_logps, model, context, completions[row : row + 1], mask[row : row + 1],
                temperature, suppressed, use_reentrant=False,
            )
            for row in range(len(tokens))
        ])  # fmt: skip
    else:
        picked = _picked_logps(model, context, completions, mask, temperature, suppressed)
    return picked * mask, mask


def _picked_logps(model, context, completions, mask, temperature: float, suppressed) -> torch.Tensor:
    """The log-probabilities of ``completions`` (rows of one group) after the group's ``context``."""
    device = completions.device
    batch = _with_completions(context, completions, mask)
    logits = model(**batch, use_cache=False, logits_to_keep=completions.shape[1] + 1).logits[:, :-1]
    if suppressed is not None and len(suppressed):
        logits = logits.index_fill(-1, suppressed.to(device), float("-inf"))
    logprobs = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    return logprobs.gather(-1, completions.unsqueeze(-1)).squeeze(-1)


def _with_completions(
    context: dict[str, torch.Tensor], completions: torch.Tensor, mask: torch.Tensor
) -> dict:
    """The context repeated once per completion, each followed by its completion (right-padded, text)."""
    return concat([repeat(context, completions.shape[0]), text_piece(completions, mask)])
