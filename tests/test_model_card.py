"""The model card saved with the tuned weights (train/model_card.py): ``final/README.md`` in the Hub's format,
read back with ``huggingface_hub.ModelCard``: base model, datasets, the last checkpoint's deltas with their
intervals as ``model-index`` results, and every figure's protocol."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from core.config import DataConfig, EvalConfig, ModelConfig, TrainConfig
from core.rundir import RunDir
from train.model_card import write_model_card

V2P_DELTA = "Δ +0.5000, 95% CI [+0.1667, +0.8333], 6 paired items"
V2P_PROTOCOL = "NOT the official input (64 frames of at most 336x336): 8 frames of at most 12544 px"


def _comparison(step: int, value: float, delta: float, interval: list[float]) -> dict:
    return {
        "step": step, "value": value, "n": 6, "n_paired": 6, "delta": delta, "delta_ci95": interval,
        "mcnemar_p": 0.25,
    }  # fmt: skip


def _summary() -> dict:
    """A summary.json as eval/summary.py writes it: the baseline and two checkpoints on V2P (with its
    protocol line) and OVI, a per-category key, and a judged metric no model has a value for."""
    v2p_metrics = {
        "accuracy": {
            "baseline": 0.25,
            "n": 6,
            "checkpoints": {
                "checkpoint-3": _comparison(3, 0.5, 0.25, [0.0, 0.5]),
                "checkpoint-6": _comparison(6, 0.75, 0.5, [0.1667, 0.8333]),
            },
        },
        "accuracy/dimension/OA": {
            "baseline": 0.0,
            "n": 2,
            "checkpoints": {"checkpoint-6": _comparison(6, 1.0, 1.0, [1.0, 1.0])},
        },
    }
    unjudged = {"step": 6, "value": None, "n": 0, "n_paired": 0, "delta": None, "delta_ci95": None}
    ovi_metrics = {
        "ma": {
            "baseline": 0.5,
            "n": 6,
            "checkpoints": {"checkpoint-6": _comparison(6, 0.5, 0.0, [-0.25, 0.25])},
        },
        "iac": {"baseline": None, "n": 0, "checkpoints": {"checkpoint-6": {**unjudged, "mcnemar_p": None}}},
    }
    counts = {"n_items": 6, "n_unjudged": 0, "n_unjudged_items": 0, "n_zero": 0}
    return {
        "baseline": {"name": "baseline", "step": 0},
        "checkpoints": [{"name": "checkpoint-3", "step": 3}, {"name": "checkpoint-6", "step": 6}],
        "benchmarks": {
            "v2p": {**counts, "metrics": v2p_metrics, "protocol": V2P_PROTOCOL},
            "ovi": {**counts, "metrics": ovi_metrics, "aggregation": "item-level means"},
        },
        "judge": "not configured: open-ended OVI items are generated and kept, but not scored",
    }


def _config(**model) -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(**{"name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct", **model}),
        data=DataConfig(train=["data/v2p_sft/hf", "data/ovi_train/hf"]),
        run_name="sft-run",
    )


def _metrics(card: ModelCard) -> dict[tuple[str, str], tuple[float, str]]:
    return {(r.dataset_type, r.metric_type): (r.metric_value, r.metric_name) for r in card.data.eval_results}


def test_the_card_loads_with_the_base_model_the_datasets_and_the_last_checkpoints_deltas(tmp_path):
    path = write_model_card(RunDir(tmp_path), _config(), _summary())

    assert path == RunDir(tmp_path).final_dir / "README.md"
    card = ModelCard.load(path)
    assert card.data.base_model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert card.data.datasets == ["v2p_sft", "ovi_train"]
    assert card.data.library_name == "peft" and card.data.pipeline_tag == "video-text-to-text"
    # One result per overall metric of the weights in final/ (the last checkpoint); categories and metrics
    # without a value stay in summary.json.
    assert _metrics(card) == {
        ("v2p", "accuracy"): (0.75, f"accuracy ({V2P_DELTA} vs baseline)"),
        ("ovi", "ma"): (0.5, "ma (Δ +0.0000, 95% CI [-0.2500, +0.2500], 6 paired items vs baseline)"),
    }  # fmt: skip
    v2p = next(r for r in card.data.eval_results if r.dataset_type == "v2p")
    assert v2p.dataset_name == f"V2P-Bench; protocol: {V2P_PROTOCOL}"  # no figure on the Hub without it


def test_the_cards_text_names_every_protocol_and_the_recipe(tmp_path):
    text = ModelCard.load(write_model_card(RunDir(tmp_path), _config(), _summary())).text

    for said in (
        f"protocol: {V2P_PROTOCOL}",
        "aggregation: item-level means",
        "judge: not configured",
        f"| accuracy | 0.2500 | 0.7500 | {V2P_DELTA} |",
        "weights of `checkpoint-6`",
        "- stage: sft",
        "lora (r 16, alpha 32",
    ):
        assert said in text, said


def test_a_local_base_is_named_in_the_text_not_as_the_hubs_base_model(tmp_path):
    """The Hub refuses a card whose ``base_model`` is no model id: a local checkpoint is named in the text."""
    base = tmp_path / "models" / "tiny"
    base.mkdir(parents=True)
    card = ModelCard.load(
        write_model_card(RunDir(tmp_path / "run"), _config(name_or_path=str(base)), _summary())
    )

    assert card.data.base_model is None
    assert f"base model: `{base}` (a local checkpoint" in card.text


def test_figures_on_the_synthetic_twin_are_marked_as_not_the_release(tmp_path):
    cfg = _config()
    twin = str(Path(cfg.data.synthetic.root) / "v2p_bench" / "v2p")
    cfg = replace(cfg, eval=EvalConfig(settings={"v2p": {"root": twin}}))
    card = ModelCard.load(write_model_card(RunDir(tmp_path), cfg, _summary()))

    names = {r.dataset_type: r.dataset_name for r in card.data.eval_results}
    assert names["v2p"].startswith("V2P-Bench, the synthetic build's twin (not the release); protocol:")
    assert names["ovi"] == "OVIBench"


def test_a_training_that_evaluated_nothing_still_gets_a_card(tmp_path):
    card = ModelCard.load(write_model_card(RunDir(tmp_path), _config(), {}))

    assert card.data.eval_results is None and card.data.base_model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert "evaluated nothing itself" in card.text


@pytest.mark.slow
def test_a_training_run_leaves_the_card_in_final(small_train_config, tmp_path):
    from train.recipe import train

    cfg = small_train_config(tmp_path, "eval.benchmarks=[v2p]")
    result = train(cfg)

    run_dir = RunDir(cfg.run_dir)
    card = ModelCard.load(run_dir.model_card_file)
    summary = json.loads(run_dir.summary_file.read_text())
    assert result.summary == summary
    accuracy = summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["checkpoints"]["checkpoint-6"]
    assert _metrics(card)[("v2p", "accuracy")][0] == accuracy["value"]
    assert summary["benchmarks"]["v2p"]["protocol"] in card.text
