"""KTO through TRL: the pairs unpaired give each right reaction once and each wrong one once; KTO batches
supervise only the reactions and label them; the KL rows are each prompt (same tokens, same video) with
the previous row's reaction; the reference of a LoRA run is the base model (adapter off, no copy), for the
rows and the KL rows, and the rarer right reactions are weighted up to balance; a small KTO run after SFT
evaluates baseline and checkpoints with held-out preference metrics; a killed KTO run resumes with equal
losses; ZeRO-2 and ZeRO-3 on two CPU processes."""

from __future__ import annotations

import json
import sys

import pytest
import runs
import torch

from core.config import ModelConfig, PeftConfig, StageConfig, TrainConfig, TrainerConfig
from core.pairs import unpaired, with_reaction
from models.pairs import completion_batch, completion_logps, unpaired_batch

# A KTO run on the quickstart's setting: reactions from the synthetic OVI-Train's pairs.
KTO_OVERRIDES = ["stage.method=kto", "data.train=[${data.synthetic.root}/ovi_train/hf]"]


def _rows(batch: dict) -> dict:
    """The batch's own rows, as ``completion_logps`` takes them."""
    return {k: v for k, v in batch.items() if not k.startswith("KL_") and k != "label"}


def _kl_rows(batch: dict) -> dict:
    """The batch's KL rows with the rows' media inputs, as TRL's KL forward gives them to the model."""
    return {**_rows(batch), **{k.removeprefix("KL_"): v for k, v in batch.items() if k.startswith("KL_")}}


def _mixed(reactions, n: int):
    """``n`` reactions from different instances, right and wrong ones alternating."""
    chosen, by_instance = [], {}
    for reaction in reactions:
        by_instance.setdefault(tuple(reaction.source_rows), {}).setdefault(reaction.desirable, reaction)
    for options in by_instance.values():
        want = len(chosen) % 2 == 0  # right first
        if want in options:
            chosen.append(options[want])
        if len(chosen) == n:
            return chosen
    raise AssertionError("too few instances")


def test_unpaired_gives_each_right_reaction_once_and_each_wrong_one(pairs):
    reactions = unpaired(pairs)
    wrong = [(r.id, r.reaction, r.error, r.source_rows) for r in reactions if not r.desirable]
    assert wrong == [(p.id, p.rejected, p.error, p.source_rows) for p in pairs]
    right = [r for r in reactions if r.desirable]
    conversations = {(tuple(p.source_rows), p.sample.meta["format"]): p for p in pairs}
    assert len(right) == len(conversations) and len({r.id for r in reactions}) == len(reactions)
    for reaction in right:
        pair = conversations[tuple(reaction.source_rows), reaction.sample.meta["format"]]
        assert reaction.reaction == pair.chosen and reaction.error is None
        assert reaction.sample.turns[:-1] == pair.sample.turns[:-1]
        assert reaction.id == pair.id.removesuffix(pair.error) + "chosen"


def test_kto_batches_supervise_only_the_reactions_and_label_them(adapter, pairs):
    reactions = _mixed(unpaired(pairs), 4)
    batch = unpaired_batch(adapter, reactions)
    assert "labels" not in batch and batch["input_ids"].shape[0] == 4
    assert batch["label"].dtype == torch.bool
    assert batch["label"].tolist() == [r.desirable for r in reactions] == [True, False, True, False]
    tokenizer = adapter.processor.tokenizer
    for row, reaction in enumerate(reactions):
        mask = batch["completion_mask"][row].bool()
        assert tokenizer.decode(batch["input_ids"][row][mask]) == reaction.reaction + "<|im_end|>"


