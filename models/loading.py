"""Loading a model and its processor from a checkpoint directory or a hub name, and a training run's
checkpoints on its base.

The tiny test models and real checkpoints (Qwen2.5-VL-7B, InternVL3-8B, ...) go through the same
``load_model``; only the path differs. Training, the evaluation watcher and ``python -m eval`` load a run's
base through ``load_base`` and its checkpoints through ``CheckpointModels``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch

from core.config import ModelConfig
from core.errors import ConfigError
from models.rope import use_released_positions


class CheckpointNotFound(ConfigError):
    """The configured checkpoint is neither a local directory nor in the local hub cache."""


class FamilyMismatch(ConfigError):
    """``model.family`` names another family than the checkpoint's own ``model_type``."""


def resolve_dtype(name: str) -> torch.dtype:
    """``model.dtype`` as a torch dtype: auto is bf16 on GPUs that have it, else fp32."""
    if name == "auto":
        return (
            torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
        )
    return getattr(torch, name)


def load_model(cfg: ModelConfig, quantization_config=None):
    """Load ``(model, processor)`` for ``cfg.name_or_path``.

    A ``tiny`` model of ``cfg.family`` is built there first if absent. Weights load from safetensors
    only, and remote code runs only when ``cfg.trust_remote_code`` says so. Under DeepSpeed ZeRO-3 (once
    the run's ``TrainingArguments`` exist) each rank loads only its partition (``deepspeed.zero.Init``).

    Args:
        quantization_config: e.g. ``models.qlora.quantization_config``; the model then loads onto this
            process's GPU, where bitsandbytes quantizes it.

    Raises:
        CheckpointNotFound: the path does not exist and the hub name is not available offline.
        FamilyMismatch: the checkpoint is of another family than ``cfg.family`` (its prompts would be
            rendered in the wrong chat format).
    """
    from transformers import AutoModelForImageTextToText

    config, processor = _load_config_and_processor(cfg)  # a wrong family fails before a 7B load
    quantized = {}
    if quantization_config is not None:
        # This rank's GPU (the TrainingArguments set it); bitsandbytes quantizes there as it loads.
        placement = {"": torch.cuda.current_device()}
        quantized = {"quantization_config": quantization_config, "device_map": placement}
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            cfg.name_or_path,
            config=config,
            dtype=resolve_dtype(cfg.dtype),
            attn_implementation=cfg.attn_implementation,
            local_files_only=not cfg.allow_download,
            trust_remote_code=cfg.trust_remote_code,
            use_safetensors=True,
            **quantized,
        )
    except OSError as exc:
        raise _not_found(cfg, exc) from None
    use_released_positions(model)  # Qwen-VL: text after a video where the checkpoints learnt it (rope.py)
    _save_as_loaded(model)
    return model, processor


def _save_as_loaded(model) -> None:
    """Make ``save_pretrained`` write the checkpoint's own key names under ZeRO-3 too: there transformers
    (5.24) keeps every key conversion its family declares for saving to reverse, not only those the
    checkpoint's names needed, as it keeps elsewhere; a Qwen-VL checkpoint loaded under ZeRO-3 was then
    saved as ``model.model.layers.*``, names no loader maps back (the weights would load as random)."""
    conversions = getattr(model, "_weight_conversions", None)
    if conversions:
        model._weight_conversions = [c for c in conversions if c.was_used()]


def load_processor(cfg: ModelConfig):
    """The processor of ``cfg.name_or_path`` alone (no weights), checked as :func:`load_model` checks it."""
    return _load_config_and_processor(cfg)[1]


def _load_config_and_processor(cfg: ModelConfig):
    from transformers import AutoConfig, AutoProcessor

    build_if_tiny(cfg)
    offline, remote = not cfg.allow_download, cfg.trust_remote_code
    try:
        config = AutoConfig.from_pretrained(
            cfg.name_or_path, local_files_only=offline, trust_remote_code=remote
        )
        _check_family(cfg, config.model_type)
        processor = AutoProcessor.from_pretrained(
            cfg.name_or_path, local_files_only=offline, trust_remote_code=remote, use_safetensors=True
        )
    except OSError as exc:
        raise _not_found(cfg, exc) from None
    return config, processor


def _not_found(cfg: ModelConfig, exc: OSError) -> CheckpointNotFound:
    local = os.path.isdir(cfg.name_or_path)
    where = "the directory exists but" if local else "it is not a local directory and"
    return CheckpointNotFound(
        f"model.name_or_path={cfg.name_or_path!r}: {where} no loadable checkpoint was found "
        f"({str(exc).splitlines()[0]}). Download it first (e.g. `hf download {cfg.name_or_path} "
        f"--local-dir <dir>`) and set model.name_or_path=<dir>, or set model.allow_download=true "
        f"on a machine with hub access."
    )


