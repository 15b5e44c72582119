"""The GRPO objective as TRL's GRPOTrainer computes it (trl 1.16: ``_generate_and_score_completions`` for the
advantages, ``_compute_loss`` for the loss), written out so that a loop on video can use it: TRL's trainer
takes images but no video (docs/training.md). ``tests/test_grpo.py`` feeds the same prompts, completions and
rewards to TRL's trainer and to these functions and compares loss and gradients.

Shapes: ``N`` completions (``N / G`` prompts of ``G`` completions each, a prompt's completions adjacent),
``T`` completion tokens (right-padded; ``mask`` 1 on real tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def nanstd(values: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The standard deviation ignoring NaNs, with Bessel's correction (TRL's ``nanstd``)."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True)
    std = torch.sqrt(variance * count / (count - 1))
    return std.squeeze(dim) if dim is not None else std.squeeze()


@dataclass
class Advantages:
    """Each completion's advantage, and for logging whether its group's (or the batch's) rewards all tie."""

    values: torch.Tensor  # (N,)
    tied: torch.Tensor  # (N,) bool


def advantages(rewards: torch.Tensor, generations: int, scale: str) -> Advantages:
    """Group-relative advantages: each reward minus its prompt's mean reward, divided by the standard
    deviation of its group (``scale`` ``group``), of the batch (``batch``) or not at all (``none``). A
    completion whose reward is NaN (no reward applies) gets 0.

    Raises:
        ValueError: an unknown ``scale``.
    """
    grouped = rewards.view(-1, generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(generations)
    if scale in ("group", "none"):
        std = nanstd(grouped, dim=1).repeat_interleave(generations) if generations > 1 else 0 * rewards
    elif scale == "batch":
        std = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else 0 * rewards
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    values = rewards - mean
    if scale != "none":
        values = values / (std + 1e-4)
    tied = torch.isclose(std, torch.zeros_like(std))
    return Advantages(torch.nan_to_num(values, nan=0.0), tied)


@dataclass
class LossParts:
    """The loss and what the stage logs of it."""

    loss: torch.Tensor
    kl: float | None  # the mean per-token KL to the reference (None: beta 0)
    clipped_low: float  # share of tokens whose ratio fell below 1 - epsilon with a negative advantage
    clipped_high: float  # share above 1 + epsilon_high with a positive advantage

    @property
    def clipped(self) -> float:
        return self.clipped_low + self.clipped_high


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str,
    importance_sampling_level: str,
    epsilon: float,
    epsilon_high: float | None,
    beta: float,
    max_completion_length: int,
    use_bias_correction_kl: bool = True,
    token_count: float | None = None,
    sampler_weights: torch.Tensor | None = None,
) -> LossParts:
    """The GRPO loss of one micro-batch (divided by gradient accumulation by the Trainer, as TRL divides it).

    Args:
        logps: the policy's per-token log-probabilities (with gradients), ``(N, T)``.
        old_logps: the sampling policy's (None: the same as ``logps``, detached: one update per rollout).
        ref_logps: the reference's (needed when ``beta`` is not 0).
        advantages: ``(N,)``.
        mask: ``(N, T)``; a truncated completion masked out when ``mask_truncated_completions``.
        loss_type: ``grpo`` (each completion's token mean, averaged), ``bnpo`` (the batch's token mean),
            ``dr_grpo`` (token sum over ``N x max_completion_length``), ``dapo`` (token sum over the tokens
            of the whole batch across processes, ``token_count``, per process).
        importance_sampling_level: ``token`` (GRPO) or ``sequence`` (GSPO: one ratio per completion, the
            mean of its tokens' log-ratios).
        epsilon, epsilon_high: the clip range ``[1 - epsilon, 1 + epsilon_high]`` (None: ``epsilon``).
        beta: the KL penalty's weight (k3 estimator: ``exp(ref - logp) - (ref - logp) - 1`` per token).
        use_bias_correction_kl: multiply the KL by the importance ratio, so its gradient is the unbiased
            reverse-KL gradient (TRL's default; it changes the gradient even where the ratio is 1).
        token_count: ``dapo``'s normalizer (default: this micro-batch's tokens).
        sampler_weights: the correction for a sampler that is not the policy scored
            (:func:`sampler_correction`, ``(N, T)`` or ``(N, 1)``): multiplies each token's policy loss,
            not its KL (TRL's ``importance_sampling_ratio``).
    """
    mask = mask.to(logps.dtype)
    old_logps = logps.detach() if old_logps is None else old_logps
    log_ratio = logps - old_logps
    if importance_sampling_level == "token":
        log_weights = log_ratio
    elif importance_sampling_level == "sequence":
        log_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        level = importance_sampling_level
        raise ValueError(f"importance_sampling_level must be token or sequence, got {level!r}")
    ratio = torch.exp(log_weights)
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + high)
    advantages = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    if sampler_weights is not None:
        per_token = per_token * sampler_weights
    kl = None
    if beta != 0.0:
        per_token_kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        if use_bias_correction_kl:
            per_token_kl = per_token_kl * ratio
        per_token = per_token + beta * per_token_kl
        kl = float((per_token_kl.detach() * mask).sum() / mask.sum().clamp(min=1.0))
    loss = _reduce(per_token * mask, mask, loss_type, max_completion_length, token_count)
    low_clip = (ratio < 1 - epsilon) & (advantages < 0)
    high_clip = (ratio > 1 + high) & (advantages > 0)
    return LossParts(loss, kl, _share(low_clip, mask), _share(high_clip, mask))


def sampler_correction(
    old_logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """TRL's truncated or masked importance sampling for rollouts from another engine (its
    ``vllm_importance_sampling_mode``): the ratio of the policy's probability of each sampled token (``old``,
    as scored) to the sampler's, per token (``token_*``, ``(N, T)``) or per completion (``sequence_*``, the
    product over its tokens, ``(N, 1)``), clipped to ``[clip_min, clip_max]`` (``*_truncate``) or set to 0
    outside it (``*_mask``). A token whose sampler log-probability is unknown (NaN) counts as agreeing."""
    diff = torch.nan_to_num((old_logps - sampler_logps) * mask, nan=0.0)
    level, _, kind = mode.partition("_")
    if level == "sequence":
        diff = diff.sum(-1, keepdim=True)
    elif level != "token":
        raise ValueError(f"vllm_importance_sampling_mode: unknown {mode!r}")
    weights = torch.exp(diff)
    if kind == "truncate":
        return torch.clamp(weights, min=clip_min, max=clip_max)
    if kind == "mask":
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return weights.masked_fill((weights < low) | (weights > high), 0.0)
    raise ValueError(f"vllm_importance_sampling_mode: unknown {mode!r}")


def _share(flags: torch.Tensor, mask: torch.Tensor) -> float:
    """The share of tokens flagged (of completions, under sequence-level weights), as TRL logs it."""
    flags = flags.to(mask.dtype)
    if flags.shape[1] == 1:
        return float(flags.mean())
    return float((flags * mask).sum() / mask.sum().clamp(min=1.0))


def _reduce(losses: torch.Tensor, mask: torch.Tensor, loss_type: str, max_length: int, token_count):
    if loss_type == "grpo":
        return (losses.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return losses.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return losses.sum() / (losses.size(0) * max_length)
    if loss_type == "dapo":
        normalizer = mask.sum() if token_count is None else torch.as_tensor(token_count, dtype=losses.dtype)
        return losses.sum() / normalizer.clamp(min=1.0)
    raise ValueError(f"loss_type must be grpo, bnpo, dr_grpo or dapo, got {loss_type!r}")