def test_kl_rows_are_each_prompt_with_the_previous_rows_reaction_and_the_same_video(adapter, pairs):
    reactions = _mixed(unpaired(pairs), 3)
    batch = unpaired_batch(adapter, reactions)
    tokenizer = adapter.processor.tokenizer
    prompts = []
    for row, previous in enumerate([reactions[-1], *reactions[:-1]]):
        start = int(batch["completion_mask"][row].nonzero()[0])
        kl_mask = batch["KL_completion_mask"][row].bool()
        assert int(kl_mask.nonzero()[0]) == start
        assert torch.equal(batch["KL_input_ids"][row][:start], batch["input_ids"][row][:start])
        assert tokenizer.decode(batch["KL_input_ids"][row][kl_mask]) == previous.reaction + "<|im_end|>"
        prompts.append(batch["input_ids"][row][:start].tolist())
    assert len({tuple(p) for p in prompts}) == 3, "rows of different instances, so a mixed-up video shows"
    # The KL rows rendered on their own carry exactly the rows' media inputs: the KL forward may share them.
    previous = [reactions[-1], *reactions[:-1]]
    alone = completion_batch(
        adapter, [with_reaction(r.sample, p.reaction) for r, p in zip(reactions, previous, strict=True)]
    )
    for key in ("input_ids", "attention_mask", "completion_mask", "mm_token_type_ids"):
        assert torch.equal(alone[key], batch[f"KL_{key}"]), key  # spliced = rendered whole
    for key in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
        assert torch.equal(alone[key], batch[key]), key


def test_the_lora_off_reference_is_the_base_model(adapter, pairs, tiny_checkpoint, tmp_path, monkeypatch):
    import datasets

    from core.run import Run
    from core.rundir import RunDir
    from models.loading import load_model
    from train.data import TrainingSet
    from train.modes import apply_peft
    from train.preference import UnpairedCollator, UnpairedTrainer, kto_arguments
    from train.preference_config import PreferenceConfig
    from train.recipe import training_arguments

    reactions = _mixed(unpaired(pairs), 2)  # one right, one wrong: TRL's metrics are then per row
    batch = unpaired_batch(adapter, reactions)
    base, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    base_logps, base_kl = completion_logps(base, _rows(batch)), completion_logps(base, _kl_rows(batch))
    model = apply_peft(base, PeftConfig(dropout=0.0))
    with torch.no_grad():  # a trained adapter: the policy now differs from the base
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    trainer_cfg = TrainerConfig(batch_size=2)
    stage = StageConfig(preference=PreferenceConfig())  # as the run resolves it
    run = Run(TrainConfig(trainer=trainer_cfg, stage=stage), RunDir(tmp_path))
    rows = TrainingSet(unpaired(pairs), [], {})
    arguments_class, kto_kwargs = kto_arguments(run, rows)  # the recipe's, on the CPU
    args = training_arguments(trainer_cfg, tmp_path, None, arguments_class, **kto_kwargs, use_cpu=True)
    trainer = UnpairedTrainer(
        model=model,
        args=args,
        trainer_cfg=trainer_cfg,
        processing_class=processor,
        train_dataset=datasets.Dataset.from_list([r.to_row() for r in unpaired(pairs)]),
        data_collator=UnpairedCollator(adapter),
    )
    assert trainer.ref_model is None and "ref" not in trainer.model.peft_config  # no second copy
    right = sum(r.desirable for r in unpaired(pairs))
    assert trainer.desirable_weight == (len(unpaired(pairs)) - right) / right > 2  # the rarer right ones
    trainer.model.eval()
    kl_forwards, compute_kl = [], trainer._compute_kl_logps  # the policy's KL forward, then the reference's

    def recorded_kl(model, inputs):
        kl_forwards.append(compute_kl(model, inputs).cpu())
        return kl_forwards[-1].to(inputs["input_ids"].device)

    monkeypatch.setattr(trainer, "_compute_kl_logps", recorded_kl)
    with torch.no_grad():
        trainer.compute_loss(trainer.model, batch)
    policy = completion_logps(trainer.model, _rows(batch))
    policy_kl = completion_logps(trainer.model, _kl_rows(batch))
    for tuned, untuned in ((policy, base_logps), (policy_kl, base_kl)):
        assert (tuned - untuned).abs().max() > 0.1, "the adapter must matter for this test to mean anything"
    metrics, beta = trainer._metrics["eval"], args.beta
    torch.testing.assert_close(
        torch.tensor([metrics["logps/chosen"][0], metrics["logps/rejected"][0]]), policy, rtol=2e-4, atol=0.0
    )
    reference = [
        metrics[f"logps/{kind}"][0] - metrics[f"rewards/{kind}"][0] / beta for kind in ("chosen", "rejected")
    ]
    torch.testing.assert_close(torch.tensor(reference), base_logps, rtol=2e-4, atol=0.0)
    torch.testing.assert_close(kl_forwards[0], policy_kl, rtol=2e-4, atol=0.0)
    torch.testing.assert_close(kl_forwards[1], base_kl, rtol=2e-4, atol=0.0)