def load_base(cfg: ModelConfig, *, quantized: bool = False, device: str | None = None):
    """``(model, processor)`` of a run's base checkpoint, loaded as the run loaded it: in 4 bits for a
    QLoRA run, on ``device`` when given (None: where it loads; the Trainer places a training's model).

    Raises:
        ConfigError: a 4-bit base asked for without a CUDA device.
    """
    if not quantized:
        model, processor = load_model(cfg)
        return (model.to(device) if device else model), processor
    from models.qlora import quantization_config

    if device is not None:
        if not device.startswith("cuda"):
            raise ConfigError(f"device {device}: a QLoRA run's 4-bit base needs a CUDA device")
        torch.cuda.set_device(torch.device(device))  # bitsandbytes quantizes on the current device
    return load_model(cfg, quantization_config(cfg.family))


class CheckpointModels:
    """The model of each training checkpoint on one loaded base: a LoRA checkpoint's adapter replaces the
    previous one on the base; a full fine-tuning checkpoint is loaded whole, after the previous one is let
    go. One base serves a whole run's checkpoints (the watcher), or one checkpoint (``python -m eval``).

    Args:
        base: the base model as :func:`load_base` loaded it.
        cfg: the base's model settings (a full checkpoint loads with them).
        device: where checkpoints' weights go.
    """

    def __init__(self, base, cfg: ModelConfig, device: str):
        self.base, self.cfg, self.device = base, cfg, device
        self.with_adapter = None  # the base wrapped by PEFT, holding the current adapter
        self.adapter_name: str | None = None
        self.full = None

    def load(self, checkpoint: Path):
        """The model of ``checkpoint`` (a LoRA adapter directory, or a full checkpoint)."""
        if is_adapter(checkpoint):
            return self._swap_adapter(checkpoint)
        self.full = None  # free the previous checkpoint's weights before loading the next
        self.full, _ = load_model(replace(self.cfg, name_or_path=str(checkpoint), tiny=False))
        self.full.to(self.device)
        return self.full

    def _swap_adapter(self, checkpoint: Path):
        from peft import PeftModel

        name = checkpoint.name
        if self.with_adapter is None:
            self.with_adapter = PeftModel.from_pretrained(
                self.base, checkpoint, adapter_name=name, torch_device=self.device
            )
        elif name != self.adapter_name:
            self.with_adapter.load_adapter(checkpoint, adapter_name=name, torch_device=self.device)
            self.with_adapter.set_adapter(name)
            self.with_adapter.delete_adapter(self.adapter_name)
        self.adapter_name = name
        return self.with_adapter


def is_adapter(checkpoint: Path) -> bool:
    """Whether a training checkpoint holds a LoRA adapter (else: whole weights)."""
    return (Path(checkpoint) / "adapter_config.json").exists()


def save_merged(cfg: ModelConfig, adapter: Path, out: Path) -> None:
    """The LoRA checkpoint ``adapter`` merged into its base (``cfg``), saved at ``out`` with the base's
    processor and chat template: a whole checkpoint any loader or server takes. Written atomically."""
    from peft import PeftModel

    from core.files import atomic_dir

    model, processor = load_model(cfg)
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    with atomic_dir(out) as tmp:
        merged.save_pretrained(tmp)
        processor.save_pretrained(tmp)


def default_device() -> str:
    """Where evaluation runs when not told: the GPU when there is one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_if_tiny(cfg: ModelConfig, prepare=None) -> None:
    """Build the tiny model of ``cfg.family`` at ``cfg.name_or_path`` when ``cfg.tiny`` and it is absent
    (``prepare``: run on it before it is saved, ``build_tiny_checkpoint``'s).

    Multi-process runs call this before their process group exists: once it does, ``save_pretrained``
    writes on global rank 0 only, and the rank that builds (whichever takes the lock) must write it all.
    """
    if cfg.tiny:
        from models.tiny import build_tiny_checkpoint

        build_tiny_checkpoint(
            cfg.name_or_path,
            family=cfg.family,
            hidden=cfg.tiny_hidden,
            layers=cfg.tiny_layers,
            head_dim=cfg.tiny_head_dim,
            words=cfg.tiny_words,
            prepare=prepare,
        )


def _check_family(cfg: ModelConfig, model_type: str) -> None:
    # Family names are the checkpoints' own config.json ``model_type`` names.
    if model_type != cfg.family:
        raise FamilyMismatch(
            f"model.family={cfg.family!r} but {cfg.name_or_path} is a {model_type!r} checkpoint; "
            f"set model.family={model_type}"
        )
