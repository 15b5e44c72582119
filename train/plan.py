"""``python -m train ... plan=true``: the run as composed, planned at its released size before any GPU.

The config is checked as training checks it; the architecture is built on the meta device (from the
checkpoint's ``config.json``, or the released shape kept in ``models.released``), LoRA and freezing attached
as the run attaches them; the tokens of every sample of the training and evaluation sets on disk are
counted from the media files' headers (train/plan_inputs.py); the activations of one micro-batch are
measured on the meta device at the p95 and the worst sample (``models.meta_memory``); the model states come
from the ZeRO formula (train/model_states.py). The per-GPU total gets a verdict against the GPU's memory, and
the largest terms are named with what would shrink them. No weights are read; nothing needs a GPU.

Written to ``plan.json`` and ``plan.md`` in the run directory (``core.rundir``); ``python -m launch`` plans
every launch first and refuses a plan whose verdict is ``oom`` unless told to go anyway.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from core.config import PeftMethod, StageMethod, TrainConfig
from core.errors import ConfigError, DataError
from core.files import write_json_atomic, write_text_atomic
from core.rundir import RunDir
from train.model_states import ModelStates, ParameterCounts, model_states
from train.plan_inputs import SampleTokens, TokenCounter, TokenCounts, percentiles

GIB = 1024**3
CONTEXT_BYTES = int(1.5 * GIB)  # the CUDA context, cuBLAS / NCCL workspaces: not the allocator's to see
FITS_SHARE = 0.9  # a total within 90% of the GPU fits; the last 10% are the allocator's fragmentation
VERDICTS = ("fits", "tight", "oom")


@dataclass
class Activations:
    """One micro-batch's activation memory (forward and backward), measured on the meta device."""

    sample: str  # which sample it was measured at: "p95" or "worst"
    tokens: int  # the longest sequence of the micro-batch (the collator pads every row to it)
    sequences: int  # sequences through the model per micro-batch (DPO: chosen and rejected; GRPO: G each)
    gradient_checkpointing: bool
    peak_bytes: int
    saved_bytes: int
    parts: dict[str, int] = field(default_factory=dict)  # peak or saved bytes by model part
    approximations: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """Everything ``plan.json`` holds."""

    run_dir: str
    model: dict
    stage: str
    world_size: int
    gpu_gib: float
    parameters: dict
    tokens: dict
    activations: list[Activations]
    model_states: dict
    total_bytes: int
    verdict: str
    terms: list[dict]  # the per-GPU total's terms, largest first, each with what would shrink it
    notes: list[str]
    seconds: float


def plan_run(cfg: TrainConfig) -> Plan:
    """Plan ``cfg`` (nothing is trained), write ``plan.json`` and ``plan.md``, and return the plan.

    Raises:
        ConfigError: a setting training would refuse; a model path with neither a ``config.json`` nor a
            released shape.
    """
    from models.released import architecture_config, checkpoint_processor, meta_model
    from train.modes import apply_peft

    start = time.perf_counter()
    ds_config = _checked(cfg)
    config, source = architecture_config(cfg.model)
    model = meta_model(config, dtype=torch.bfloat16)
    base_parameters = sum(p.numel() for p in model.parameters())
    model = apply_peft(model, cfg.peft)
    # peft makes LoRA adapters fp32. DeepSpeed's bf16 engine casts them; without it the Trainer's bf16
    # autocast runs their matmuls in bf16, saving the same bf16 inputs (only a transient fp32 copy of each
    # adapter's input differs). Autocast does not run on the meta device, so the adapters are cast instead;
    # their fp32 weights and optimizer state are counted in the model states.
    model.to(torch.bfloat16)
    notes = [f"architecture: {source}"]
    if ds_config is None and cfg.peft.method is not PeftMethod.full:
        notes.append("LoRA measured in bf16, as autocast runs it; its fp32 weights are in the model states")
    params = _parameters(model)
    processor, _ = checkpoint_processor(cfg.model)
    counter, text_note = _token_counter(cfg, processor)
    notes.append(text_note)
    counts = _counts(cfg, counter, notes)
    world = _world_size(cfg)
    train_counts = counts.get("train") or next(iter(counts.values()), TokenCounts())
    measured = _measured(cfg, model, config, processor, counter.samples_to_measure(train_counts))
    zero = (ds_config or {}).get("zero_optimization")
    states = model_states(params, cfg.trainer, cfg.peft.method, world, zero)
    run_as = [a for a in measured if a.gradient_checkpointing == cfg.trainer.gradient_checkpointing]
    worst = max(run_as, key=lambda a: a.peak_bytes)
    total = states.total + worst.peak_bytes + CONTEXT_BYTES
    plan = Plan(
        run_dir=cfg.run_dir,
        model={"name_or_path": cfg.model.name_or_path, "family": str(cfg.model.family), "source": source},
        stage=str(cfg.stage.method),
        world_size=world,
        gpu_gib=cfg.plan_gpu_gib,
        parameters={"base": base_parameters, **_parameter_record(model, params)},
        tokens={name: _token_record(c) for name, c in counts.items()}
        | {"worst_case": asdict(counter.worst_case(train_counts))},
        activations=measured,
        model_states={**asdict(states), "total": states.total},
        total_bytes=total,
        verdict=verdict(total, cfg.plan_gpu_gib),
        terms=_terms(cfg, states, worst),
        notes=notes,
        seconds=round(time.perf_counter() - start, 1),
    )
    write_plan(plan, RunDir(cfg.run_dir))
    return plan


