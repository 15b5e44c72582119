"""The quickstart at reduced size, end to end: build → LoRA training → both benchmarks → summary and W&B."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from wandb_records import history


@pytest.fixture(scope="module")
def quickstart_run(small_train_config, tmp_path_factory):
    from train.recipe import train

    cfg = small_train_config(tmp_path_factory.mktemp("quickstart"))
    return cfg, train(cfg)


def _untrained_copy(cfg):
    """The model exactly as the run built it before step 1 (same seed, same code path)."""
    from transformers import set_seed

    from models.loading import load_model
    from train.modes import apply_peft

    set_seed(cfg.trainer.seed)
    model, _ = load_model(cfg.model)
    return apply_peft(model, cfg.peft)


@pytest.mark.slow
def test_lora_and_saved_modules_changed_frozen_weights_did_not(quickstart_run):
    cfg, result = quickstart_run
    before = dict(_untrained_copy(cfg).named_parameters())
    after = dict(result.model.named_parameters())
    assert before.keys() == after.keys()
    trainable = {n for n, p in after.items() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any("modules_to_save" in n for n in trainable)
    assert not any(".visual.blocks" in n for n in trainable), "the vision tower must stay frozen"
    for name, param in after.items():
        if name in trainable:
            assert not torch.equal(param, before[name]), f"{name} did not change"
        else:
            assert torch.equal(param, before[name]), f"frozen {name} changed"


def _logged_by_step(run_dir: Path, last_step: int, wait_s: float = 30.0) -> dict[int, dict]:
    """step → everything W&B recorded at that step. W&B's service may still be writing the run file
    for a moment after ``finish()`` returns, so poll (bounded) until the last step is there."""
    deadline = time.monotonic() + wait_s
    while True:
        (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
        logged: dict[int, dict] = {}
        for row in history(run_file):
            logged.setdefault(row["_step"], {}).update(row)
        if last_step in logged or time.monotonic() > deadline:
            return logged
        time.sleep(0.5)


@pytest.mark.slow
def test_metrics_and_deltas_reach_summary_report_and_wandb(quickstart_run):
    cfg, result = quickstart_run
    run_dir = Path(cfg.run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary == result.summary
    assert [c["name"] for c in summary["checkpoints"]] == ["checkpoint-3", "checkpoint-6"]
    for bench, metric in (("v2p", "accuracy"), ("ovi", "ca"), ("ovi", "ma")):
        entry = summary["benchmarks"][bench]["metrics"][metric]
        point = entry["checkpoints"]["checkpoint-6"]
        assert point["delta"] == pytest.approx(point["value"] - entry["baseline"])
        low, high = point["delta_ci95"]
        assert low <= point["delta"] <= high
    assert any(key.startswith("accuracy/dimension/") for key in summary["benchmarks"]["v2p"]["metrics"])
    assert summary["media_spec"]["fingerprint"] and summary["quarantine"]["train"] == {}
    report = (run_dir / "report.md").read_text()
    assert "checkpoint-6" in report and "V2P" in report and "OVI" in report
    per_sample = (run_dir / "eval" / "checkpoint-6" / "v2p.jsonl").read_text().splitlines()
    assert len(per_sample) == 6 and {"prediction", "meta", "setting"} <= json.loads(per_sample[0]).keys()

    logged = _logged_by_step(run_dir, last_step=6)
    assert "v2p/accuracy" in logged[0] and "ovi/ca" in logged[0]  # the baseline, before step 1
    for step in (3, 6):
        for bench, metric in (("v2p", "accuracy"), ("ovi", "ca")):
            point = summary["benchmarks"][bench]["metrics"][metric]["checkpoints"][f"checkpoint-{step}"]
            assert logged[step][f"{bench}/{metric}/delta"] == pytest.approx(point["delta"])
    assert any("train/loss" in values for values in logged.values())


@pytest.mark.slow
def test_python_m_eval_on_a_saved_checkpoint_reproduces_the_in_training_evaluation(
    quickstart_run, small_eval_config, tmp_path
):
    """Train/eval parity: the same adapter, prompts and media give the same greedy answers. The
    checkpoint is evaluated as its run did: base, media spec and benchmarks from its resolved config."""
    from eval.run import run as run_eval

    cfg, _ = quickstart_run
    checkpoint = Path(cfg.run_dir) / "checkpoints" / "checkpoint-6"
    eval_cfg = small_eval_config(
        tmp_path, f"checkpoint={checkpoint}", "eval.limit=6", "eval.results_cache=null", "media.num_frames=4"
    )
    with pytest.warns(UserWarning, match="with its training run's media spec"):
        run_eval(eval_cfg)
    for bench in ("v2p", "ovi"):
        during = (Path(cfg.run_dir) / "eval" / "checkpoint-6" / f"{bench}.jsonl").read_text().splitlines()
        after = (Path(eval_cfg.run_dir) / "eval" / "checkpoint-6" / f"{bench}.jsonl").read_text().splitlines()
        assert [json.loads(x)["prediction"] for x in during] == [json.loads(x)["prediction"] for x in after]
