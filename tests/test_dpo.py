"""The preference stage through TRL: pair batches supervise only the reactions; the reference of a LoRA run
is the base model (adapter off, no copy); a small DPO run after SFT evaluates baseline and checkpoints with
held-out preference metrics; a killed DPO run resumes with equal losses; ZeRO-2 and ZeRO-3 on two CPU
processes."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import runs
import torch

from core.config import ModelConfig, PeftConfig, TrainerConfig
from core.formats.ovi import load_ovibench
from core.media import FrameCache
from data_builders.preferences import pairs_from_samples
from models.pairs import completion_logps, pair_batch

# A DPO run on the quickstart's setting: pairs from the synthetic OVI-Train.
DPO_OVERRIDES = ["stage.method=dpo", "data.train=[${data.synthetic.root}/ovi_train/hf]"]


def test_only_the_reaction_tokens_carry_the_loss(adapter, pairs):
    chunk = [next(p for p in pairs if p.interruption_type == kind) for kind in ("Cancellation", "Correction")]
    batch = pair_batch(adapter, chunk)
    assert "labels" not in batch and batch["input_ids"].shape[0] == 4  # chosen rows, then rejected rows
    tokenizer = adapter.processor.tokenizer
    for row, pair in enumerate(chunk):
        starts = []
        for index, text in ((row, pair.chosen), (row + len(chunk), pair.rejected)):
            mask = batch["completion_mask"][index].bool()
            assert tokenizer.decode(batch["input_ids"][index][mask]) == text + "<|im_end|>"
            starts.append(int(mask.nonzero()[0]))
        # The prompts are the same tokens up to the reaction.
        chosen, rejected = batch["input_ids"][row], batch["input_ids"][row + len(chunk)]
        assert starts[0] == starts[1] and torch.equal(chosen[: starts[0]], rejected[: starts[1]])


def test_the_lora_off_reference_is_the_base_model(adapter, pairs, tiny_checkpoint, tmp_path):
    import datasets
    from trl import DPOConfig
    from trl.trainer.utils import add_fused_lm_head

    from models.loading import load_model
    from train.modes import apply_peft
    from train.preference import PairCollator, PreferenceTrainer

    batch = pair_batch(adapter, pairs[:2])
    untouched, _ = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    add_fused_lm_head(untouched)  # the base, scored as TRL scores the reference
    inputs = {k: v for k, v in batch.items() if k != "completion_mask"}
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    with torch.no_grad():
        fused = untouched(**inputs, labels=labels, fused_lm_head=True).log_probs.sum(dim=1)
    base, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    base_logps = completion_logps(base, batch)
    model = apply_peft(base, PeftConfig(dropout=0.0))
    with torch.no_grad():  # a trained adapter: the policy now differs from the base
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    args = DPOConfig(
        output_dir=str(tmp_path),
        report_to=[],
        max_length=None,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,  # DPOConfig's default: bf16 autocast, also on CPU (the recipe sets it as SFT does)
    )
    trainer = PreferenceTrainer(
        model=model,
        args=args,
        trainer_cfg=TrainerConfig(),
        processing_class=processor,
        train_dataset=datasets.Dataset.from_list([p.to_row() for p in pairs[:2]]),
        data_collator=PairCollator(adapter),
    )
    assert trainer.ref_model is None and "ref" not in trainer.model.peft_config  # no second copy
    ref_chosen, ref_rejected = trainer.compute_ref_log_probs(trainer.model, batch)
    reference = torch.cat([ref_chosen, ref_rejected])
    torch.testing.assert_close(reference, fused, rtol=1e-6, atol=1e-5)
    # Our own scoring (a full log-softmax: the ovi_pairs benchmark's) agrees up to the fused head's tiling.
    torch.testing.assert_close(reference, base_logps, rtol=2e-4, atol=0.0)
    policy = completion_logps(trainer.model, batch)
    assert (policy - base_logps).abs().max() > 0.1, "the adapter must matter for this test to mean anything"


@pytest.fixture(scope="module")
def dpo_after_sft(preference_after_sft, tmp_path_factory):
    """A 2-step SFT, then a 4-step DPO (+ NLL) run from its checkpoint, evaluated at baseline and every 2
    steps."""
    root = tmp_path_factory.mktemp("dpo")
    # As the shipped experiments: DPO + the chosen answers' NLL.
    rpo = "stage.preference.loss_type=[sigmoid,sft]"
    cfg, result = preference_after_sft(root, "dpo", *DPO_OVERRIDES, rpo)
    return cfg, result, root


@pytest.mark.slow
def test_dpo_after_sft_evaluates_baseline_and_checkpoints_with_preference_metrics(dpo_after_sft):
    cfg, result, root = dpo_after_sft
    logged = runs.check_preference_run(cfg, result.summary, root / "dpo")
    assert any("train/rewards/margins" in entry for entry in logged)  # TRL's own DPO metrics


@pytest.mark.slow
def test_the_baseline_pairs_are_scored_on_the_sft_model(dpo_after_sft):
    """The baseline's stored log-probabilities are those of base + SFT adapter (with the run's media)."""
    from peft import PeftModel

    from models.chat import make_adapter
    from models.loading import load_model

    cfg, _, root = dpo_after_sft
    stored = _pair_logps(root / "dpo", "baseline")
    first = pairs_from_samples(load_ovibench(cfg.eval.settings["ovi_pairs"].root)).pairs[:2]
    base_cfg = ModelConfig(name_or_path=str(root / "models" / "tiny-qwen2.5-vl"))
    base, processor = load_model(base_cfg)
    sft = PeftModel.from_pretrained(base, root / "sft" / "checkpoints" / "checkpoint-2")
    chat = make_adapter(cfg.model.family, processor, cfg.media, FrameCache(cfg.data.frame_cache))
    chosen, rejected = completion_logps(sft, pair_batch(chat, first)).chunk(2)
    with sft.disable_adapter():
        untuned = completion_logps(sft, pair_batch(chat, first))
    assert (untuned - torch.cat([chosen, rejected])).abs().max() > 0.01  # the SFT step changed them
    for pair, c, r in zip(first, chosen, rejected, strict=True):
        assert stored[pair.id] == pytest.approx((float(c), float(r)), abs=1e-3)


def _pair_logps(run_dir, name: str) -> dict[str, tuple[float, float]]:
    """The stored log-probabilities of each pair: (chosen, rejected)."""
    records = map(json.loads, (run_dir / "eval" / name / "ovi_pairs.jsonl").read_text().splitlines())
    return {r["id"]: tuple(r["prediction"]) for r in records}


@pytest.mark.slow
def test_the_watcher_and_python_m_eval_score_the_pairs_as_inline_evaluation_does(
    dpo_after_sft, small_eval_config, tmp_path
):
    """The DPO run evaluated again by the watcher (a copy without its pair scores or model list) and one
    checkpoint by ``python -m eval``: the same held-out pairs, the same log-probabilities."""
    from eval.run import run
    from eval.watch import watch

    _, result, root = dpo_after_sft
    copy = tmp_path / "dpo"
    shutil.copytree(
        root / "dpo", copy, ignore=shutil.ignore_patterns("ovi_pairs.jsonl", "models.json", "wandb")
    )
    watched = watch(copy, device="cpu")["benchmarks"]["ovi_pairs"]["metrics"]
    inline_metrics = result.summary["benchmarks"]["ovi_pairs"]["metrics"]
    assert watched["accuracy"]["checkpoints"].keys() == inline_metrics["accuracy"]["checkpoints"].keys()
    assert {"checkpoint-2", "checkpoint-4"} <= watched["reward_accuracy"]["checkpoints"].keys()
    assert watched["margin"]["baseline"] is None  # the reference has no reward against itself
    for name in ("baseline", "checkpoint-4"):
        inline, again = _pair_logps(root / "dpo", name), _pair_logps(copy, name)
        assert inline.keys() == again.keys() and inline
        assert all(again[i] == pytest.approx(inline[i], abs=1e-3) for i in inline)

    cfg = small_eval_config(tmp_path, "run_name=alone", f"checkpoint={copy / 'checkpoints' / 'checkpoint-4'}")
    alone = run(cfg)["benchmarks"]["ovi_pairs"]  # the run scored pairs, so its checkpoint's evaluation does
    assert "reward_accuracy" not in alone["metrics"] and alone["metrics"]["accuracy"]["n"] > 0
    again = _pair_logps(tmp_path / "alone", "checkpoint-4")
    inline = _pair_logps(root / "dpo", "checkpoint-4")
    assert all(again[i] == pytest.approx(inline[i], abs=1e-3) for i in inline)


@pytest.mark.slow
def test_killed_dpo_run_resumes_with_equal_losses(tmp_path):
    launch = runs.Launch([sys.executable], DPO_OVERRIDES, {})
    step = runs.kill_step()
    runs.train(tmp_path, "straight", launch)
    runs.train_until_killed(tmp_path, "killed", f"checkpoint-{step}", launch)
    output = runs.train(tmp_path, "killed", launch)
    assert "resuming from" in output
    runs.check_equal_runs(tmp_path / "straight", tmp_path / "killed")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_dpo_under_zero_on_two_processes(tmp_path, stage):
    overrides = [f"trainer=zero{stage}" if o == "trainer=zero2" else o for o in runs.DEEPSPEED_OVERRIDES]
    runs.train(
        tmp_path,
        "zero",
        runs.Launch(runs.DEEPSPEED_LAUNCH, overrides + DPO_OVERRIDES, runs.DEEPSPEED_ENV),
    )
    run_dir = tmp_path / "zero"
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    last = run_dir / "checkpoints" / f"checkpoint-{runs.MAX_STEPS}"
    margins = runs.logged(last, "rewards/margins")
    assert len(margins) == runs.MAX_STEPS and torch.isfinite(torch.tensor(margins)).all()
    assert (run_dir / "final" / "adapter_model.safetensors").exists()


def test_full_fine_tuning_gets_a_frozen_reference_and_lora_none(compose, tiny_checkpoint):
    from train.preference import reference_model

    cfg = compose("train", "+exp=quickstart_dpo", f"model.name_or_path={tiny_checkpoint}", "peft=full")
    assert reference_model(cfg, peft_model=True) is None
    reference = reference_model(cfg, peft_model=False)
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())


def test_start_from_must_be_a_checkpoint_directory(compose, tmp_path):
    from core.errors import ConfigError
    from core.rundir import RunDir
    from train.preference import with_start_model

    cfg = compose("train", "+exp=quickstart_dpo", f"stage.start_from={tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match="stage.start_from"):
        with_start_model(cfg, RunDir(tmp_path / "run"))
    full = tmp_path / "full"
    full.mkdir()  # a full checkpoint (no adapter_config.json) is used as it is
    cfg = compose("train", "+exp=quickstart_dpo", f"stage.start_from={full}")
    started = with_start_model(cfg, RunDir(tmp_path / "run"))
    assert started.model.name_or_path == str(full) and not started.model.tiny
    assert cfg.model.name_or_path != str(full), "the given config is left as it is"


def test_pair_forms_select_the_training_pairs(compose, synthetic_build, tmp_path):
    from core.errors import ConfigError
    from core.run import Run
    from core.rundir import RunDir
    from train.preference import training_pairs

    cache = FrameCache(tmp_path / "cache")
    for forms, wanted in (("[mcq]", {"mcq"}), ("[open,mcq]", {"mcq", "open"})):
        cfg = compose(
            "train", "+exp=quickstart_dpo", f"data.train=[{synthetic_build.ovi_train}]",
            f"stage.preference.pair_forms={forms}", "media.num_frames=4",
        )  # fmt: skip
        pairs = training_pairs(Run(cfg, RunDir(tmp_path / "run")), cache).rows
        assert pairs and {pair.sample.meta["format"] for pair in pairs} == wanted
    none = "stage.preference.pair_forms=[]"
    cfg = compose("train", "+exp=quickstart_dpo", f"data.train=[{synthetic_build.ovi_train}]", none)
    with pytest.raises(ConfigError, match="stage.preference.pair_forms"):
        training_pairs(Run(cfg, RunDir(tmp_path / "run")), cache)


def test_data_weights_mix_the_pair_datasets(compose, synthetic_build, tmp_path):
    from core.run import Run
    from core.rundir import RunDir
    from train.preference import training_pairs

    ovi = synthetic_build.ovi_train
    cfg = compose(
        "train", "+exp=quickstart_dpo", f"data.train=[{ovi},{ovi}]", "data.weights=[1,3]",
        "stage.preference.pair_forms=[open]", "media.num_frames=4",
    )  # fmt: skip
    drawn = training_pairs(Run(cfg, RunDir(tmp_path / "run")), FrameCache(tmp_path / "cache"))
    pairs, mix = drawn.rows, drawn.mix  # the recipe writes the mix to data_mix.json
    first, second = mix["datasets"]
    assert first["pairs"] == second["pairs"] > 0 and second["drawn"] == second["pairs"]  # the 3/4 share
    assert first["drawn"] == round(second["pairs"] / 3)  # runs out last: a seeded quarter-size draw
    assert mix["strategy"] == "interleave_under" and mix["pairs"] == len(pairs)
    assert all(pair.sample.meta["format"] == "open" for pair in pairs)
