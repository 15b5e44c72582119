"""The GRPO stage: its loss is TRL's (the same prompts, completions and rewards through TRL's GRPOTrainer and
through ours give the same loss and gradients), its advantages are TRL's; its rollouts on video score their
completions as they were sampled, share the prompt's cache without changing what is sampled, and interrupt
the model's own answer as OVIBench's simulation does; a small GRPO run after SFT evaluates baseline and
checkpoints and logs every reward; a killed run resumes with equal losses; ZeRO-2 and ZeRO-3 on two CPU
processes; full fine-tuning against a frozen reference; the head runs over the completions only."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import runs
import torch

from core.config import ModelConfig
from core.errors import ConfigError
from core.sample import Part, Sample, Turn
from models.sampling import Group
from train.grpo_config import GrpoConfig, GrpoLoss, RewardScale, SamplerCorrection, WeightSync
from train.grpo_loss import Scored, advantages, grpo_loss, sampler_correction, step_loss
from train.rollouts import Rollout, completion_logps

G = 3  # completions per prompt
WIDTH = 5  # the longest completion


def _prompts_and_completions():
    """Two prompts of six ordinary tokens, and three completions each of 1 to 5."""
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 500, (6,), generator=generator) for _ in range(2)]
    lengths = [5, 2, 4, 3, 5, 1]
    completions = [torch.randint(10, 500, (n,), generator=generator).tolist() for n in lengths]
    return prompts, completions


def _trl_inputs(prompts, completions, generations):
    ids = torch.zeros((len(completions), WIDTH), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, tokens in enumerate(completions):
        ids[row, : len(tokens)], mask[row, : len(tokens)] = torch.tensor(tokens), 1
    prompt_ids = torch.stack([prompts[row // generations] for row in range(len(completions))])
    return prompt_ids, torch.ones_like(prompt_ids), ids, mask


def _rollouts(prompts, completions) -> list[Rollout]:
    item = Sample("p", "v2p", [Turn("user", [Part.txt("?")])], "s", "s", (0.0, 0.0), {})
    out = []
    for index, prompt in enumerate(prompts):
        ids = prompt[None]
        context = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": 0 * ids}
        tokens = completions[index * G : (index + 1) * G]
        out.append(Rollout(item, context, Group(tokens, [True] * G, [[0.0] * len(t) for t in tokens]), []))
    return out


@pytest.mark.parametrize(
    ("loss_type", "beta", "sampler"),
    [("grpo", 0.04, None), ("dapo", 0.0, None), ("dr_grpo", 0.04, None), ("bnpo", 0.04, None),
     # rollouts from a server: TRL's correction for the sampler, with its vLLM path on
     ("dapo", 0.04, "token_truncate"), ("grpo", 0.04, "sequence_mask")],
)  # fmt: skip
def test_the_loss_and_its_gradients_are_trls(tiny_checkpoint, tmp_path, loss_type, beta, sampler):
    """On policy, as TRL is with one update per rollout (no old log-probabilities given): TRL's defaults
    for the rest (its clip range, token-level ratios), which a ratio of 1 never reaches."""
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    from models.loading import load_model

    torch.manual_seed(0)
    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    temperature = 0.7
    args = GRPOConfig(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False, gradient_checkpointing=False,
        num_generations=G, per_device_train_batch_size=2 * G, loss_type=loss_type, beta=beta,
        temperature=temperature, max_completion_length=WIDTH,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=datasets.Dataset.from_list([{"prompt": "hi"}] * (2 * G)),
        processing_class=processor,
    )
    trainer.current_gradient_accumulation_steps = 1
    prompts, completions = _prompts_and_completions()
    prompt_ids, prompt_mask, completion_ids, completion_mask = _trl_inputs(prompts, completions, G)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.2, 0.9])
    adv = advantages(rewards, G, "group").values

    ours, mask = completion_logps(model, _rollouts(prompts, completions), temperature)
    assert torch.equal(mask, completion_mask)
    noise = torch.Generator().manual_seed(1)
    ref = (ours.detach() + 0.2 * torch.randn(ours.shape, generator=noise)) * mask
    inputs = {
        "prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
        "completion_mask": completion_mask, "advantages": adv, "ref_per_token_logps": ref,
        "num_items_in_batch": completion_mask.sum(),
    }  # fmt: skip
    weights = None
    if sampler:  # the sampler's log-probabilities off the scored ones, some ratios beyond the bounds
        served = (ours.detach() + 0.8 * torch.randn(ours.shape, generator=noise)) * mask
        weights = sampler_correction(ours.detach(), served, mask, mode=sampler, clip_min=0.5, clip_max=2.0)
        assert ((weights == 0.5) | (weights == 2.0) | (weights == 0.0)).any(), "the bounds must act"
        inputs["importance_sampling_ratio"] = weights
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True

    model.zero_grad()
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    parts = grpo_loss(
        ours, ref, adv, mask, loss_type=loss_type, beta=beta, max_completion_length=WIDTH,
        sampler_weights=weights,
    )  # fmt: skip
    parts.loss.backward()
    torch.testing.assert_close(parts.loss, trl_loss, rtol=1e-5, atol=1e-5)
    for name, grad in trl_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, rtol=1e-5, atol=1e-5)
    assert trl_grads, "gradients must flow"


def test_the_sampler_correction_is_trls_truncated_or_masked_importance_sampling():
    scored = torch.log(torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.9, 0.9]]).clamp(min=1e-9))
    sampler = torch.log(torch.tensor([[0.25, 0.5, 0.0], [0.8, 0.9, float("nan")]]).clamp(min=1e-9))
    sampler[1, 2] = float("nan")  # the server gave none for that token: it counts as agreeing
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])

    def weights(mode, low=None, high=None):
        return sampler_correction(scored, sampler, mask, mode=mode, clip_min=low, clip_max=high)

    torch.testing.assert_close(weights("token_truncate", high=1.5), torch.tensor([[1.5, 1, 1], [0.25, 1, 1]]))
    torch.testing.assert_close(weights("token_mask", 0.3, 3.0), torch.tensor([[2.0, 1, 1], [0.0, 1, 1]]))
    torch.testing.assert_close(weights("sequence_truncate", 0.5), torch.tensor([[2.0], [0.5]]))
    torch.testing.assert_close(weights("sequence_mask", high=1.5), torch.tensor([[0.0], [0.25]]))
    with pytest.raises(ValueError, match="unknown"):
        weights("tokens_truncate")


def test_advantages_are_group_relative_as_trls():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.2, 0.2])
    result = advantages(rewards, 3, "group")
    first = rewards[:3]
    expected = (first - first.mean()) / (first.std(unbiased=True) + 1e-4)
    torch.testing.assert_close(result.values[:3], expected)
    assert result.values[3:].abs().max() == 0 and result.tied.tolist() == [False] * 3 + [True] * 3
    unscaled = advantages(rewards, 3, "none").values
    torch.testing.assert_close(unscaled[:3], first - first.mean())
    batch = advantages(rewards, 3, "batch").values
    torch.testing.assert_close(batch[:3], (first - first.mean()) / (rewards.std(unbiased=True) + 1e-4))
    assert advantages(torch.tensor([1.0, float("nan"), 0.0]), 3, "group").values[1] == 0.0


# -- the settings ------------------------------------------------------------------------------------------

# stage.grpo's settings that act outside a step's loss, and where.
ACTS_ELSEWHERE = {
    "temperature": "the rollouts' sampling, and the distribution they are scored on (completion_logps)",
    "rewards": "each completion's total reward (train.rewards.weighted; tests/test_rewards.py)",
    "v2p_forms": "which V2P prompts the stage draws (train.grpo.grpo_rows)",
    "judge": "the judge's reward (tests/test_judge_reward.py)",
    "server": "the served sampler (tests/test_served_rollouts.py)",
    "weight_sync": "how the served sampler hands the weights over (tests/test_served_rollouts.py)",
}
TOKEN_TRUNCATE = SamplerCorrection.token_truncate
# Every other setting: a value that changes a step's loss or its gradient on a fixed input, over the
# settings it needs to act (the first dict).
CHANGES_THE_LOSS = {
    "num_generations": ({}, {"num_generations": 2}),
    "beta": ({}, {"beta": 0.0}),
    "loss_type": ({}, {"loss_type": GrpoLoss.grpo}),
    "scale_rewards": ({}, {"scale_rewards": RewardScale.none}),
    "max_completion_length": ({"loss_type": GrpoLoss.dr_grpo}, {"max_completion_length": 64}),
    "mask_truncated_completions": ({}, {"mask_truncated_completions": True}),
    "vllm_importance_sampling_correction": ({}, {"vllm_importance_sampling_correction": False}),
    "vllm_importance_sampling_mode": ({}, {"vllm_importance_sampling_mode": TOKEN_TRUNCATE}),
    "vllm_importance_sampling_clip_min": (
        {"vllm_importance_sampling_mode": TOKEN_TRUNCATE},
        {"vllm_importance_sampling_clip_min": 0.9},
    ),
    "vllm_importance_sampling_clip_max": ({}, {"vllm_importance_sampling_clip_max": 1.05}),
}


def _step(settings: GrpoConfig) -> tuple[float, torch.Tensor]:
    """A step's loss and its gradient on fixed scored completions: two groups of three of up to five tokens
    (the first truncated), a reference and a sampler that both differ from the policy."""
    generator = torch.Generator().manual_seed(0)
    logps = (-1.0 - torch.rand((6, WIDTH), generator=generator)).requires_grad_()
    mask = torch.tensor([[1] * n + [0] * (WIDTH - n) for n in (5, 2, 4, 3, 5, 1)])
    truncated = torch.tensor([True, False, False, False, False, False])
    reference = logps.detach() + 0.3 * torch.randn(logps.shape, generator=generator)
    sampled = logps.detach() + 0.3 * torch.randn(logps.shape, generator=generator)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.9, 0.4])
    loss = step_loss(settings, rewards, Scored(logps, mask, truncated, reference, sampled)).parts.loss
    loss.backward()
    return float(loss), logps.grad


def test_every_grpo_setting_acts():
    """A setting that changes nothing is a setting to remove (as the clip of a ratio that is always 1 was):
    each field either changes a step's loss on a fixed input, or is listed with where it acts."""
    names = {f.name for f in dataclasses.fields(GrpoConfig)}
    assert names == set(ACTS_ELSEWHERE) | set(CHANGES_THE_LOSS), "say where a new setting acts"
    for name, (needs, change) in CHANGES_THE_LOSS.items():
        loss, grad = _step(GrpoConfig(num_generations=G, **needs))
        changed_loss, changed_grad = _step(GrpoConfig(**{"num_generations": G, **needs, **change}))
        assert changed_loss != pytest.approx(loss) or not torch.allclose(changed_grad, grad), name


