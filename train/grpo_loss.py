"""The GRPO objective as TRL's GRPOTrainer computes it (trl 1.16: ``_generate_and_score_completions`` for the
advantages, ``_compute_loss`` for the loss), written out so that a loop on video can use it: TRL's trainer
takes images but no video (docs/training.md). ``tests/test_grpo.py`` feeds the same prompts, completions and
rewards to TRL's trainer and to these functions and compares loss and gradients. :func:`step_loss` is a
step's loss as ``stage.grpo`` sets it, from the scored completions and their rewards.

On policy: one update per rollout (TRL's ``num_iterations=1``), so the sampling policy is the policy
scored, detached, and the importance ratio is 1 in value, the score function in its gradient. TRL's clip of
that ratio (``epsilon``, ``epsilon_high``) never binds, and is not written out.

Shapes: ``N`` completions (``N / G`` prompts of ``G`` completions each, a prompt's completions adjacent),
``T`` completion tokens (right-padded; ``mask`` 1 on real tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from core import distributed
from train.grpo_config import GrpoConfig


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


def grpo_loss(
    logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str,
    beta: float,
    max_completion_length: int,
    use_bias_correction_kl: bool = True,
    token_count: float | None = None,
    sampler_weights: torch.Tensor | None = None,
) -> LossParts:
    """The GRPO loss of one micro-batch (divided by gradient accumulation by the Trainer, as TRL divides it).

    Args:
        logps: the policy's per-token log-probabilities (with gradients), ``(N, T)``; the sampling policy's
            are the same, detached (module docstring).
        ref_logps: the reference's (needed when ``beta`` is not 0).
        advantages: ``(N,)``.
        mask: ``(N, T)``; a truncated completion masked out when ``mask_truncated_completions``.
        loss_type: ``grpo`` (each completion's token mean, averaged), ``bnpo`` (the batch's token mean),
            ``dr_grpo`` (token sum over ``N x max_completion_length``), ``dapo`` (token sum over the tokens
            of the whole batch across processes, ``token_count``, per process).
        beta: the KL penalty's weight (k3 estimator: ``exp(ref - logp) - (ref - logp) - 1`` per token).
        use_bias_correction_kl: multiply the KL by the importance ratio, so its gradient is the unbiased
            reverse-KL gradient (TRL's default; it changes the gradient even where the ratio is 1).
        token_count: ``dapo``'s normalizer (default: this micro-batch's tokens).
        sampler_weights: the correction for a sampler that is not the policy scored
            (:func:`sampler_correction`, ``(N, T)`` or ``(N, 1)``): multiplies each token's policy loss,
            not its KL (TRL's ``importance_sampling_ratio``).
    """
    mask = mask.to(logps.dtype)
    ratio = torch.exp(logps - logps.detach())  # 1, with the policy's gradient
    per_token = -ratio * advantages.unsqueeze(1)
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
    return LossParts(loss, kl)


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


@dataclass
class Scored:
    """A step's completions as the loss reads them, ``(N, T)`` each but ``truncated``."""

    logps: torch.Tensor  # the policy's, with gradients
    mask: torch.Tensor  # 1 on real tokens
    truncated: torch.Tensor  # (N,) bool: cut by the length limit
    reference: torch.Tensor | None  # the reference's (None: beta 0)
    sampled: torch.Tensor | None  # the sampler's, where it is not the policy scored (a server), else None


@dataclass
class StepLoss:
    """A step's loss, and what the stage logs of it."""

    parts: LossParts
    advantages: Advantages
    mask: torch.Tensor  # the tokens that carry loss
    sampler_weights: torch.Tensor | None  # TRL's correction for the sampler (None: none applied)


def step_loss(settings: GrpoConfig, rewards: torch.Tensor, scored: Scored) -> StepLoss:
    """The loss of one micro-batch as ``stage.grpo`` sets it: group-relative advantages of the rewards, the
    truncated completions masked out where asked, the sampler corrected for where it returned its own
    log-probabilities, and :func:`grpo_loss` over them (``dapo``'s normalizer: every rank's tokens)."""
    adv = advantages(rewards, settings.num_generations, str(settings.scale_rewards))
    mask = scored.mask
    if settings.mask_truncated_completions:
        mask = mask * (~scored.truncated.to(mask.device)).unsqueeze(1)
    weights = None
    if scored.sampled is not None and settings.vllm_importance_sampling_correction:
        weights = sampler_correction(
            scored.logps.detach(),
            scored.sampled,
            mask,
            mode=str(settings.vllm_importance_sampling_mode),
            clip_min=settings.vllm_importance_sampling_clip_min,
            clip_max=settings.vllm_importance_sampling_clip_max,
        )
    tokens = sum(distributed.gather(float(mask.sum()))) / distributed.world_size()
    parts = grpo_loss(
        scored.logps,
        scored.reference,
        adv.values.to(scored.logps.device),
        mask,
        loss_type=str(settings.loss_type),
        beta=settings.beta,
        max_completion_length=settings.max_completion_length,
        token_count=tokens,
        sampler_weights=weights,
    )
    return StepLoss(parts, adv, mask, weights)


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
