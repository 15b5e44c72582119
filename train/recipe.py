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

from core import distributed
from core.config import EvalMode, PeftMethod, TrainConfig, TrainerConfig
from core.metric_logging import MetricLogger, NullLogger, logger_for_run
from data_builders.build import build_synthetic
from data_builders.files import write_json_atomic, write_text_atomic
from data_builders.media import FrameCache
from eval.evaluator import Evaluator
from models.chat import make_adapter
from models.loading import build_if_tiny, load_model
from models.qlora import check_qlora, quantization_config
from models.towers import family_of, is_partitioned, numel, parameters_by_tower
from train.callbacks import mark_training_done, training_callbacks
from train.data import Collator, SampleDataset, check_media, load_samples, quarantine_counts, write_quarantine
from train.deepspeed import deepspeed_config, write_deepspeed_config
from train.modes import apply_peft
from train.optim import check_learning_rates, tower_learning_rates
from train.trainer import RecipeTrainer


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
        # Workers live for the whole run: restarting them every epoch costs a stall per epoch.
        dataloader_persistent_workers=cfg.num_workers > 0,
        activation_checkpointing=cfg.gradient_checkpointing,  # use_reentrant=False, inputs require grad
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
    from transformers import set_seed

    set_seed(cfg.trainer.seed)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ds_config = deepspeed_config(cfg.trainer)  # fails on a bad ZeRO setting before anything is built
    if cfg.peft.method is PeftMethod.qlora:
        check_qlora(cfg.trainer)
    resolve_data(cfg)  # file-locked: every rank calls it, one builds
    main = distributed.is_main()  # from the launcher's RANK: the process group does not exist yet
    if main:
        # Atomic: the evaluation watcher may read it the moment it appears.
        write_text_atomic(run_dir / "resolved_config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        write_deepspeed_config(ds_config, run_dir)
    cache = FrameCache(cfg.data.frame_cache)
    logger = _logger(cfg) if main else NullLogger()
    try:
        build_if_tiny(cfg.model)  # before the arguments: building them starts the process group
        # Before the model: under ZeRO-3 the arguments register the DeepSpeed config with transformers (a
        # weak reference, alive as long as `args` is), so from_pretrained loads each rank's partition only
        # (deepspeed.zero.Init) instead of the whole model on every rank first.
        args = training_arguments(cfg.trainer, run_dir, ds_config)
        distributed.share_cpu_process_group(args)
        model, processor = _load_model(cfg)
        partitioned_at_load = is_partitioned(model)
        adapter = make_adapter(cfg.model.family, processor, cfg.media, cache)
        samples, bad = check_media(load_samples(cfg.data.train), cfg.media, cache, desc="train")
        if main:
            write_quarantine(run_dir, "train", bad)
        # Seed again right before the LoRA init: what ran since the first seed may have drawn from the
        # global RNG (building the tiny checkpoint does, on a first run only), and the LoRA A matrices
        # must not depend on it, or a resumed run and its twin would train different adapters.
        set_seed(cfg.trainer.seed)
        model = apply_peft(model, cfg.peft)
        check_learning_rates(cfg.trainer, model)
        if main:
            _write_parameters(run_dir, model, cfg.trainer, partitioned_at_load)
        inline = cfg.eval.benchmarks and cfg.eval.mode is EvalMode.inline  # async: python -m eval.watch
        evaluator = Evaluator(cfg.eval, cfg.media, cache, run_dir, logger) if inline else None
        if evaluator:
            evaluator.quarantine["train"] = quarantine_counts(bad)
        trainer = RecipeTrainer(
            model=model,
            args=args,
            trainer_cfg=cfg.trainer,
            processing_class=processor,  # saved with every checkpoint: a fully tuned one loads on its own
            train_dataset=SampleDataset(samples, adapter),
            data_collator=Collator(adapter),
            callbacks=training_callbacks(cfg, logger, evaluator, adapter),
        )
        last = _last_checkpoint(run_dir / "checkpoints")
        if last and main:
            print(f"resuming from {last}", flush=True)
        trainer.train(resume_from_checkpoint=last)
        trainer.save_model(str(run_dir / "final"))
        summary = evaluator.write_summary() if evaluator and evaluator.models and main else {}
        mark_training_done(run_dir)
        return RunResult(summary, trainer.model)
    finally:
        logger.finish()
        distributed.shutdown()


def _load_model(cfg: TrainConfig):
    """``(model, processor)``; QLoRA loads the base in 4 bits."""
    quantization = quantization_config(cfg.model.family) if cfg.peft.method is PeftMethod.qlora else None
    return load_model(cfg.model, quantization)


def _write_parameters(run_dir: Path, model: torch.nn.Module, cfg: TrainerConfig, partitioned: bool) -> None:
    """``parameters.json``: per tower, its parameter count, how many of them train and at which learning
    rate; and whether ZeRO-3 partitioned the model as it loaded (deepspeed.zero.Init)."""
    learning_rates = tower_learning_rates(cfg)
    towers = {}
    for tower, named in parameters_by_tower(model.named_parameters(), family_of(model)).items():
        trainable = sum(numel(p) for _, p in named if p.requires_grad)
        towers[tower.value] = {
            "parameters": sum(numel(p) for _, p in named),
            "trainable": trainable,
            "lr": learning_rates[tower] if trainable else None,
        }
    record = {"partitioned_at_load": partitioned, "towers": towers}
    write_json_atomic(run_dir / "parameters.json", record, indent=2)


def _logger(cfg: TrainConfig) -> MetricLogger:
    """The run's W&B logger (rank 0 only: one W&B run per training run, however many processes); shared
    with the evaluation watcher in async mode."""
    return logger_for_run(cfg, shared=cfg.eval.mode is not EvalMode.inline)


def _last_checkpoint(directory: Path) -> str | None:
    """The newest complete checkpoint in ``directory``, to resume from (None for a fresh run)."""
    if not directory.exists():
        return None
    steps = [p for p in directory.glob("checkpoint-*") if _is_complete(p)]
    return str(max(steps, key=lambda p: int(p.name.split("-")[1]))) if steps else None


def _is_complete(checkpoint: Path) -> bool:
    """Whether a save finished, so that a resumed run can read every file in it.

    Rank 0 writes ``trainer_state.json`` last, and not atomically: a kill mid-write leaves one that does
    not parse. Other ranks may still be writing after it: each its ``rng_state_<rank>.pth``.
    ``torch.save`` writes a zip whose directory comes last, so a file cut short does not open as one.
    Every rank decides alike: the files are the same for all.
    """
    import zipfile

    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
        for torch_file in [*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]:
            zipfile.ZipFile(torch_file).close()
    except (OSError, ValueError, zipfile.BadZipFile):
        return False
    per_rank_rng = list(checkpoint.glob("rng_state_*.pth"))
    if not per_rank_rng:
        return True
    # One optimizer shard per data-parallel rank under ZeRO, all written before a barrier that precedes
    # the RNG files; without ZeRO, the ranks are those of the run that asks.
    zero_shards = list(checkpoint.glob("global_step*/*zero_pp_rank_*_optim_states.pt"))
    return len(per_rank_rng) >= (len(zero_shards) or distributed.world_size())