def test_a_misspelt_or_removed_grpo_setting_fails_at_compose_time(compose):
    from hydra.errors import ConfigCompositionException

    for override in ("stage.grpo.epslon=0.1", "stage.grpo.epsilon=0.2", "stage.grpo.loss_type=gspo"):
        with pytest.raises(ConfigCompositionException, match=override.split("=")[0].split(".")[-1]):
            compose("train", "+exp=quickstart_grpo", override)
    assert isinstance(compose("train", "+exp=quickstart_grpo").stage.grpo, GrpoConfig)


def test_an_unknown_reward_weight_fails_when_the_run_resolves_before_any_data_or_model(compose, monkeypatch):
    import train.recipe

    def built(*args, **kwargs):
        raise AssertionError("the run went on to build its data")

    monkeypatch.setattr(train.recipe, "synthetic_datasets", built)
    cfg = compose("train", "+exp=quickstart_grpo", "+stage.grpo.rewards.v2p_leter=1.0")
    with pytest.raises(ConfigError, match="stage.grpo.rewards: v2p_leter"):
        train.recipe.resolve(cfg)


VLLM = "+server@stage.grpo.server=vllm"
RUNNING_VLLM = ["stage.grpo.server.endpoint.base_url=http://h:1/v1", "stage.grpo.server.kind=vllm"]


