"""Standalone evaluation of one model, or of one checkpoint of a training run (``python -m eval``)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

from core.config import EvalRunConfig, PeftMethod
from core.errors import ConfigError
from core.media import FrameCache
from core.metric_logging import logger_for_run
from core.run import Run
from core.rundir import RunDir
from data_builders.build import synthetic_datasets
from eval.benchmarks import resolve_settings
from eval.evaluation import Evaluation
from eval.run_models import open_models
from models.loading import default_device


def resolve(cfg: EvalRunConfig) -> Run:
    """The evaluation ``cfg`` asks for, resolved: a checkpoint is evaluated on its training run's base,
    media spec and benchmark directories (:func:`adopt_run_settings`); the synthetic datasets are built
    only when ``data.build_synthetic`` asks (``data=synthetic``); each benchmark's settings typed, unset
    roots pointing at the synthetic twins. ``cfg`` itself is left as it is."""
    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else None
    cfg = replace(cfg, eval=resolve_settings(cfg.eval))
    quantized = False
    if checkpoint is not None:
        cfg, quantized = adopt_run_settings(cfg, checkpoint)
    cfg = replace(cfg, eval=resolve_settings(cfg.eval, synthetic_datasets(cfg.data)))
    return Run(cfg, RunDir(cfg.run_dir), checkpoint, quantized)


def run(cfg: EvalRunConfig) -> dict:
    """Evaluate ``cfg.model`` (or ``cfg.checkpoint`` on its run's base) and write summary.json and report.md.

    Open-ended OVIBench items are scored by ``cfg.judge`` when its backend is not ``none``. Results are
    shared through ``eval.results_cache``, keyed by the model's and the checkpoint's files, not their paths.
    """
    resolved = resolve(cfg)
    resolved.dir.path.mkdir(parents=True, exist_ok=True)
    cache = FrameCache(resolved.cfg.data.frame_cache)
    logger = logger_for_run(resolved.cfg)
    try:
        evaluation = Evaluation(resolved, logger, cache)  # before the model: bad settings fail fast
        name = resolved.checkpoint.name if resolved.checkpoint is not None else "model"
        models = open_models(resolved, cache, device=default_device())
        with models.predictor(resolved.checkpoint) as predictor:
            return evaluation.evaluate(predictor, name, step=0, checkpoint=resolved.checkpoint)
    finally:
        logger.finish()


def adopt_run_settings(cfg: EvalRunConfig, checkpoint: Path) -> tuple[EvalRunConfig, bool]:
    """``cfg`` for a training checkpoint: its run's base and media spec; the run's benchmarks beside the
    configured ones, on the run's benchmark directories unless some are given here (then no synthetic build
    either). Returns the config and whether the base loads in 4 bits (a QLoRA run). A checkpoint outside a
    run directory is evaluated as configured.

    A model is scored on frames sampled the way it was trained on: a configured media spec that differs is
    replaced, loudly, rather than drifting silently.

    Raises:
        ConfigError: ``checkpoint`` is not a directory.
    """
    if not checkpoint.is_dir():
        raise ConfigError(f"checkpoint={checkpoint}: not a directory")
    run_dir = RunDir(checkpoint.parent.parent)
    if not run_dir.config_file.exists():
        return cfg, False
    trained = run_dir.read_config()
    if trained.media.fingerprint != cfg.media.fingerprint:
        warnings.warn(
            f"evaluating {checkpoint} with its training run's media spec ({run_dir.config_file}, fingerprint "
            f"{trained.media.fingerprint}) instead of the configured one ({cfg.media.fingerprint})",
            stacklevel=3,
        )
    # The configured benchmarks, and those the run evaluated its checkpoints on (its held-out pairs, say).
    benchmarks = list(dict.fromkeys([*cfg.eval.benchmarks, *trained.eval.benchmarks]))
    evaluation = resolve_settings(replace(cfg.eval, benchmarks=benchmarks))
    data = cfg.data
    if not any(getattr(s, "root", None) for s in evaluation.settings.values()):
        ran = resolve_settings(trained.eval).settings
        roots = {name: getattr(ran.get(name), "root", None) for name in evaluation.settings}
        evaluation = replace(evaluation, settings=_with_roots(evaluation.settings, roots))
        data = replace(data, build_synthetic=False)  # the run's own benchmarks: no second build
    adopted = replace(cfg, model=trained.model, media=trained.media, eval=evaluation, data=data)
    return adopted, trained.peft.method is PeftMethod.qlora


def _with_roots(settings: dict, roots: dict[str, str | None]) -> dict:
    return {name: replace(s, root=roots[name]) if hasattr(s, "root") else s for name, s in settings.items()}
