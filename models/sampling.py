"""A group of continuations sampled from one encoded prompt (the GRPO stage's rollouts).

The prompt is encoded once (``models.cached_decoder.CachedDecoder.encode``, positions explicit); its
key/value cache is then copied to every row of the group and the rows step together, one sampled token each
per forward, every row at the same next text position (they share the prompt, so they share its length). A
row that has ended keeps being fed (its tokens are dropped), so one forward still serves the whole group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core import distributed
from models.cached_decoder import CachedDecoder


@dataclass
class Group:
    """What a group of continuations produced.

    Attributes:
        tokens: each continuation's token ids, its end-of-turn token included (what a policy gradient trains:
            stopping is an action too).
        ended: whether each ended with an end-of-turn token (else it reached the length limit).
        logps: each token's log-probability under the distribution it was sampled from (the temperature's).
    """

    tokens: list[list[int]]
    ended: list[bool]
    logps: list[list[float]]


@torch.no_grad()
def sample_group(
    decoder: CachedDecoder,
    logits: torch.Tensor,
    generations: int,
    limit: int,
    temperature: float,
    synced: bool = False,
) -> Group:
    """``generations`` continuations of the prompt ``decoder`` has just encoded (``logits``: its last-token
    logits, batch of one), each up to ``limit`` tokens, sampled at ``temperature`` (0: greedy).

    ``synced``: keep stepping (idle) until every rank's group is done (ZeRO-3 gathers weights on every
    forward); every rank must call this with the same ``generations``.
    """
    decoder.cache.batch_repeat_interleave(generations)
    logits = logits.expand(generations, -1)
    group = Group([[] for _ in range(generations)], [False] * generations, [[] for _ in range(generations)])
    done = [limit <= 0] * generations
    while True:
        if not all(done):
            picked, logprobs = _pick(decoder, logits, temperature)
            for row in range(generations):
                if done[row]:
                    continue
                token = int(picked[row])
                group.tokens[row].append(token)
                group.logps[row].append(float(logprobs[row, token]))
                group.ended[row] = token in decoder.eos_ids
                done[row] = group.ended[row] or len(group.tokens[row]) >= limit
        finished = all(done)
        if synced and not distributed.all_true(finished):
            logits = decoder.idle() if finished else decoder.step(picked)
        elif finished:
            return group
        else:
            logits = decoder.step(picked)


def _pick(decoder: CachedDecoder, logits: torch.Tensor, temperature: float):
    """One token per row, and each row's log-probabilities (media placeholders never chosen)."""
    if len(decoder.suppressed):
        logits = logits.index_fill(-1, decoder.suppressed.to(logits.device), float("-inf"))
    if temperature <= 0:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logits.argmax(-1), logprobs
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(logprobs.exp(), 1).squeeze(-1), logprobs
