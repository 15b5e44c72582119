"""``stage.grpo``: GRPO's settings, beside the stage (train/grpo.py), named as TRL's ``GRPOConfig`` names
them. ``python -m train`` registers the dataclass as the schema of ``stage.grpo``
(``train.stage_settings``), so a misspelt key or a wrong type fails when the config is composed.

Only settings that act are here. One update per rollout makes the old policy the current one, so TRL's
``epsilon``, ``epsilon_high`` and ``importance_sampling_level`` (the clip of a ratio that is always 1) are
not: ``tests/test_grpo.py`` fails on a field that changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from core.choice import Choice
from core.config import JudgeConfig, ServerConfig, ServerKind
from core.vocab import ItemForm
from train.rewards import check_weights, default_weights


class GrpoLoss(Choice):
    """How GRPO's per-token losses are averaged (TRL's ``GRPOConfig.loss_type``)."""

    grpo = "grpo"  # each completion's token mean, averaged over completions (the paper's)
    dapo = "dapo"  # the token sum over every token of the batch (TRL's default; no length bias)
    dr_grpo = "dr_grpo"  # the token sum over completions x max_completion_length
    bnpo = "bnpo"  # the batch's token mean


class RewardScale(Choice):
    """How GRPO's advantages are scaled (TRL's ``scale_rewards``)."""

    group = "group"  # by the standard deviation of the prompt's group
    batch = "batch"  # by the batch's
    none = "none"  # not at all (Dr. GRPO)


class SamplerCorrection(Choice):
    """How the sampler's mismatch is corrected (TRL's ``vllm_importance_sampling_mode``): per token or per
    completion, the ratio of the policy's probability to the sampler's clipped (truncate) or zeroed outside
    ``[clip_min, clip_max]`` (mask)."""

    token_truncate = "token_truncate"
    token_mask = "token_mask"
    sequence_truncate = "sequence_truncate"
    sequence_mask = "sequence_mask"


class WeightSync(Choice):
    """How a rollout server (``stage.grpo.server``) is given the policy's weights before each step."""

    restart = "restart"  # its command is started again on the new weights (any server: vLLM, SGLang, ...)
    by_path = "by_path"  # one server loads the weights directory each request names (transformers serve)
    reload = "reload"  # one vLLM server re-reads each step's weights in place (train/weight_reload.py)


# Each kind of server's hand-over where stage.grpo.weight_sync is null: vLLM re-reads the weights in place
# (0.25 s a step against a restart's 63 s, docs/results/2026-12-03-grpo.md); any other server is started
# again on them, which every server takes.
HAND_OVER = {ServerKind.vllm: WeightSync.reload}


@dataclass
class GrpoConfig:
    """``stage.grpo``: GRPO's settings (train/grpo.py)."""

    num_generations: int = 8  # completions per prompt (G; TRL's default)
    beta: float = 0.04  # the KL weight against the reference (the start model): the GRPO paper's; TRL's is 0
    loss_type: GrpoLoss = GrpoLoss.dapo  # TRL's default
    scale_rewards: RewardScale = RewardScale.group
    temperature: float = 1.0  # sampling temperature (the log-probabilities are of the same distribution)
    max_completion_length: int = 32  # tokens per completion
    mask_truncated_completions: bool = False  # completions cut by the length limit carry no loss
    # the rewards (train/rewards REWARDS; every one weighs 1 but v2p_format, 0.2) and their weights in each
    # completion's total; a reward that does not apply to an item is left out of its mean; a name that is no
    # reward fails when the run resolves
    rewards: dict[str, float] = field(default_factory=default_weights)
    # how V2P items are asked: open (without options, answered in words, rewarded by rule; VideoSeeker:
    # MCQ-only RL collapsed) and/or mcq (with options, the letter rewarded by the official rule)
    v2p_forms: list[ItemForm] = field(default_factory=lambda: [ItemForm.open])
    # An LLM judge's reward for open OVI reactions (train/judge_reward.py; weight: rewards.ovi_judge), the
    # evaluation's judge settings; backend none (the default): off
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(cache="${run_dir}/grpo_judge_cache.jsonl"))
    # Rollouts through an OpenAI-compatible server (train/served_rollouts.py), e.g.
    # server@stage.grpo.server=vllm; off (in process) while neither command nor endpoint.base_url is set.
    # Before every step's rollouts the policy's weights (LoRA merged) are written under
    # <run_dir>/rollout_weights and handed over as weight_sync says (restart: any server; reload: vLLM;
    # by_path: a server loading the directory each request names). null: the server's kind decides
    # (HAND_OVER: reload for vLLM, restart for any other), when the run resolves.
    server: ServerConfig = field(default_factory=lambda: ServerConfig())
    weight_sync: WeightSync | None = None
    # Where the server returns the sampled tokens' log-probabilities (server.sampled_tokens), TRL's correction
    # for the sampler not being exactly the policy scored (its kernels, dtype, positions): each token's loss
    # weighted by the ratio of the two, as vllm_importance_sampling_mode says (TRL's names and defaults)
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: SamplerCorrection = SamplerCorrection.sequence_mask
    vllm_importance_sampling_clip_min: float | None = None
    vllm_importance_sampling_clip_max: float | None = 3.0


def resolve_grpo(settings: GrpoConfig) -> GrpoConfig:
    """``stage.grpo`` as the run uses it: its reward weights checked, and the weight hand-over its server's
    kind's (``HAND_OVER``) unless ``weight_sync`` names one.

    Raises:
        ConfigError: a reward weight that names no reward.
    """
    check_weights(settings.rewards)
    if settings.weight_sync is None:
        sync = HAND_OVER.get(settings.server.kind, WeightSync.restart)
        settings = replace(settings, weight_sync=sync)
    return settings