@pytest.mark.parametrize(
    ("overrides", "sync"),
    [
        ([], WeightSync.restart),  # in process: never used
        ([VLLM], WeightSync.reload),
        (["+server@stage.grpo.server=transformers_serve"], WeightSync.restart),
        ([VLLM, "stage.grpo.weight_sync=by_path"], WeightSync.by_path),
        (["stage.grpo.server.command='vllm serve {model} --port {port}'"], WeightSync.restart),  # kind unsaid
        (RUNNING_VLLM, WeightSync.reload),
    ],
)
def test_the_weight_hand_over_is_the_servers_kinds_unless_set(compose, overrides, sync):
    """vLLM re-reads each step's weights in place (reload); any other server is restarted on them."""
    from train.stage_settings import resolve_stage

    cfg = compose("train", "+exp=quickstart_grpo", *overrides)
    assert resolve_stage(cfg.stage).grpo.weight_sync is sync


# -- rollouts on video -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy(tiny_checkpoint):
    from models.loading import load_model

    model, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    return model.eval()


@pytest.fixture(scope="module")
def items(synthetic_build):
    """A V2P item and an open OVI item of each interruption type, from the synthetic training sets."""
    from train.data import load_dataset_samples

    v2p = load_dataset_samples(str(synthetic_build.v2p_sft))[0]
    by_type = {}
    for sample in load_dataset_samples(str(synthetic_build.ovi_train)):
        if sample.meta.get("format") == "open":
            by_type.setdefault(sample.meta["interruption_type"], sample)
    return {"v2p": v2p, **by_type}


