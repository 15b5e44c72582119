"""The one seam between GRPO's trainer and where its completions come from: a :class:`Sampler` gives each
step's rollouts and says what the loss must know of it. :class:`InProcessSampler` samples from the policy
in this process (``train.rollouts``); ``train.served_rollouts.ServedSampler`` from a server handed the
policy's weights before each step. ``train.grpo.GrpoTrainer`` never asks which one it has.
"""

from __future__ import annotations

from typing import Protocol

import torch

from core.sample import Sample
from models.cached_decoder import placeholder_ids, ranks_in_step
from models.chat import VideoChatAdapter
from models.eval_mode import eval_mode
from train.grpo_config import GrpoConfig
from train.rollouts import Rollout, rollout


class Sampler(Protocol):
    """Where a GRPO step's completions come from."""

    def rollouts(self, policy, items: list[Sample], step: int) -> list[Rollout]:
        """Each item's group of ``num_generations`` completions, sampled by the policy of training step
        ``step``."""
        ...

    def suppressed(self, policy) -> torch.Tensor | None:
        """The token ids the sampler never picks, left out of the distribution its completions are scored
        on (None: it samples the whole vocabulary)."""
        ...

    def sampled_logps(self, rollouts: list[Rollout], like: torch.Tensor) -> torch.Tensor | None:
        """The sampler's own log-probabilities of the sampled tokens, in the layout of the scored ``like``,
        where the sampler is not the policy scored (the loss then corrects for it); None where it is."""
        ...

    def logged(self) -> dict[str, float]:
        """What the last rollouts add to the step's log."""
        ...

    def close(self) -> None:
        """Stop what the sampler started."""
        ...


class InProcessSampler:
    """The policy itself, in this process (``train.rollouts.rollout``), in eval mode for the rollouts; the
    ranks sample in step under ZeRO-3."""

    def __init__(self, settings: GrpoConfig, chat: VideoChatAdapter):
        self.settings, self.chat = settings, chat

    def rollouts(self, policy, items: list[Sample], step: int) -> list[Rollout]:
        settings, synced = self.settings, ranks_in_step()
        with eval_mode(policy):
            return [
                rollout(
                    policy,
                    self.chat,
                    item,
                    generations=settings.num_generations,
                    temperature=settings.temperature,
                    max_tokens=settings.max_completion_length,
                    synced=synced,
                )
                for item in items
            ]

    def suppressed(self, policy) -> torch.Tensor:
        return placeholder_ids(policy)  # the media placeholders, which the sampler never picks

    def sampled_logps(self, rollouts: list[Rollout], like: torch.Tensor) -> None:
        return None  # the sampler is the policy scored

    def logged(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass
