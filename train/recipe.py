"""The training recipe: data → model + LoRA → the stage's trainer → evaluation after every checkpoint.

Read top to bottom: :func:`resolve` makes the run (its data, benchmark directories and, for a post-SFT
stage, its starting model); :func:`run` sets up each piece with a small function and hands them to the
stage's trainer. A stage (``stage.method``: SFT, DPO, KTO, GRPO) is a :class:`train.stages.Method` that
brings its rows, its trainer's arguments, its batches and its trainer; every stage runs through the same
steps here.
What the loop does beyond the stock trainers lives in ``train.trainer`` (optimizer groups per tower, the
multi-rank sample order, gradient clipping over the trainable parameters) and ``train.callbacks`` (loss
logging, and evaluation through ``eval.evaluation``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core import distributed
from core.config import EvalMode, PeftMethod, StageMethod, TrainConfig, TrainerConfig
from core.errors import ConfigError
from core.files import write_json_atomic
from core.media import FrameCache
from core.metric_logging import MetricLogger, NullLogger, logger_for_run
from core.run import Run
from core.rundir import RunDir
from data_builders.build import synthetic_datasets, with_synthetic_training_data
from eval.benchmarks import resolve_settings
from eval.evaluation import Evaluation
from eval.run_models import open_models
from models.centring import centring
from models.loading import build_if_tiny
from models.packing import check_packable
from models.qlora import check_qlora
from models.towers import family_of, is_partitioned, numel, parameters_by_tower
from train.callbacks import CheckpointEval, LogToMetricLogger
from train.data import PackingCollator
from train.deepspeed import deepspeed_config, write_deepspeed_config
from train.grpo import GRPO
from train.model_card import write_model_card
from train.modes import apply_peft
from train.optim import check_learning_rates, tower_learning_rates
from train.preference import DPO, KTO, reference_model, with_start_model
from train.stage_settings import resolve_stage
from train.stages import SFT, Method

METHODS: dict[StageMethod, Method] = {
    StageMethod.sft: SFT,
    StageMethod.dpo: DPO,
    StageMethod.kto: KTO,
    StageMethod.grpo: GRPO,
}


def training_arguments(
    cfg: TrainerConfig,
    checkpoints_dir: Path,
    deepspeed: dict | None = None,
    arguments_class: type | None = None,
    **stage_arguments,
):
    """The trainer's arguments, saving under ``checkpoints_dir`` (``RunDir.checkpoints_dir``);
    ``deepspeed``: the config from ``train.deepspeed.deepspeed_config``; ``arguments_class`` (a subclass
    of TrainingArguments such as TRL's DPOConfig) with its own ``stage_arguments``."""
    from transformers import TrainingArguments

    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return (arguments_class or TrainingArguments)(
        output_dir=str(checkpoints_dir),
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
        **stage_arguments,
    )


def resolve(cfg: TrainConfig) -> Run:
    """The training ``cfg`` asks for, resolved, on every rank alike: each stage's settings typed and
    GRPO's checked (``train.stage_settings``), before any data or model; the synthetic datasets built when
    ``data.build_synthetic`` asks (file-locked, one rank builds) and used where no data or benchmark
    directory is given; each benchmark's settings typed (the held-out pairs' implicit reward at the
    preference stage's beta, for DPO and KTO); the SFT checkpoint a post-SFT stage starts from as its base
    (merged once). ``cfg`` itself is left as it is."""
    run_dir = RunDir(cfg.run_dir)
    cfg = replace(cfg, stage=resolve_stage(cfg.stage))
    deepspeed_config(cfg.trainer)  # a bad ZeRO setting, or QLoRA without CUDA, fails before anything is built
    if cfg.peft.method is PeftMethod.qlora:
        check_qlora(cfg.trainer)
    check_packing(cfg)
    datasets = synthetic_datasets(cfg.data)
    evaluation = resolve_settings(cfg.eval, datasets)
    if METHODS[cfg.stage.method].implicit_reward and "ovi_pairs" in evaluation.settings:
        pairs = replace(evaluation.settings["ovi_pairs"], beta=cfg.stage.preference.beta)
        evaluation = replace(evaluation, settings={**evaluation.settings, "ovi_pairs": pairs})
    cfg = replace(cfg, data=with_synthetic_training_data(cfg.data, datasets), eval=evaluation)
    return Run(with_start_model(cfg, run_dir), run_dir, quantized=cfg.peft.method is PeftMethod.qlora)


def check_packing(cfg: TrainConfig) -> None:
    """With ``data.packing=true``: the stage, the family and the attention implementation must pack.

    Raises:
        ConfigError: naming the setting that cannot pack and why.
    """
    if not cfg.data.packing:
        return
    refusal = METHODS[cfg.stage.method].cannot_pack
    if refusal:
        raise ConfigError(f"data.packing=true: stage.method={cfg.stage.method} cannot pack: {refusal}")
    if cfg.data.pack_tokens is not None and cfg.data.pack_tokens < 1:
        raise ConfigError(f"data.pack_tokens={cfg.data.pack_tokens}: give a positive token budget, or null")
    check_packable(cfg.model.family, cfg.model.attn_implementation)


@dataclass
class RunResult:
    """What a run leaves in memory: the run as resolved, the summary (baseline vs every checkpoint) and the
    tuned model."""

    run: Run
    summary: dict
    model: torch.nn.Module


def train(cfg: TrainConfig) -> RunResult:
    """``python -m train``: resolve the run, then run it."""
    return run(resolve(cfg))


def run(run: Run) -> RunResult:
    """Train as ``run`` says, evaluating the baseline and every checkpoint along the way."""
    from transformers import set_seed

    cfg, run_dir = run.cfg, run.dir
    method = METHODS[cfg.stage.method]
    set_seed(cfg.trainer.seed)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    ds_config = deepspeed_config(cfg.trainer)
    main = distributed.is_main()  # from the launcher's RANK: the process group does not exist yet
    if main:
        run_dir.write_config(cfg)
        write_deepspeed_config(ds_config, run_dir.deepspeed_file)
    cache = FrameCache(cfg.data.frame_cache)
    logger = _logger(cfg) if main else NullLogger()
    try:
        rows = method.rows(run, cache)  # bad data or weights fail here, before any model is built
        run_dir.write_quarantine("train", rows.quarantined)
        if main:
            write_json_atomic(run_dir.data_mix_file, rows.mix, indent=2)
        # before the arguments: building them starts the process group
        build_if_tiny(cfg.model, centring(cfg, rows.rows, cache))
        # Before the model: under ZeRO-3 the arguments register the DeepSpeed config with transformers (a
        # weak reference, alive as long as `args` is), so from_pretrained loads each rank's partition only
        # (deepspeed.zero.Init) instead of the whole model on every rank first.
        arguments_class, stage_arguments = method.arguments(run, rows)
        args = training_arguments(
            cfg.trainer, run_dir.checkpoints_dir, ds_config, arguments_class, **stage_arguments
        )
        distributed.share_cpu_process_group(args)
        models = open_models(run, cache, serve=False)  # the training's own model, in process
        model = models.base
        partitioned_at_load = is_partitioned(model)
        train_dataset, collator = method.batches(rows, models.chat)
        if cfg.data.packing:  # the same batches, packed (check_packing: the stage takes them)
            collator = PackingCollator(collator, cfg.data.pack_tokens)
        # Seed again right before the LoRA init: what ran since the first seed may have drawn from the
        # global RNG (building the tiny checkpoint does, on a first run only), and the LoRA A matrices
        # must not depend on it, or a resumed run and its twin would train different adapters.
        set_seed(cfg.trainer.seed)
        base, model = model, apply_peft(model, cfg.peft)
        check_learning_rates(cfg.trainer, model)
        if main:
            _write_parameters(run_dir, model, cfg.trainer, partitioned_at_load)
        evaluation = _inline_evaluation(run, logger, cache)
        callbacks = [LogToMetricLogger(logger)]
        if evaluation:
            callbacks.append(CheckpointEval(evaluation, models, run_dir))
        reference = {"ref_model": reference_model(cfg, model is not base)} if method.reference else {}
        trainer = method.trainer(
            model=model,
            args=args,
            trainer_cfg=cfg.trainer,
            processing_class=models.processor,  # saved with every checkpoint: a fully tuned one loads alone
            train_dataset=train_dataset,
            data_collator=collator,
            callbacks=callbacks,
            **reference,
            **method.trainer_kwargs(run, models.chat),
        )
        last = run_dir.latest_checkpoint()
        if last and main:
            print(f"resuming from {last}", flush=True)
        trainer.train(resume_from_checkpoint=str(last) if last else None)
        trainer.save_model(str(run_dir.final_dir))
        summary = evaluation.write_summary() if evaluation and main else {}
        if main:  # after the summary: the card carries its deltas
            write_model_card(run_dir, cfg, summary)
        run_dir.mark_done()
        return RunResult(run, summary, trainer.model)
    finally:
        logger.finish()
        distributed.shutdown()


def _inline_evaluation(run: Run, logger: MetricLogger, cache: FrameCache) -> Evaluation | None:
    """The evaluation of the baseline and every checkpoint, when this training does it (``eval.mode``)."""
    cfg = run.cfg
    if not cfg.eval.benchmarks:
        return None
    if cfg.eval.mode is not EvalMode.inline:
        if distributed.is_main():
            print(
                f"eval.mode=async: this training evaluates nothing; `python -m eval.watch {cfg.run_dir}` "
                "evaluates the baseline and every checkpoint",
                flush=True,
            )
        return None
    if cfg.eval.server.enabled:
        raise ConfigError(
            "eval.server: a training evaluates its own checkpoints in process; to evaluate them through a "
            f"model server, train with eval.mode=async and run `python -m eval.watch {cfg.run_dir}`"
        )
    return Evaluation(run, logger, cache)


def _write_parameters(run_dir: RunDir, model: torch.nn.Module, cfg: TrainerConfig, partitioned: bool) -> None:
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
    write_json_atomic(run_dir.parameters_file, record, indent=2)


def _logger(cfg: TrainConfig) -> MetricLogger:
    """The run's W&B logger (rank 0 only: one W&B run per training run, however many processes); shared
    with the evaluation watcher in async mode."""
    return logger_for_run(cfg, shared=cfg.eval.mode is not EvalMode.inline)
