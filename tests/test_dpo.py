"""The preference stage through TRL: pair batches supervise only the reactions; the reference of a LoRA run
is the base model (adapter off, no copy); a small DPO run after SFT evaluates baseline and checkpoints with
held-out preference metrics; a killed DPO run resumes with equal losses; ZeRO-2 and ZeRO-3 on two CPU
processes."""

from __future__ import annotations

import json
import sys

import pytest
import test_resume as resume
import torch

from core.config import ModelConfig, PeftConfig, TrainerConfig
from data_builders.media import FrameCache, MediaSpec
from data_builders.ovi_format import load_ovibench
from data_builders.preferences import pairs_from_samples
from models.chat import VideoChatAdapter
from models.pairs import completion_logps, pair_batch

# A DPO run on the quickstart's setting: pairs from the synthetic OVI-Train.
DPO_OVERRIDES = ["stage.method=dpo", "data.train=[${data.synthetic.root}/ovi_train/hf]"]


@pytest.fixture(scope="module")
def pairs(synthetic_build):
    return pairs_from_samples(load_ovibench(synthetic_build.ovibench)).pairs


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tmp_path_factory):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_checkpoint)
    return VideoChatAdapter(processor, MediaSpec(num_frames=4), FrameCache(tmp_path_factory.mktemp("cache")))


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
    from train.dpo import PairCollator, PreferenceTrainer
    from train.modes import apply_peft

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
    # Our own scoring (a full log-softmax, eval/preference.py) agrees up to the fused head's tiling.
    torch.testing.assert_close(reference, base_logps, rtol=2e-4, atol=0.0)
    policy = completion_logps(trainer.model, batch)
    assert (policy - base_logps).abs().max() > 0.1, "the adapter must matter for this test to mean anything"


@pytest.fixture(scope="module")
def dpo_after_sft(small_train_config, tmp_path_factory):
    """A 2-step SFT, then a 4-step DPO run from its checkpoint, evaluated at baseline and every 2 steps."""
    from train.recipe import run

    root = tmp_path_factory.mktemp("dpo")
    sft = small_train_config(root, "run_name=sft", "trainer.max_steps=2", "trainer.save_steps=2", "eval=none")
    run(sft)
    checkpoint = root / "sft" / "checkpoints" / "checkpoint-2"
    cfg = small_train_config(
        root, "run_name=dpo", "trainer.max_steps=4", "trainer.save_steps=2", "trainer.batch_size=2",
        "peft.modules_to_save=[]", f"stage.start_from={checkpoint}", *DPO_OVERRIDES,
    )  # fmt: skip
    return cfg, run(cfg), root


