"""``plan=true``: a run planned at its released size, offline, without weights (train/plan.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from models.released import RELEASED
from train.plan import VERDICTS, plan_run

REAL_MODELS = {
    "qwen2_vl_7b": "qwen2_vl",
    "qwen2_5_vl_7b": "qwen2_5_vl",
    "qwen3_vl_8b": "qwen3_vl",
    "llava_onevision_7b": "llava_onevision",
    "internvl_8b": "internvl",
}
# Every shipped experiment of a real model (conf/exp/ but the quickstarts and the stand-in's pretraining).
TOY_EXPERIMENTS = ("standin",)
REAL_EXPERIMENTS = ("ovi_dpo", "ovi_grpo", "ovi_lora", "v2p_grpo", "v2p_lora")


def test_the_ci_check_below_plans_every_shipped_real_experiment(repo):
    shipped = sorted(
        p.stem
        for p in (repo / "conf" / "exp").glob("*.yaml")
        if not p.stem.startswith("quickstart") and p.stem not in TOY_EXPERIMENTS
    )
    assert tuple(shipped) == REAL_EXPERIMENTS


@pytest.mark.slow
@pytest.mark.parametrize("model", REAL_MODELS)
@pytest.mark.parametrize("experiment", REAL_EXPERIMENTS)
def test_every_shipped_real_experiment_with_every_real_family_fits_on_80_gb(
    compose, tmp_path, experiment, model
):
    """As shipped, on one 80 GB GPU (``trainer=gpu``: no ZeRO): the released architecture with its exact
    parameter count, the family's official media, the stage's sequences per micro-batch."""
    cfg = compose("train", f"+exp={experiment}", f"model={model}", f"output_root={tmp_path}", "plan=true")
    plan = plan_run(cfg)
    assert plan.parameters["base"] == RELEASED[REAL_MODELS[model]].parameters
    assert plan.verdict == "fits", (plan.verdict, plan.total_bytes / 1024**3, plan.terms[:2])


@pytest.mark.slow
def test_python_m_train_plan_true_writes_the_plan_without_weights(repo, tmp_path):
    """The must-show command, as a user runs it: offline, no checkpoint on disk, within a minute."""
    command = [sys.executable, "-m", "train", "+exp=v2p_lora", "model=qwen2_5_vl_7b", "plan=true"]
    env = {"HF_HUB_OFFLINE": "1", "PATH": "", "HOME": str(tmp_path)}
    done = subprocess.run(
        [*command, f"output_root={tmp_path}"], cwd=repo, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads((tmp_path / "v2p_lora" / "plan.json").read_text())
    assert plan["parameters"]["base"] == 8_292_166_656
    assert plan["verdict"] in VERDICTS
    assert plan["seconds"] < 60
    assert "per GPU" in done.stdout and (tmp_path / "v2p_lora" / "plan.md").exists()


def test_a_path_with_no_config_and_no_released_shape_is_one_line(repo, tmp_path):
    command = [sys.executable, "-m", "train", "+exp=v2p_lora", f"model.name_or_path={tmp_path}/nowhere"]
    done = subprocess.run(
        [*command, "plan=true", f"output_root={tmp_path}"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "config.json" in done.stderr, done.stderr


def test_the_plan_counts_each_sample_as_the_processor_makes_it(
    compose, tmp_path, synthetic_build, adapter, tiny_checkpoint
):
    """Tokens read from headers (no decoding) equal the collated batch's: visual tokens exactly, the text
    with the checkpoint's tokenizer, the labelled tokens as the collator masks them."""
    from train.data import load_dataset_samples
    from train.plan import _token_counter

    cfg = compose("train", "+exp=quickstart", f"model.name_or_path={tiny_checkpoint}")
    counter, note = _token_counter(replace(cfg, media=adapter.media), adapter.processor)
    assert note.startswith("text tokens: the tokenizer at")
    samples = (
        load_dataset_samples(synthetic_build.v2p_sft)[:3]
        + load_dataset_samples(synthetic_build.ovi_train)[:3]
    )
    for sample in samples:
        counted = counter.sample(sample)
        batch = adapter.training_batch([adapter.render(sample, for_generation=False)])
        assert counted.total == batch["input_ids"].shape[1], sample.id
        assert counted.labelled == int((batch["labels"] != -100).sum()), sample.id


def test_the_quickstart_plan_reads_its_data_and_measures_the_p95_and_the_worst_sample(
    compose, tmp_path, synthetic_build
):
    cfg = compose(
        "train", "+exp=quickstart", f"output_root={tmp_path}", "plan=true", "data.build_synthetic=false",
        f"data.train=[{synthetic_build.v2p_sft},{synthetic_build.ovi_train}]",
        f"eval.settings.v2p.root={synthetic_build.v2p_bench}",
        f"eval.settings.ovi.root={synthetic_build.ovibench}",
    )  # fmt: skip
    plan = plan_run(cfg)
    assert plan.tokens["train"]["samples"] > 0 and plan.tokens["v2p"]["samples"] > 0
    assert {(a.sample, a.gradient_checkpointing) for a in plan.activations} == {
        ("p95", False),
        ("p95", True),
        ("worst", False),
        ("worst", True),
    }
    worst = plan.tokens["worst_case"]
    assert sum(worst["video"]) + sum(worst["images"]) >= plan.tokens["train"]["visual"]["max"]
    record = json.loads((tmp_path / "quickstart" / "plan.json").read_text())
    assert record["verdict"] == plan.verdict == "fits"


def test_the_plan_reads_a_synthetic_build_on_disk_and_never_builds_one(compose, tmp_path, synthetic_build):
    from data_builders.build import built_synthetic_datasets

    root = synthetic_build.v2p_sft.parents[1]
    cfg = compose("train", "+exp=quickstart", f"output_root={tmp_path}", f"data.synthetic.root={root}")
    assert built_synthetic_datasets(cfg.data)["ovi_train"] == str(synthetic_build.ovi_train)
    absent = compose("train", "+exp=quickstart", f"output_root={tmp_path}")
    assert built_synthetic_datasets(absent.data) == {}
    assert not (tmp_path / "data").exists()
