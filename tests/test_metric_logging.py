"""Metric logging: W&B failing at any point never stops a run, and every scalar is kept locally."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from core.metric_logging import STEP_KEY, WandbLogger, make_logger
from core.rundir import RunDir


class FakeRun:
    """A W&B run that records calls and raises from the ones named in ``failing``."""

    def __init__(self, failing: tuple[str, ...] = ()):
        self.failing, self.calls = failing, []

    def _call(self, name: str, *args, **kwargs):
        self.calls.append((name, args, kwargs))
        if name in self.failing:
            raise ConnectionError(f"{name} rejected")

    def define_metric(self, *args, **kwargs):
        self._call("define_metric", *args, **kwargs)

    def log(self, *args, **kwargs):
        self._call("log", *args, **kwargs)

    def finish(self):
        self._call("finish")


def _logger(tmp_path, monkeypatch, run=None, init_error: Exception | None = None):
    """``make_logger`` as the training calls it, with ``wandb.init`` answering ``run`` or raising."""
    import wandb

    def init(**kwargs):
        if init_error:
            raise init_error
        return run

    monkeypatch.setattr(wandb, "init", init)
    return make_logger(True, "offline", "p", None, tmp_path, "run", {})


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in RunDir(run_dir).metrics_file.read_text().splitlines()]


def test_a_rejected_log_warns_once_stops_calling_wandb_and_keeps_the_values(tmp_path, monkeypatch):
    from train.callbacks import LogToMetricLogger

    run = FakeRun(failing=("log",))
    logger = _logger(tmp_path, monkeypatch, run)
    callback = LogToMetricLogger(logger)
    state = type("State", (), {"global_step": 1})()
    with pytest.warns(UserWarning, match="W&B log failed.*ConnectionError.*metrics.jsonl") as caught:
        callback.on_log(None, state, None, logs={"loss": 2.5})  # the training step goes on
    state.global_step = 2
    callback.on_log(None, state, None, logs={"loss": 2.0})
    logger.log({"v2p/accuracy": 0.5}, step=2)
    logger.finish()
    assert len([w for w in caught if "W&B" in str(w.message)]) == 1
    assert [name for name, _, _ in run.calls] == ["define_metric", "define_metric", "log"]
    assert _metrics(tmp_path) == [
        {STEP_KEY: 1, "train/loss": 2.5},
        {STEP_KEY: 2, "train/loss": 2.0},
        {STEP_KEY: 2, "v2p/accuracy": 0.5},
    ]


@pytest.mark.parametrize("failing", ["define_metric", "finish"])
def test_a_failing_setup_or_finish_call_warns_and_the_run_goes_on(tmp_path, monkeypatch, failing):
    run = FakeRun(failing=(failing,))
    with pytest.warns(UserWarning, match=f"W&B {failing} failed"):
        logger = _logger(tmp_path, monkeypatch, run)
        logger.log({"train/loss": 1.0}, step=3)
        logger.finish()
    assert _metrics(tmp_path) == [{STEP_KEY: 3, "train/loss": 1.0}]


def test_wandb_that_cannot_start_leaves_the_local_metrics(tmp_path, monkeypatch):
    with pytest.warns(UserWarning, match="W&B could not start.*metrics.jsonl"):
        logger = _logger(tmp_path, monkeypatch, init_error=RuntimeError("no network"))
    logger.log({"train/loss": 1.5}, step=1)
    logger.log_table("v2p/samples_baseline", [{"id": "a", "prediction": "B"}], step=1)
    logger.finish()
    assert _metrics(tmp_path) == [{STEP_KEY: 1, "train/loss": 1.5}]


def test_rows_carry_the_training_step_and_only_the_owner_sets_wandbs_step():
    owner, watcher = FakeRun(), FakeRun()
    WandbLogger(owner).log({"train/loss": 1.0}, step=4)
    WandbLogger(watcher, owns_step=False).log({"v2p/accuracy": 0.5}, step=4)
    assert owner.calls[-1] == ("log", ({"train/loss": 1.0, STEP_KEY: 4},), {"step": 4})
    assert watcher.calls[-1] == ("log", ({"v2p/accuracy": 0.5, STEP_KEY: 4},), {})
    # Every metric is charted against the training step, whoever logged it.
    assert ("define_metric", ("*",), {"step_metric": STEP_KEY}) in watcher.calls


def test_disabled_wandb_still_keeps_the_local_metrics(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        logger = make_logger(True, "disabled", "p", None, tmp_path, "run", {})
        logger.log({"train/loss": 0.5}, step=7)
        logger.finish()
    assert _metrics(tmp_path) == [{STEP_KEY: 7, "train/loss": 0.5}]


@pytest.mark.slow
def test_evaluation_goes_on_when_wandb_rejects_its_logs(
    synthetic_build, tiny_checkpoint, tmp_path, monkeypatch
):
    from core.config import EvalConfig, EvalRunConfig, ModelConfig
    from core.decoding import MediaSpec
    from core.media import FrameCache
    from core.run import Run
    from core.rundir import RunDir
    from eval.benchmarks import resolve_settings
    from eval.benchmarks.v2p import V2PSettings
    from eval.evaluation import Evaluation
    from eval.predictor import InProcess
    from models.chat import make_adapter
    from models.loading import load_model

    model, processor = load_model(ModelConfig(name_or_path=str(tiny_checkpoint)))
    v2p = V2PSettings(root=str(synthetic_build.v2p_bench), max_new_tokens=2)
    cfg = EvalConfig(benchmarks=["v2p"], settings={"v2p": v2p}, limit=2, bootstrap_resamples=20)
    run = FakeRun(failing=("log",))
    logger = _logger(tmp_path, monkeypatch, run)
    run_cfg = EvalRunConfig(model=ModelConfig(name_or_path=str(tiny_checkpoint)), eval=resolve_settings(cfg))
    evaluation = Evaluation(Run(run_cfg, RunDir(tmp_path)), logger, FrameCache(None))
    predictor = InProcess(model, make_adapter("qwen2_5_vl", processor, MediaSpec(), FrameCache(None)))
    with pytest.warns(UserWarning, match="W&B log failed"):
        evaluation.evaluate(predictor, "baseline", step=0)
    summary = evaluation.evaluate(predictor, "checkpoint-2", step=2)  # the next model too

    point = summary["benchmarks"]["v2p"]["metrics"]["accuracy"]["checkpoints"]["checkpoint-2"]
    kept = {row[STEP_KEY]: row for row in _metrics(tmp_path)}
    assert kept[2]["v2p/accuracy"] == point["value"] and kept[2]["v2p/accuracy/delta"] == point["delta"]
    assert "v2p/accuracy" in kept[0]
    assert [name for name, _, _ in run.calls].count("log") == 1
