"""The GRPO stage (``stage.method=grpo``): reinforcement learning with verifiable rewards, on video.

Each step draws prompts from ``data.train`` (V2P items, asked in open form by default, and OVI items in both
forms), has its sampler (``train.sampler``: the policy in this process, or a server given its weights)
sample ``num_generations`` completions of each from the very inputs the evaluation renders
(``train.rollouts``: the prompt encoded once, its cache shared by the group; an OVI item in open form rolled
out through OVIBench's offline simulation, the model's own answer cut and interrupted), scores them with
the rewards of ``train.rewards``, and takes one policy-gradient step on TRL's GRPO loss
(``train.grpo_loss``, tested equal to TRL's GRPOTrainer). TRL's trainer is not used: it takes images but no
video (its generation, its vLLM path and its log-probability pass have no video inputs). The loop is the HF
Trainer's, its one public loss hook (``compute_loss``) doing a step's rollouts, rewards and loss; one update
per rollout (TRL's ``num_iterations=1``), so the old policy is the current one, detached. The reference
(``beta``): the start model, i.e. the LoRA adapter switched off, or a frozen second load under full
fine-tuning.

Settings: ``stage.grpo`` (``train.grpo_config``). Logged per step (``train/...``): each reward's mean and
std, the total's, the KL to the reference, completion lengths and the share cut by the length limit, the
share of groups whose rewards all tie (no learning signal), and what the sampler adds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import torch
from transformers import Trainer

from core.formats.v2p import parse_options
from core.media import FrameCache
from core.run import Run
from core.sample import Part, Sample
from core.vocab import ItemForm
from eval.benchmarks.ovi import is_open_item
from eval.judging import make_judge
from models.chat import VideoChatAdapter
from train.data import TrainingSet
from train.grpo_config import GrpoConfig
from train.grpo_loss import Scored, StepLoss, nanstd, step_loss
from train.judge_reward import judge_rewards
from train.rewards import applicable, weighted
from train.rollouts import Rollout, completion_logps
from train.sampler import InProcessSampler, Sampler
from train.served_rollouts import ServedSampler
from train.stages import Method, sft_arguments, sft_rows
from train.trainer import RecipeHooks

OPEN_INSTRUCTION = "Answer in a few words."


def grpo_rows(run: Run, cache: FrameCache) -> TrainingSet:
    """The stage's prompts: ``data.train``'s samples as SFT reads them (mixed, media-checked), V2P items in
    the forms of ``stage.grpo.v2p_forms``."""
    rows = sft_rows(run, cache)
    forms = run.cfg.stage.grpo.v2p_forms
    prompts = []
    for sample in rows.rows:
        if sample.task != "v2p":
            prompts.append(sample)
            continue
        if ItemForm.mcq in forms:
            prompts.append(sample)
        if ItemForm.open in forms:
            prompts.append(open_form(sample))
    return replace(rows, rows=prompts)


def open_form(sample: Sample) -> Sample:
    """A V2P item asked without its options, to be answered in words (``meta["format"] == "open"``)."""
    stem, _ = parse_options(sample.meta["question"])
    question = f"{stem}\n{OPEN_INSTRUCTION}"

    def reworded(part: Part) -> Part:
        return Part.txt(question) if part.type == "text" and part.text == sample.meta["question"] else part

    user, *rest = sample.turns
    turns = [replace(user, parts=[reworded(p) for p in user.parts]), *rest]
    meta = {**sample.meta, "format": ItemForm.open.value}
    return replace(sample, id=f"{sample.id}-open", turns=turns, meta=meta)


class PromptDataset(torch.utils.data.Dataset):
    """The stage's prompts, handed to the trainer as they are; ``step_key`` says which can share a step
    across ranks (under ZeRO-3 every rank must run the same forwards: same media, same kind of rollout)."""

    def __init__(self, samples: list[Sample]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Sample:
        return self.samples[index]

    @staticmethod
    def step_key(sample: Sample) -> tuple:
        """Each turn's media kinds and the kind of rollout: an interruption's turn has new frames only when
        it falls inside the video, and a turn with frames runs the vision tower once more."""
        turns = tuple(tuple(sorted({p.type for p in turn.parts} - {"text"})) for turn in sample.turns)
        return (*turns, "interruption" if is_open_item(sample) else "prompt")


def collate_prompts(items: list[Sample]) -> dict[str, list[Sample]]:
    return {"items": items}


def grpo_batches(rows: TrainingSet, chat: VideoChatAdapter):
    return PromptDataset(rows.rows), collate_prompts


def grpo_trainer_kwargs(run: Run, chat: VideoChatAdapter) -> dict[str, Any]:
    """The stage's settings, its judge reward, and its sampler: a server handed the policy's weights before
    each step where ``stage.grpo.server`` names one, else the policy in this process."""
    settings = run.cfg.stage.grpo
    judge = make_judge(settings.judge, run.dir.path, key="stage.grpo.judge")
    if settings.server.enabled:
        sampler = ServedSampler(settings, chat, run.dir)
    else:
        sampler = InProcessSampler(settings, chat)
    return {
        "grpo": settings,
        "extra_rewards": judge_rewards(judge, settings.judge.metrics),
        "sampler": sampler,
    }


class GrpoTrainer(RecipeHooks, Trainer):
    """The HF Trainer with the recipe's hooks, whose loss is a GRPO step: rollouts from the sampler
    (``train.sampler``), rewards, TRL's loss."""

    def __init__(
        self, *args, grpo: GrpoConfig, sampler: Sampler, extra_rewards=None, ref_model=None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.grpo, self.sampler, self.extra_rewards = grpo, sampler, extra_rewards or {}
        self.ref_model = ref_model and self._prepared_reference(ref_model)
        self.loss_is_scaled_for_ga = False  # the loss is a micro-batch's: the Trainer divides by accumulation
        self._logged: dict[str, list[float]] = defaultdict(list)

    def _prepared_reference(self, ref_model):
        """The frozen reference placed as the policy is: under ZeRO-3 in an inference engine of its own (its
        weights partitioned and gathered per module), else on the device."""
        if self.is_deepspeed_enabled:
            from trl.models.utils import prepare_deepspeed

            return prepare_deepspeed(ref_model, self.accelerator)
        return self.accelerator.prepare_model(ref_model, evaluation_mode=True)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """One micro-batch's GRPO loss (the Trainer's documented hook for a loss of one's own)."""
        settings, sampler = self.grpo, self.sampler
        policy = self.accelerator.unwrap_model(model)
        rollouts = sampler.rollouts(policy, inputs["items"], self.state.global_step)
        rewards = self._rewards(rollouts)
        # The completions are scored on the distribution they were sampled from: without the tokens the
        # sampler never picks.
        suppressed = sampler.suppressed(policy)
        one_at_a_time = self.trainer_cfg.gradient_checkpointing  # one sequence's activations at a time
        logps, mask = completion_logps(
            model, rollouts, settings.temperature, suppressed, one_at_a_time=one_at_a_time
        )
        truncated = torch.tensor([t for r in rollouts for t in r.truncated])
        reference = self._reference_logps(policy, rollouts, suppressed) if settings.beta != 0.0 else None
        sampled = sampler.sampled_logps(rollouts, logps.detach())
        step = step_loss(settings, rewards, Scored(logps, mask, truncated, reference, sampled))
        self._record(rollouts, rewards, step)
        return step.parts.loss

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            self.sampler.close()

    def _rewards(self, rollouts: list[Rollout]) -> torch.Tensor:
        """Each completion's total reward (NaN where none applies), its parts recorded for logging."""
        totals = []
        for r in rollouts:
            names = applicable(r.item, self.extra_rewards)
            for text in r.texts:
                scores = weighted(text, r.item, self.grpo.rewards, self.extra_rewards) if names else {}
                for name in names:
                    if name in scores:  # the judge's is missing where it could not score
                        self._logged[f"rewards/{name}"].append(scores[name])
                totals.append(scores.get("total", float("nan")))
        return torch.tensor(totals, dtype=torch.float32)

    @torch.no_grad()
    def _reference_logps(self, policy, rollouts: list[Rollout], suppressed) -> torch.Tensor:
        temperature = self.grpo.temperature
        if self.ref_model is not None:
            return completion_logps(self.ref_model, rollouts, temperature, suppressed)[0]
        with policy.disable_adapter():  # the start model: a fresh LoRA adapter switched off
            return completion_logps(policy, rollouts, temperature, suppressed)[0]

    def _record(self, rollouts: list[Rollout], rewards: torch.Tensor, step: StepLoss) -> None:
        logged = self._logged
        logged["reward"].append(float(torch.nanmean(rewards)))
        logged["reward_std"].append(float(nanstd(rewards)) if rewards.numel() > 1 else 0.0)
        groups = step.advantages.tied.view(-1, self.grpo.num_generations)[:, 0]
        logged["frac_reward_zero_std"].append(float(groups.float().mean()))
        lengths = [len(tokens) for r in rollouts for tokens in r.group.tokens]
        truncated = [t for r in rollouts for t in r.truncated]
        logged["completions/mean_length"].append(sum(lengths) / len(lengths))
        logged["completions/clipped_ratio"].append(sum(truncated) / len(truncated))
        for key, value in self.sampler.logged().items():
            logged[key].append(value)
        if step.parts.kl is not None:
            logged["kl"].append(step.parts.kl)
        weights = step.sampler_weights
        if weights is not None:  # TRL's correction for the sampler, logged as TRL logs it
            real = weights.flatten() if weights.shape[1] == 1 else weights[step.mask.bool()]
            if real.numel():
                for name, value in (("min", real.min()), ("mean", real.mean()), ("max", real.max())):
                    logged[f"sampling/importance_sampling_ratio/{name}"].append(float(value))

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        """The Trainer's logs, with the means of what the steps since the last log recorded (a reward's
        mean and standard deviation over the completions it applied to)."""
        for key, values in self._logged.items():
            if key.startswith("rewards/"):
                values_t = torch.tensor(values)
                logs[f"{key}/mean"] = float(values_t.mean())
                logs[f"{key}/std"] = float(values_t.std()) if len(values) > 1 else 0.0
            else:
                logs[key] = sum(values) / len(values)
        self._logged.clear()
        super().log(logs, *args, **kwargs)


# The Trainer's own arguments (sft_arguments): GRPO's settings are stage.grpo's, handed to the trainer.
GRPO = Method(
    grpo_rows,
    sft_arguments,
    grpo_batches,
    GrpoTrainer,
    reference=True,
    trainer_kwargs=grpo_trainer_kwargs,
    cannot_pack="GRPO's batches are prompts rolled out by the model, not rendered training rows",
)
