"""Standalone evaluation of one model or training checkpoint (``python -m eval``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from omegaconf import OmegaConf

from data_builders.build import build_synthetic
from data_builders.media import FrameCache, MediaSpec
from eval.evaluator import Evaluator
from eval.metric_logging import make_logger
from train.adapter import make_adapter
from train.config import EvalRunConfig
from train.models import load_model


def run(cfg: EvalRunConfig) -> dict:
    """Evaluate ``cfg.model`` (plus ``cfg.adapter`` when given) and write summary.json and report.md.

    Open-ended OVIBench items are scored by ``cfg.judge`` when its backend is not ``none``.
    """
    if cfg.adapter:
        cfg.media = _training_media(Path(cfg.adapter), cfg.media)
    if cfg.data.build_synthetic:
        paths = build_synthetic(cfg.data.synthetic)
        cfg.eval.v2p_root = cfg.eval.v2p_root or str(paths.v2p_bench)
        cfg.eval.ovi_root = cfg.eval.ovi_root or str(paths.ovibench)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = FrameCache(cfg.data.frame_cache)
    logger = make_logger(
        cfg.logger.wandb,
        cfg.logger.mode,
        cfg.logger.project,
        cfg.logger.entity,
        run_dir,
        cfg.run_name,
        OmegaConf.to_container(OmegaConf.structured(cfg)),
    )
    try:
        # Before the model loads, so a bad benchmark or judge setting fails fast.
        evaluator = Evaluator(cfg.eval, cfg.media, cache, run_dir, logger, judge=cfg.judge)
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


def _training_media(checkpoint: Path, configured: MediaSpec) -> MediaSpec:
    """The media spec the checkpoint was trained with, when its run's resolved config is beside it.

    A model is scored on frames sampled the way it was trained on; a configured spec that differs is
    replaced, loudly, rather than drifting silently.
    """
    resolved = checkpoint.parent.parent / "resolved_config.yaml"
    if not resolved.exists():
        return configured
    trained = MediaSpec(**OmegaConf.to_container(OmegaConf.load(resolved).media))
    if trained.fingerprint != configured.fingerprint:
        warnings.warn(
            f"evaluating {checkpoint} with its training run's media spec ({resolved}, fingerprint "
            f"{trained.fingerprint}) instead of the configured one ({configured.fingerprint})",
            stacklevel=2,
        )
    return trained