def test_completions_are_scored_as_they_were_sampled(policy, adapter, items):
    from models.cached_decoder import placeholder_ids
    from train.rollouts import rollout

    torch.manual_seed(0)
    for name in ("v2p", "Correction"):
        group = rollout(policy, adapter, items[name], generations=3, temperature=1.0, max_tokens=6)
        assert len(group.texts) == len(group.group.tokens) == 3
        assert len({tuple(t) for t in group.group.tokens}) > 1, "temperature 1: the group differs"
        suppressed = placeholder_ids(policy)
        with torch.no_grad():
            logps, mask = completion_logps(policy, [group], 1.0, suppressed)
        for row, sampled in enumerate(group.group.logps):
            assert mask[row].sum() == len(sampled) == len(group.group.tokens[row])
            torch.testing.assert_close(logps[row, : len(sampled)], torch.tensor(sampled), atol=1e-5, rtol=0)


def test_scoring_runs_the_head_on_the_completions_only(policy):
    """The policy's and the reference's scoring (``completion_logps``; the old policy is the policy's,
    detached) projects each group's completions and the position before them, never its prompt."""
    prompts, completions = _prompts_and_completions()
    vocab = policy.config.get_text_config().vocab_size
    heads = []
    hook = policy.get_output_embeddings().register_forward_hook(lambda m, i, out: heads.append(out.shape))
    try:
        with torch.no_grad():
            completion_logps(policy, _rollouts(prompts, completions), 1.0)
    finally:
        hook.remove()
    assert len(prompts[0]) > 1 and heads == [(G, WIDTH + 1, vocab)] * len(prompts)


def test_the_shared_prompt_cache_gives_what_encoding_the_prompt_per_completion_gives(policy, adapter, items):
    from train.rollouts import rollout

    for name in ("v2p", "False Trigger"):
        shared = rollout(policy, adapter, items[name], generations=3, temperature=0.0, max_tokens=8)
        alone = rollout(
            policy, adapter, items[name], generations=3, temperature=0.0, max_tokens=8, shared=False
        )
        assert shared.group.tokens == alone.group.tokens and shared.texts == alone.texts
        torch.testing.assert_close(torch.tensor(shared.group.logps), torch.tensor(alone.group.logps))


