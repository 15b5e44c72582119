"""Decoding one conversation with explicit positions and one key/value cache.

The OVIBench interruption simulation (``models.ovi_simulation``) encodes a prompt, decodes the model's
answer greedily, appends a turn to the same cache and decodes again; GRPO's rollouts sample a group of
continuations from one encoded prompt (``models.sampling``) through the same steps. Positions are passed on
every forward, so a cached continuation and a re-encoding see identical ids. Under ZeRO-3 several ranks
decode in step.
"""

from __future__ import annotations

import torch

from core import distributed
from models.batch import GRID_KEYS
from models.chat import VideoChatAdapter

# Where a model's config names its media placeholder tokens.
_PLACEHOLDER_ATTRS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "image_token_index",  # LLaVA-style configs
    "video_token_index",
)


def placeholder_ids(model) -> torch.Tensor:
    """The model's media placeholder token ids, which a decoder never picks: fed back as part of an
    answer they would be taken for a media slot."""
    ids = [getattr(model.config, name, None) for name in _PLACEHOLDER_ATTRS]
    return torch.tensor([i for i in ids if i is not None], dtype=torch.long)


def ranks_in_step() -> bool:
    """Whether the ranks must decode in step (every decoding call's ``synced``): under ZeRO-3 over several
    processes every forward pass gathers the weights from all ranks."""
    return distributed.world_size() > 1 and distributed.zero3_enabled()


class CachedDecoder:
    """A conversation (batch of one) encoded with explicit positions into one key/value cache, then
    continued token by token: greedily (:meth:`decode`), or from tokens picked elsewhere and fed to
    :meth:`step` (``models.sampling``, which first repeats the cache for a group of rows)."""

    def __init__(self, model, adapter: VideoChatAdapter):
        self.model = model
        self.device = model.device
        self.cache = None
        self.next_position = 0  # the (text) position of the next token fed
        self._rope_index = _find_rope_index(model)
        self.eos_ids = _stop_ids(model, adapter)
        self.suppressed = placeholder_ids(model)

    def positions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Position ids of every token of ``batch`` (a whole conversation from its first token).

        Returns:
            ``(3, 1, length)`` multimodal RoPE ids from the model's ``get_rope_index``, or ``(1, length)``
            plain ids for a model without one.
        """
        ids = batch["input_ids"]
        if self._rope_index is None:
            return torch.arange(ids.shape[1], device=ids.device)[None]
        grids = {k: batch[k] for k in GRID_KEYS if k in batch}
        positions, _ = self._rope_index(ids, mm_token_type_ids=batch["mm_token_type_ids"], **grids)
        return positions

    def encode(self, batch: dict[str, torch.Tensor], positions: torch.Tensor, cache) -> torch.Tensor:
        """Run ``batch`` through the model on top of ``cache`` (None: from scratch); last-token logits."""
        inputs = {k: v for k, v in batch.items() if k not in ("attention_mask", "mm_token_type_ids")}
        out = self.model(**inputs, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1)
        self.cache = out.cache
        # Text continues from the last token's position, as get_rope_index places text (chunks end in
        # text). Not from the largest id so far, as generate's rope_deltas do: under the installed
        # get_rope_index a video's temporal ids may run past the text that follows it, and then the two
        # disagree; ids of decoded tokens must equal the ids the same tokens get when re-encoded.
        self.next_position = int(positions[..., -1].max()) + 1
        return out.logits[:, -1]

    def decode(self, logits: torch.Tensor, limit: int, synced: bool = False) -> tuple[list[int], bool]:
        """Up to ``limit`` greedy tokens from ``logits`` on; whether an end-of-turn token stopped it.

        The last token returned is not fed to the model (a caller continuing from the cache feeds it).
        ``synced``: keep stepping (idle) until every rank is done, as ``generate(synced_gpus=True)`` does.
        """
        tokens: list[int] = []
        stopped, done = False, limit <= 0
        while True:
            if not done:
                if len(self.suppressed):
                    logits = logits.index_fill(-1, self.suppressed.to(logits.device), float("-inf"))
                token = int(logits.argmax(-1))  # the first of equal maxima, as Hugging Face's greedy search
                stopped = token in self.eos_ids
                if not stopped:
                    tokens.append(token)
                done = stopped or len(tokens) >= limit
            if synced and not distributed.all_true(done):
                logits = self.idle() if done else self.step(torch.tensor([token]))
            elif done:
                return tokens, stopped
            else:
                logits = self.step(torch.tensor([token]))

    def idle(self) -> torch.Tensor:
        """A forward pass that changes nothing (no cache): it runs the language model's modules as a decode
        step does, so the weight gathers of the ranks still decoding find a partner on this one."""
        ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        position = torch.zeros((3, 1, 1), dtype=torch.long, device=self.device)
        position = position if self._rope_index is not None else position[0]
        out = self.model(input_ids=ids, position_ids=position, use_cache=False, logits_to_keep=1)
        return out.logits[:, -1]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row of the cache (``tokens``: ``(rows,)``) at the next text position, the same
        for every row and on all three RoPE axes (rows that share a prompt share its length); their logits."""
        rows = tokens.shape[0]
        ids = tokens.view(rows, 1).to(self.device)
        position = torch.full((3, rows, 1), self.next_position, device=self.device)
        if self._rope_index is None:
            position = position[0]
        out = self.model(
            input_ids=ids, position_ids=position, cache=self.cache, use_cache=True, logits_to_keep=1
        )
        self.cache = out.cache
        self.next_position += 1
        return out.logits[:, -1]


def _stop_ids(model, adapter: VideoChatAdapter) -> set[int]:
    """Where decoding stops: the generation config's end tokens and the tokenizer's (end of turn)."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    tokenizer_eos = adapter.processor.tokenizer.eos_token_id
    return {*ids, *([] if tokenizer_eos is None else [tokenizer_eos])}


def _find_rope_index(model):
    """The model's multimodal ``get_rope_index`` (it sits on the inner model, under any PEFT wrapper)."""
    for module in model.modules():
        if callable(getattr(module, "get_rope_index", None)):
            return module.get_rope_index
    return None