@pytest.mark.slow
def test_dpo_after_sft_evaluates_baseline_and_checkpoints_with_preference_metrics(dpo_after_sft):
    cfg, result, root = dpo_after_sft
    run_dir = root / "dpo"
    start = run_dir / "start_model"
    assert (start / "config.json").exists() and cfg.model.name_or_path == str(start)
    assert f"name_or_path: {start}" in (run_dir / "resolved_config.yaml").read_text()
    preference = result.summary["preference"]
    assert list(preference["models"]) == ["baseline", "checkpoint-2", "checkpoint-4"]
    last = preference["models"]["checkpoint-4"]["overall"]
    assert last["n"] == preference["n_pairs"] > 0
    assert {"reward_accuracy", "margin", "delta"} <= last.keys()
    assert "reward_accuracy" not in preference["models"]["baseline"]["overall"]
    assert set(result.summary["benchmarks"]) == {"v2p", "ovi"}
    assert "## Held-out preference pairs (OVIBench)" in (run_dir / "report.md").read_text()
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("train/rewards/margins" in entry for entry in logged)  # TRL's own DPO metrics
    assert any("ovi_pairs/overall/accuracy/delta" in entry for entry in logged)
    adapter = json.loads((run_dir / "final" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(start)


@pytest.mark.slow
def test_the_baseline_pairs_are_scored_on_the_sft_model(dpo_after_sft):
    """The baseline's stored log-probabilities are those of base + SFT adapter (with the run's media)."""
    from peft import PeftModel

    from models.chat import make_adapter
    from models.loading import load_model

    cfg, _, root = dpo_after_sft
    records = [json.loads(line) for line in (root / "dpo" / "eval" / "baseline" / "ovi_pairs.jsonl").open()]
    stored = {r["id"]: (r["chosen_logp"], r["rejected_logp"]) for r in records}
    first = pairs_from_samples(load_ovibench(cfg.eval.ovi_root)).pairs[:2]
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


@pytest.mark.slow
def test_killed_dpo_run_resumes_with_equal_losses(tmp_path):
    launch = resume.Launch([sys.executable], DPO_OVERRIDES, {})
    step = resume._kill_step()
    resume._train(tmp_path, "straight", launch)
    resume._train_until_killed(tmp_path, "killed", f"checkpoint-{step}", launch)
    output = resume._train(tmp_path, "killed", launch)
    assert "resuming from" in output
    resume._check_equal_runs(tmp_path / "straight", tmp_path / "killed")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_dpo_under_zero_on_two_processes(tmp_path, stage):
    overrides = [f"trainer=zero{stage}" if o == "trainer=zero2" else o for o in resume.DEEPSPEED_OVERRIDES]
    resume._train(
        tmp_path,
        "zero",
        resume.Launch(resume.DEEPSPEED_LAUNCH, overrides + DPO_OVERRIDES, resume.DEEPSPEED_ENV),
    )
    run_dir = tmp_path / "zero"
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    last = run_dir / "checkpoints" / f"checkpoint-{resume.MAX_STEPS}"
    state = json.loads((last / "trainer_state.json").read_text())
    margins = [entry["rewards/margins"] for entry in state["log_history"] if "rewards/margins" in entry]
    assert len(margins) == resume.MAX_STEPS and torch.isfinite(torch.tensor(margins)).all()
    assert (run_dir / "final" / "adapter_model.safetensors").exists()


def test_full_fine_tuning_gets_a_frozen_reference_and_lora_none(compose, tiny_checkpoint):
    from train.dpo import reference_model

    cfg = compose("train", "+exp=quickstart_dpo", f"model.name_or_path={tiny_checkpoint}", "peft=full")
    assert reference_model(cfg, peft_model=True) is None
    reference = reference_model(cfg, peft_model=False)
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())


def test_start_from_must_be_a_checkpoint_directory(compose, tmp_path):
    from core.rundir import RunDir
    from data_builders.errors import ConfigError
    from train.dpo import resolve_start

    cfg = compose("train", "+exp=quickstart_dpo", f"stage.start_from={tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match="stage.start_from"):
        resolve_start(cfg, RunDir(tmp_path / "run"))
    full = tmp_path / "full"
    full.mkdir()  # a full checkpoint (no adapter_config.json) is used as it is
    cfg.stage.start_from = str(full)
    resolve_start(cfg, RunDir(tmp_path / "run"))
    assert cfg.model.name_or_path == str(full) and not cfg.model.tiny


def test_pair_forms_select_the_training_pairs(compose, synthetic_build, tmp_path):
    from core.rundir import RunDir
    from data_builders.errors import ConfigError
    from train.dpo import preference_dataset

    cfg = compose(
        "train", "+exp=quickstart_dpo", f"data.train=[{synthetic_build.ovi_train}]", "stage.pair_forms=[mcq]"
    )
    chat = VideoChatAdapter.__new__(VideoChatAdapter)
    chat.follow_on = True
    cache = FrameCache(tmp_path / "cache")
    cfg.media = MediaSpec(num_frames=4)
    rows = preference_dataset(cfg, chat, cache, RunDir(tmp_path / "run"))
    assert len(rows) > 0 and all(json.loads(meta)["format"] == "mcq" for meta in rows["meta"])
    cfg.stage.pair_forms = ["letters"]
    with pytest.raises(ConfigError, match="stage.pair_forms"):
        preference_dataset(cfg, chat, cache, RunDir(tmp_path / "run"))