def test_an_interruption_rollout_is_the_evaluations_simulation(policy, adapter, items):
    """The model's own answer cut where OVIBench cuts it, the interruption appended: greedy, the group's
    reactions are the reaction the evaluation scores, and the cut answer is what the rewards read."""
    from models.ovi_simulation import simulate_interruption
    from train.rollouts import rollout

    for kind in ("Cancellation", "False Trigger", "Correction"):
        item = items[kind]
        simulated = simulate_interruption(policy, adapter, item, max_new_tokens=8)
        rolled = rollout(policy, adapter, item, generations=2, temperature=0.0, max_tokens=8)
        assert rolled.item.meta["spoken"] == simulated.truncated_answer != item.meta["partial_answer"]
        assert rolled.texts == [simulated.reaction] * 2
        ids = rolled.context["input_ids"][0].tolist()
        text = adapter.processor.tokenizer.decode(ids)
        assert item.turns[2].parts[-1].text in text  # the interruption's words are in the context


# -- the stage end to end ------------------------------------------------------------------------------------

# GRPO on the quickstart's setting, small: 4 completions per prompt of up to 24 tokens, long enough for the
# random-weight replies' lengths to vary, and with them the Cancellation reward: groups that do not tie.
GRPO_OVERRIDES = ["stage.method=grpo", "stage.grpo.num_generations=4", "stage.grpo.max_completion_length=24"]
LOGGED_EVERY_STEP = (
    "reward",
    "reward_std",
    "kl",
    "completions/mean_length",
    "frac_reward_zero_std",
)


@pytest.fixture(scope="module")
def grpo_after_sft(preference_after_sft, tmp_path_factory):
    """A 2-step SFT, then a 4-step GRPO run from its checkpoint, evaluated at baseline and every 2 steps."""
    root = tmp_path_factory.mktemp("grpo")
    cfg, result = preference_after_sft(root, "grpo", "trainer.logging_steps=1", *GRPO_OVERRIDES)
    return cfg, result, root


@pytest.mark.slow
def test_grpo_after_sft_evaluates_baseline_and_checkpoints_and_logs_every_reward(grpo_after_sft):
    cfg, result, root = grpo_after_sft
    logged = runs.check_preference_run(cfg, result.summary, root / "grpo", implicit_reward=False)
    steps = [entry for entry in logged if "train/reward" in entry]
    assert len(steps) == 4
    for entry in steps:
        assert all(f"train/{key}" in entry for key in LOGGED_EVERY_STEP), sorted(entry)
        assert 0.0 <= entry["train/frac_reward_zero_std"] <= 1.0 and entry["train/kl"] >= 0.0
    rewards = {key.split("/")[2] for entry in steps for key in entry if key.startswith("train/rewards/")}
    assert {"v2p_words", "ovi_ma", "ovi_ca"} <= rewards  # V2P in open form and OVI multiple choice, at least
    check_kl_moves_after_the_first_update(
        [{k.removeprefix("train/"): v for k, v in e.items()} for e in steps]
    )
    curves = result.summary["training"]["curves"]  # the reward curves, in summary.json and the report
    assert {"loss", "reward", "kl", "rewards/ovi_ma/mean"} <= set(curves)
    assert "## Training" in (root / "grpo" / "report.md").read_text()


@pytest.mark.slow
def test_killed_grpo_run_resumes_with_equal_losses(tmp_path):
    runs.check_resume_after_kill(tmp_path, runs.Launch([sys.executable], GRPO_OVERRIDES, {}))
    losses = runs.logged(tmp_path / "killed" / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}")
    assert any(loss != 0.0 for loss in losses), "the sampled groups must carry some signal"


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_grpo_under_zero_on_two_processes(tmp_path, stage):
    overrides = [f"trainer=zero{stage}" if o == "trainer=zero2" else o for o in runs.DEEPSPEED_OVERRIDES]
    launch = runs.Launch(runs.DEEPSPEED_LAUNCH, overrides + GRPO_OVERRIDES, runs.DEEPSPEED_ENV)
    runs.train(tmp_path, "zero", launch)
    run_dir = tmp_path / "zero"
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    last = run_dir / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}"
    rewards, losses = runs.logged(last, "reward"), runs.logged(last)
    assert len(rewards) == len(losses) == runs.MAX_STEPS and torch.isfinite(torch.tensor(losses)).all()
    assert (run_dir / "final" / "adapter_model.safetensors").exists()