@pytest.fixture(scope="module")
def kto_after_sft(preference_after_sft, tmp_path_factory):
    """A 2-step SFT, then a 4-step KTO run from its checkpoint, evaluated at baseline and every 2 steps."""
    root = tmp_path_factory.mktemp("kto")
    cfg, result = preference_after_sft(root, "kto", "trainer.logging_steps=1", *KTO_OVERRIDES)
    return cfg, result, root


@pytest.mark.slow
def test_kto_after_sft_evaluates_baseline_and_checkpoints_with_preference_metrics(kto_after_sft):
    cfg, result, root = kto_after_sft
    logged = runs.check_preference_run(cfg, result.summary, root / "kto")
    assert sum("train/kl" in entry for entry in logged) == 4  # TRL's own KTO metrics, every step


@pytest.mark.slow
def test_killed_kto_run_resumes_with_equal_losses(tmp_path):
    runs.check_resume_after_kill(tmp_path, runs.Launch([sys.executable], KTO_OVERRIDES, {}))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_kto_under_zero_on_two_processes(tmp_path, stage):
    overrides = [f"trainer=zero{stage}" if o == "trainer=zero2" else o for o in runs.DEEPSPEED_OVERRIDES]
    launch = runs.Launch(runs.DEEPSPEED_LAUNCH, overrides + KTO_OVERRIDES, runs.DEEPSPEED_ENV)
    runs.train(tmp_path, "zero", launch)
    run_dir = tmp_path / "zero"
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    last = run_dir / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}"
    kl, losses = runs.logged(last, "kl"), runs.logged(last)
    assert len(kl) == len(losses) == runs.MAX_STEPS and torch.isfinite(torch.tensor(kl + losses)).all()
    assert (run_dir / "final" / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_kto_under_full_fine_tuning_trains_against_a_frozen_reference(small_train_config, tmp_path):
    from train.recipe import train

    cfg = small_train_config(
        tmp_path, "run_name=full", "peft=full", "trainer.max_steps=2", "trainer.save_steps=2",
        "trainer.batch_size=2", "trainer.logging_steps=1", "eval=none", *KTO_OVERRIDES,
    )  # fmt: skip
    trained = train(cfg).model
    logged = runs.log_entries(tmp_path / "full" / "checkpoints" / "checkpoint-2", "kl")
    assert len(logged) == 2 and all(torch.isfinite(torch.tensor([e["loss"], e["kl"]])).all() for e in logged)
    # The reward is beta x the log-ratio to the reference: zero before the first update, then not, as the
    # policy leaves the frozen copy behind.
    rewards = [next(e[k] for k in ("rewards/chosen", "rewards/rejected") if k in e) for e in logged]
    assert rewards[0] == pytest.approx(0.0, abs=1e-5) and abs(rewards[1]) > 1e-3
    assert not hasattr(trained, "peft_config")
    assert (tmp_path / "full" / "final" / "model.safetensors").exists()
