"""Standalone evaluation of one model, or of one checkpoint of a training run (``python -m eval``)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

from core.config import EvalRunConfig, PeftMethod
from core.errors import ConfigError
from core.media import FrameCache
from core.metric_logging import logger_for_run
from core.rundir import RunDir
from data_builders.build import with_synthetic_data
from eval.evaluation import Evaluation
from eval.preference import scores_pairs
from eval.served import served_weights, serving
from models.chat import make_adapter
from models.loading import CheckpointModels, default_device, is_adapter, load_base, load_processor


def run(cfg: EvalRunConfig) -> dict:
    """Evaluate ``cfg.model`` (or ``cfg.checkpoint`` on its run's base) and write summary.json and report.md.

    Open-ended OVIBench items are scored by ``cfg.judge`` when its backend is not ``none``. Results are
    shared through ``eval.results_cache``, keyed by the model's and the checkpoint's files, not their paths.
    """
    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else None
    quantized = checkpoint is not None and adopt_run_settings(cfg, checkpoint)
    cfg = with_synthetic_data(cfg)
    run_dir = RunDir(cfg.run_dir)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    cache = FrameCache(cfg.data.frame_cache)
    logger = logger_for_run(cfg)
    try:
        evaluation = Evaluation(cfg, run_dir, logger, cache)  # before the model: bad settings fail fast
        name = checkpoint.name if checkpoint is not None else "model"
        if cfg.eval.server.enabled:
            return _run_served(cfg, evaluation, run_dir, cache, checkpoint, name)
        device = default_device()
        if checkpoint is not None and not is_adapter(checkpoint):  # full fine-tuning: loads on its own
            full = replace(cfg.model, name_or_path=str(checkpoint), tiny=False)
            model, processor = load_base(full, device=device)
        else:
            model, processor = load_base(cfg.model, quantized=quantized, device=device)
            if checkpoint is not None:
                model = CheckpointModels(model, cfg.model, device).load(checkpoint)
        chat = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
        return evaluation.evaluate(model, chat, name, step=0, checkpoint=checkpoint)
    finally:
        logger.finish()


def _run_served(
    cfg: EvalRunConfig,
    evaluation: Evaluation,
    run_dir: RunDir,
    cache: FrameCache,
    checkpoint: Path | None,
    name: str,
) -> dict:
    """Evaluate through a model server (``eval.server``): no weights load here, unless a LoRA checkpoint
    must be merged for the server first."""
    if checkpoint is not None and not cfg.eval.server.command:
        raise ConfigError(
            "checkpoint= with eval.server.endpoint.base_url: a running server serves one fixed model; "
            "give eval.server.command so that the checkpoint is served for its evaluation"
        )
    processor = load_processor(cfg.model)
    chat = make_adapter(cfg.model.family, processor, cfg.media, cache, cfg.model.chat_format)
    weights = served_weights(cfg.model, checkpoint, processor, run_dir.path / "eval" / "served_weights")
    with serving(cfg, weights, chat, run_dir) as served:
        return evaluation.evaluate(served, chat, name, step=0, checkpoint=checkpoint)


def adopt_run_settings(cfg: EvalRunConfig, checkpoint: Path) -> bool:
    """Evaluate a training checkpoint on its run's base, media spec and benchmarks, when the run's resolved
    config is beside it; returns whether the base is loaded in 4 bits (a QLoRA run).

    A model is scored on frames sampled the way it was trained on: a configured media spec that differs is
    replaced, loudly, rather than drifting silently. Unless benchmark roots are given, the run's own
    benchmarks are used (no second synthetic build). A checkpoint of a run that scored held-out preference
    pairs (a DPO run) has them scored here too.
    """
    if not checkpoint.is_dir():
        raise ConfigError(f"checkpoint={checkpoint}: not a directory")
    run_dir = RunDir(checkpoint.parent.parent)
    if not run_dir.config_file.exists():
        return False
    trained = run_dir.read_config()
    if trained.media.fingerprint != cfg.media.fingerprint:
        warnings.warn(
            f"evaluating {checkpoint} with its training run's media spec ({run_dir.config_file}, fingerprint "
            f"{trained.media.fingerprint}) instead of the configured one ({cfg.media.fingerprint})",
            stacklevel=3,
        )
    cfg.model, cfg.media = trained.model, trained.media
    cfg.eval.preference_pairs = cfg.eval.preference_pairs or scores_pairs(trained)
    if not cfg.eval.v2p_root and not cfg.eval.ovi_root:
        cfg.eval.v2p_root, cfg.eval.ovi_root = trained.eval.v2p_root, trained.eval.ovi_root
        cfg.data.build_synthetic = False
    return trained.peft.method is PeftMethod.qlora