def _measured(cfg: TrainConfig, model, config, processor, samples) -> list[Activations]:
    """One micro-batch's activations at each of ``samples`` (name, tokens), checkpointing off and on."""
    from models.meta_memory import measure_step

    sequences = _sequences_per_micro_batch(cfg)
    measured = []
    for name, sample in samples:
        shape = sample_shape(str(cfg.model.family), config, processor, sample)
        head_and_loss = labelled_head_and_loss(_scored_positions(cfg, sample))
        for checkpointing in (False, True):
            step = measure_step(model, shape, sequences, checkpointing, head_and_loss=head_and_loss)
            measured.append(_activations(name, sample, sequences, checkpointing, step))
    return measured


def labelled_head_and_loss(labelled: int):
    """The head and loss as training computes them (``train.trainer.labelled_positions_only``): the head at
    the positions whose next token is labelled only, the model's own loss on their next tokens. On the meta
    device a mask cannot select, so the positions are the last ``labelled`` of each row (where an assistant
    answer sits; ``models.meta_memory`` labels those), taken as a slice: the same tensors, the same sizes."""

    def head_and_loss(model, hidden_states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        from models.meta_memory import unwrapped

        base = unwrapped(model)
        _, tokens, width = hidden_states.shape
        kept = hidden_states[:, tokens - labelled - 1 : tokens - 1].reshape(-1, width)
        logits = base.lm_head(kept)
        targets = labels[:, tokens - labelled :].reshape(-1)
        vocab = base.config.get_text_config().vocab_size
        return base.loss_function(logits=logits, labels=None, shift_labels=targets, vocab_size=vocab)

    return head_and_loss


def verdict(total_bytes: int, gpu_gib: float) -> str:
    """``fits`` within ``FITS_SHARE`` of the GPU, ``tight`` up to all of it, else ``oom``."""
    if total_bytes <= FITS_SHARE * gpu_gib * GIB:
        return "fits"
    return "tight" if total_bytes <= gpu_gib * GIB else "oom"


def _checked(cfg: TrainConfig) -> dict | None:
    """The checks training makes of its settings before it builds anything; the DeepSpeed config."""
    from models.qlora import check_qlora
    from train.deepspeed import deepspeed_config
    from train.recipe import check_packing

    ds_config = deepspeed_config(cfg.trainer)
    if cfg.peft.method is PeftMethod.qlora:
        check_qlora(cfg.trainer)
    check_packing(cfg)
    return ds_config


def _world_size(cfg: TrainConfig) -> int:
    return cfg.plan_gpus or int(os.environ.get("WORLD_SIZE", "1"))


def _sequences_per_micro_batch(cfg: TrainConfig) -> int:
    """How many sequences one forward sends through the model with gradients: DPO both answers of each pair
    (TRL concatenates them); GRPO every completion of the micro-batch's prompts, or one under gradient
    checkpointing (train/rollouts.py then scores them one at a time, each recomputed in the backward)."""
    batch = cfg.trainer.batch_size
    if cfg.stage.method is StageMethod.dpo:
        return 2 * batch
    if cfg.stage.method is StageMethod.grpo:
        return 1 if cfg.trainer.gradient_checkpointing else cfg.stage.grpo.num_generations * batch
    return batch


def _scored_positions(cfg: TrainConfig, sample: SampleTokens) -> int:
    """Positions per sequence the loss reads the head at: the labelled answer (SFT; DPO's and KTO's
    completions, which TRL's fused head scores in tiles, keeping less), or GRPO's completion length."""
    if cfg.stage.method is StageMethod.grpo:
        return cfg.stage.grpo.max_completion_length + 1
    return sample.labelled


def _parameters(model: torch.nn.Module) -> ParameterCounts:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return ParameterCounts(total, trainable, largest)


def _parameter_record(model: torch.nn.Module, params: ParameterCounts) -> dict:
    from models.towers import family_of, parameters_by_tower

    towers = {
        tower.value: {
            "parameters": sum(p.numel() for _, p in named),
            "trainable": sum(p.numel() for _, p in named if p.requires_grad),
        }
        for tower, named in parameters_by_tower(model.named_parameters(), family_of(model)).items()
    }
    return {"total": params.total, "trainable": params.trainable, "towers": towers}


def _token_counter(cfg: TrainConfig, processor) -> tuple[TokenCounter, str]:
    """The family's token counter, with the checkpoint's tokenizer where its directory holds one."""
    from functools import partial

    from models.chat import chat_format_for, follows_on
    from models.visual_tokens import image_tokens, video_tokens

    family = str(cfg.model.family)
    tokenizer = _local_tokenizer(cfg.model.name_or_path)
    note = (
        f"text tokens: the tokenizer at {cfg.model.name_or_path}"
        if tokenizer is not None
        else f"text tokens estimated at 4 characters a token (no tokenizer at {cfg.model.name_or_path})"
    )
    counter = TokenCounter(
        cfg.media,
        partial(video_tokens, family, processor),
        partial(image_tokens, family, processor),
        chat_format_for(family, cfg.model.chat_format),
        tokenizer,
        follow_on=follows_on(family),
    )
    return counter, note


def _local_tokenizer(path: str):
    if not Path(path, "tokenizer_config.json").exists():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _counts(cfg: TrainConfig, counter: TokenCounter, notes: list[str]) -> dict[str, TokenCounts]:
    """Token counts of the training set and of each benchmark whose release is on disk (else noted)."""
    from data_builders.build import built_synthetic_datasets, with_synthetic_training_data
    from eval.benchmarks import BENCHMARKS, resolve_settings
    from train.data import load_dataset_samples

    synthetic = built_synthetic_datasets(cfg.data)
    if cfg.data.build_synthetic and not synthetic:
        notes.append("the synthetic build is not on disk yet (training builds it first): not counted")
    counts: dict[str, TokenCounts] = {}
    train = []
    for directory in with_synthetic_training_data(cfg.data, synthetic).train:
        try:
            train += load_dataset_samples(directory)
        except DataError as exc:
            notes.append(f"training set not counted: {exc}")
    if train:
        counts["train"] = counter.count(train)
    elif not cfg.data.train and not synthetic:
        notes.append("no training set given (data.train): tokens by the media limits only")
    evaluation = resolve_settings(cfg.eval, synthetic)
    for name, settings in evaluation.settings.items():
        root = getattr(settings, "root", None)
        if not root or not Path(root).exists():
            notes.append(f"{name}: no release at {root!r}, not counted")
            continue
        try:
            counts[name] = counter.count(BENCHMARKS[name].load(settings))
        except (ConfigError, DataError) as exc:
            notes.append(f"{name}: not counted ({str(exc).splitlines()[0]})")
    return counts


def _token_record(counts: TokenCounts) -> dict:
    return {
        "samples": len(counts.samples),
        "total": percentiles([s.total for s in counts.samples]),
        "visual": percentiles([s.visual for s in counts.samples]),
        "text": percentiles([s.text for s in counts.samples]),
        "labelled": percentiles([s.labelled for s in counts.samples]),
        "unreadable": counts.unreadable,
        "samples_left_out": counts.skipped_samples,
    }


def sample_shape(family: str, config, processor, sample: SampleTokens):
    """What ``sample`` feeds the model, as ``models.meta_memory`` takes it: the Qwen-VL families' patch grids
    (temporal patches of 2 frames), LLaVA-OneVision's frames and image sizes, InternVL's frames and tiles."""
    from models.meta_memory import SampleShape

    common = {"tokens": sample.total, "labelled_tokens": sample.labelled}
    frames = sum(t for t, _, _ in sample.video_frames)
    if family == "llava_onevision":
        return SampleShape(**common, video_frames=frames, image_sizes=tuple(sample.image_sizes))
    if family == "internvl":
        count = processor.image_processor.get_number_of_image_patches
        tiles = sum(count(h, w, {}) for h, w in sample.image_sizes)
        return SampleShape(**common, video_frames=frames, image_tiles=tiles)
    vision = config.vision_config
    patch, temporal = vision.patch_size, vision.temporal_patch_size
    videos = tuple((math.ceil(t / temporal), h // patch, w // patch) for t, h, w in sample.video_frames)
    images = tuple((1, h // patch, w // patch) for h, w in sample.image_sizes)
    return SampleShape(**common, video_grid_thw=videos, image_grid_thw=images)


def _activations(name: str, sample: SampleTokens, sequences: int, checkpointing: bool, step) -> Activations:
    return Activations(
        sample=name,
        tokens=sample.total,
        sequences=sequences,
        gradient_checkpointing=checkpointing,
        peak_bytes=step.peak_bytes,
        saved_bytes=step.saved_bytes,
        parts=dict(step.saved_by_part),
        approximations=list(step.approximations),
    )


def _terms(cfg: TrainConfig, states: ModelStates, worst: Activations) -> list[dict]:
    """The per-GPU total's terms, largest first, each with what would shrink it."""
    frames = cfg.media.num_frames or cfg.media.max_frames
    shrink = []
    if not cfg.trainer.gradient_checkpointing:
        shrink.append("trainer.gradient_checkpointing=true")
        if cfg.peft.method is not PeftMethod.full and cfg.peft.dropout > 0:
            shrink.append("peft.dropout=0 (each LoRA target keeps a mask and a dropped copy of its input)")
    if worst.sequences > 1:
        shrink.append(
            f"fewer sequences per micro-batch ({worst.sequences} now: trainer.batch_size="
            f"{cfg.trainer.batch_size}; raise trainer.grad_accum to keep the batch)"
        )
    shrink.append(f"fewer frames (media.num_frames={frames}) or pixels (media.max_pixels)")
    optimizer = [
        "more GPUs under ZeRO (the state is partitioned)",
        "trainer=zero3_offload (state on the CPU)",
    ]
    terms = [
        (f"activations ({worst.sample} sample)", worst.peak_bytes, shrink),
        ("weights", states.weights, _shrink_weights(cfg)),
        ("gradients and optimizer state", states.gradients_and_optimizer, optimizer),
        ("buffers (buckets, gathered weights)", states.buffers, []),
        ("CUDA context and workspaces", CONTEXT_BYTES, []),
    ]
    rows = [{"term": term, "bytes": size, "shrink": how} for term, size, how in terms]
    return sorted(rows, key=lambda row: row["bytes"], reverse=True)


def _shrink_weights(cfg: TrainConfig) -> list[str]:
    if cfg.trainer.zero == 3:
        return ["more GPUs (ZeRO-3 partitions the weights)"]
    return ["trainer=zero3 (partitions the weights across GPUs)"]


def write_plan(plan: Plan, run_dir: RunDir) -> None:
    """``plan.json`` and ``plan.md`` (each written whole)."""
    from train.plan_report import plan_markdown

    run_dir.path.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir.plan_file, asdict(plan), indent=2)
    write_text_atomic(run_dir.plan_report_file, plan_markdown(plan))
