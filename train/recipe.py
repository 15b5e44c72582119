"""The training recipe: data → model + LoRA → HF Trainer → evaluation after every checkpoint.

Read top to bottom: ``run`` sets up each piece with a small function and hands them to the HF
Trainer. The only custom behaviour inside the loop lives in ``train.callbacks``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from data_builders.build import build_synthetic
from data_builders.media import FrameCache
from eval.evaluator import Evaluator
from eval.metric_logging import MetricLogger, NullLogger, make_logger
from train import distributed
from train.adapter import make_adapter
from train.callbacks import CheckpointEval, LogToMetricLogger
from train.config import PeftConfig, TrainConfig, TrainerConfig
from train.data import Collator, SampleDataset, check_media, load_samples, quarantine_counts, write_quarantine
from train.deepspeed import deepspeed_config, write_deepspeed_config
from train.errors import ConfigError
from train.models import load_model

# Module names of the vision towers of the supported families (Qwen-VL, LLaVA-OneVision, InternVL).
VISION_TOWERS = (".visual.", ".vision_tower.", ".vision_model.")


def apply_peft(model, cfg: PeftConfig):
    """Wrap the model for LoRA, or mark parameters trainable for full fine-tuning."""
    if cfg.method == "lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=cfg.r,
            lora_alpha=cfg.alpha,
            lora_dropout=cfg.dropout,
            target_modules=cfg.target_modules,
            modules_to_save=list(cfg.modules_to_save) or None,
        )
        return get_peft_model(model, lora)
    if cfg.method == "full":
        for name, param in model.named_parameters():
            param.requires_grad = cfg.train_vision or not any(v in f".{name}" for v in VISION_TOWERS)
        return model
    raise ConfigError(f"peft.method must be 'lora' or 'full', got {cfg.method!r}")


def training_arguments(cfg: TrainerConfig, run_dir: Path, deepspeed: dict | None = None):
    """The HF Trainer's arguments; ``deepspeed``: the config from ``train.deepspeed.deepspeed_config``."""
    from transformers import TrainingArguments

    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return TrainingArguments(
        output_dir=str(run_dir / "checkpoints"),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=int(cfg.warmup_ratio * cfg.max_steps),
        lr_scheduler_type=cfg.lr_scheduler,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        save_strategy="steps",
        dataloader_num_workers=cfg.num_workers,
        gradient_checkpointing=cfg.gradient_checkpointing,
        bf16=bf16,
        seed=cfg.seed,
        data_seed=cfg.seed,
        remove_unused_columns=False,  # our collator needs the rendered samples as they are
        report_to=[],  # metrics go through our own logger (one W&B run, training-step axis)
        disable_tqdm=False,
        deepspeed=deepspeed,
    )


def resolve_data(cfg: TrainConfig) -> None:
    """Build the synthetic datasets when asked; point training and evaluation at them if unset."""
    if not cfg.data.build_synthetic:
        return
    paths = build_synthetic(cfg.data.synthetic)
    if not cfg.data.train:
        cfg.data.train = [str(paths.v2p_sft), str(paths.ovi_train)]
    cfg.eval.v2p_root = cfg.eval.v2p_root or str(paths.v2p_bench)
    cfg.eval.ovi_root = cfg.eval.ovi_root or str(paths.ovibench)


@dataclass
class RunResult:
    """What a run leaves in memory: the summary (baseline vs every checkpoint) and the tuned model."""

    summary: dict
    model: torch.nn.Module


def run(cfg: TrainConfig) -> RunResult:
    """Train per ``cfg``, evaluating the baseline and every checkpoint along the way."""
    from transformers import Trainer, set_seed

    set_seed(cfg.trainer.seed)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ds_config = deepspeed_config(cfg.trainer)  # fails on a bad ZeRO setting before anything is built
    resolve_data(cfg)  # file-locked: every rank calls it, one builds
    main = distributed.is_main()  # from the launcher's RANK: the process group does not exist yet
    if main:
        (run_dir / "resolved_config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        write_deepspeed_config(ds_config, run_dir)
    cache = FrameCache(cfg.data.frame_cache)
    logger = _logger(cfg, run_dir) if main else NullLogger()
    try:
        model, processor = load_model(cfg.model)
        adapter = make_adapter(cfg.model.family, processor, cfg.media, cache)
        samples, bad = check_media(load_samples(cfg.data.train), cfg.media, cache, desc="train")
        if main:
            write_quarantine(run_dir, "train", bad)
        # Seed again right before the LoRA init: what ran since the first seed may have drawn from the
        # global RNG (building the tiny checkpoint does, on a first run only), and the LoRA A matrices
        # must not depend on it, or a resumed run and its twin would train different adapters.
        set_seed(cfg.trainer.seed)
        model = apply_peft(model, cfg.peft)
        evaluator = Evaluator(cfg.eval, cfg.media, cache, run_dir, logger) if cfg.eval.benchmarks else None
        if evaluator:
            evaluator.quarantine["train"] = quarantine_counts(bad)
        trainer = Trainer(
            model=model,
            args=training_arguments(cfg.trainer, run_dir, ds_config),
            train_dataset=SampleDataset(samples, adapter),
            data_collator=Collator(adapter),
            callbacks=[LogToMetricLogger(logger)]
            + ([CheckpointEval(evaluator, adapter)] if evaluator and cfg.eval.on_save else []),
        )
        last = _last_checkpoint(run_dir / "checkpoints")
        if last and main:
            print(f"resuming from {last}", flush=True)
        trainer.train(resume_from_checkpoint=last)
        trainer.save_model(str(run_dir / "final"))
        summary = evaluator.write_summary() if evaluator and evaluator.models and main else {}
        return RunResult(summary, trainer.model)
    finally:
        logger.finish()
        distributed.shutdown()


def _logger(cfg: TrainConfig, run_dir: Path) -> MetricLogger:
    """The run's W&B logger (rank 0 only: one W&B run per training run, however many processes)."""
    return make_logger(
        cfg.logger.wandb,
        cfg.logger.mode,
        cfg.logger.project,
        cfg.logger.entity,
        run_dir,
        cfg.run_name,
        OmegaConf.to_container(OmegaConf.structured(cfg)),
    )


def _last_checkpoint(directory: Path) -> str | None:
    """The newest complete checkpoint in ``directory``, to resume from (None for a fresh run)."""
    if not directory.exists():
        return None
    steps = [p for p in directory.glob("checkpoint-*") if _is_complete(p)]
    return str(max(steps, key=lambda p: int(p.name.split("-")[1]))) if steps else None


def _is_complete(checkpoint: Path) -> bool:
    """Whether a save finished: the Trainer writes ``trainer_state.json`` last, and not atomically, so a
    kill mid-write leaves one that does not parse."""
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True
