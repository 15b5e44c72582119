"""Standalone evaluation of one model or training checkpoint (``python -m eval``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from omegaconf import OmegaConf

from core.config import EvalRunConfig
from core.metric_logging import logger_for_run
from data_builders.build import build_synthetic
from data_builders.media import FrameCache, MediaSpec
from eval.evaluator import Evaluator
from eval.results_cache import Weights
from models.chat import make_adapter
from models.loading import load_model


def run(cfg: EvalRunConfig) -> dict:
    """Evaluate ``cfg.model`` (plus ``cfg.adapter`` when given) and write summary.json and report.md.

    Open-ended OVIBench items are scored by ``cfg.judge`` when its backend is not ``none``. Results are
    shared through ``eval.results_cache``, keyed by the model's and the adapter's files, not their paths.
    """
    if cfg.adapter:
        _use_training_run(cfg)
    if cfg.data.build_synthetic:
        paths = build_synthetic(cfg.data.synthetic)
        cfg.eval.v2p_root = cfg.eval.v2p_root or str(paths.v2p_bench)
        cfg.eval.ovi_root = cfg.eval.ovi_root or str(paths.ovibench)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = FrameCache(cfg.data.frame_cache)
    logger = logger_for_run(cfg)
    try:
        # Before the model loads, so a bad benchmark or judge setting fails fast.
        weights = Weights(cfg.model.name_or_path, Path(cfg.adapter) if cfg.adapter else None)
        evaluator = Evaluator(
            cfg.eval, cfg.media, cache, run_dir, logger, judge=cfg.judge, weights_of=lambda _name: weights
        )
        model, processor = load_model(cfg.model)
        name = "model"
        if cfg.adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, cfg.adapter)
            name = Path(cfg.adapter).name
        adapter = make_adapter(cfg.model.family, processor, cfg.media, cache)
        return evaluator.evaluate(model, adapter, name, step=0)
    finally:
        logger.finish()


def _use_training_run(cfg: EvalRunConfig) -> None:
    """Evaluate a training checkpoint the way its run did, when the run's resolved config is beside it.

    A model is scored on frames sampled the way it was trained on: a configured media spec that differs
    is replaced, loudly, rather than drifting silently. Unless benchmark roots are given, the run's own
    benchmarks are used (no second synthetic build).
    """
    resolved = Path(cfg.adapter).parent.parent / "resolved_config.yaml"
    if not resolved.exists():
        return
    run_cfg = OmegaConf.load(resolved)
    trained = MediaSpec(**OmegaConf.to_container(run_cfg.media))
    if trained.fingerprint != cfg.media.fingerprint:
        warnings.warn(
            f"evaluating {cfg.adapter} with its training run's media spec ({resolved}, fingerprint "
            f"{trained.fingerprint}) instead of the configured one ({cfg.media.fingerprint})",
            stacklevel=3,
        )
    cfg.media = trained
    if not cfg.eval.v2p_root and not cfg.eval.ovi_root:
        cfg.eval.v2p_root, cfg.eval.ovi_root = run_cfg.eval.v2p_root, run_cfg.eval.ovi_root
        cfg.data.build_synthetic = False