def check_kl_moves_after_the_first_update(entries: list[dict]) -> None:
    """The KL to the reference is 0 until the first step with a gradient (groups that all tie have none),
    and not after it, as the policy leaves the frozen reference behind."""
    first = next(i for i, entry in enumerate(entries) if entry["grad_norm"] > 0)
    assert first < len(entries) - 1, "a later step must see the moved policy"
    assert all(entry["kl"] == pytest.approx(0.0, abs=1e-6) for entry in entries[: first + 1])
    assert max(entry["kl"] for entry in entries[first + 1 :]) > 0.0


@pytest.mark.slow
def test_grpo_under_full_fine_tuning_trains_against_a_frozen_reference(small_train_config, tmp_path):
    from train.recipe import train

    cfg = small_train_config(
        tmp_path, "run_name=full", "peft=full", "trainer.max_steps=4", "trainer.save_steps=4",
        "trainer.batch_size=2", "trainer.logging_steps=1", "eval=none", *GRPO_OVERRIDES,
    )  # fmt: skip
    trained = train(cfg).model
    check_kl_moves_after_the_first_update(
        runs.log_entries(tmp_path / "full" / "checkpoints" / "checkpoint-4", "kl")
    )
    assert not hasattr(trained, "peft_config")
    assert (tmp_path / "full" / "final" / "model.safetensors").exists()


def test_prompts_share_a_step_across_ranks_only_with_the_same_media_in_the_same_turns(items):
    """Under ZeRO-3 every rank must run the same modules: an interruption without new frames (it falls
    after the video's end) runs the vision tower once less than one with them."""
    from train.grpo import PromptDataset

    interrupted = items["Correction"]
    question, answer, interruption, reaction = interrupted.turns
    assert any(part.type == "video" for part in interruption.parts)
    frameless_turn = Turn("user", [part for part in interruption.parts if part.type == "text"])
    frameless = dataclasses.replace(interrupted, turns=[question, answer, frameless_turn, reaction])
    key = PromptDataset.step_key
    assert key(interrupted) != key(frameless) != key(items["v2p"])
    assert key(interrupted)[-1] == "interruption" and key(items["v2p"])[-1] == "prompt"


def test_scoring_one_completion_at_a_time_holds_one_sequence_and_gives_the_same_gradients(
    policy, adapter, items
):
    """Under gradient checkpointing the trainer scores completions one at a time, each recomputed in the
    backward: the head (and every layer) then sees one sequence at a time, never the micro-batch's G, and
    the log-probabilities and gradients are those of scoring the group together."""
    from train.rollouts import rollout

    torch.manual_seed(0)
    rolled = [
        rollout(policy, adapter, items[name], generations=3, temperature=1.0, max_tokens=6)
        for name in ("v2p", "Correction")
    ]
    rows, scored = [], {}
    hook = policy.get_output_embeddings().register_forward_hook(lambda m, i, out: rows.append(out.shape[0]))
    try:
        for one_at_a_time in (False, True):
            rows.clear()
            logps, mask = completion_logps(policy, rolled, 1.0, one_at_a_time=one_at_a_time)
            (logps * mask).sum().backward()
            grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
            policy.zero_grad(set_to_none=True)
            scored[one_at_a_time] = (logps.detach(), grads, list(rows))
    finally:
        hook.remove()
    assert scored[False][2] == [3, 3]
    assert scored[True][2] == [1] * 12  # six completions, each run forward and again in the backward
    torch.testing.assert_close(scored[True][0], scored[False][0], atol=1e-5, rtol=0)
    assert scored[True][1].keys() == scored[False][1].keys() and scored[False][1]
    for name, grad in scored[False][1].items():
        torch.testing.assert_close(scored[True][1][name], grad, atol=1e-5, rtol=1e-4, msg=name)
