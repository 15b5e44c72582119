"""The five released checkpoints we support, as shapes without weights: their architectures and their
processors with the released settings, for planning a run at the released size on the meta device.

No hub is reachable from our machines and transformers' config classes do not default to these
checkpoints (``Qwen2_5_VLConfig()`` is a 75.8B model with the 72B text stack), nor do the processor classes
default to the released preprocessor files (``Qwen2VLImageProcessor()`` caps images at 1,003,520 px where
the release has 12,845,056). So ``RELEASED`` keeps, per family, the shaping fields of the released
``config.json`` as they are written there (transformers reads them as it reads the file), the processor
settings of its preprocessor files, and the exact parameter count those fields give on the meta device,
which ``tests/test_released.py`` checks. A checkpoint directory (or the local hub cache) that holds its own
files always wins over this table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from core.config import Family, ModelConfig
from core.errors import ConfigError
from models.loading import _check_family, build_if_tiny
from models.rope import use_released_positions

if TYPE_CHECKING:
    from transformers import PretrainedConfig, ProcessorMixin

# The Qwen2 7B text stack: Qwen2-VL, Qwen2.5-VL, LLaVA-OneVision-Qwen2 and InternVL3 all use it.
_QWEN2_7B_TEXT = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "use_sliding_window": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
# Qwen2-VL / Qwen2.5-VL special tokens: <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|>.
_QWEN_VL_TOKEN_IDS = {
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "image_token_id": 151655,
    "video_token_id": 151656,
}
_CLIP_MEAN, _CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
_IMAGENET_MEAN, _IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
_HALF = [0.5, 0.5, 0.5]
# Qwen2-VL and Qwen2.5-VL ship one preprocessor file; transformers builds their video processor from it.
_QWEN2_VL_PIXELS = {
    "size": {"shortest_edge": 3136, "longest_edge": 12845056},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": _CLIP_MEAN,
    "image_std": _CLIP_STD,
}
# The released preprocessor files predate transformers' per-frame video cap; unset, it is off (with a
# warning): off is how these checkpoints were released.
_NO_FRAME_CAP = {"cap_pixels_per_frame": False}
# A checkpoint directory holds a processor when it holds one of these (its tokenizer's files beside it): the
# released checkpoints' file, or the one transformers 5 writes.
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# LLaVA-OneVision's anyres grid: every (384a, 384b) for a, b in 1..6, in the released order.
_LLAVA_OV_PINPOINTS = [[384 * a, 384 * b] for a in range(1, 7) for b in range(1, 7)]


@dataclass(frozen=True)
class ProcessorSettings:
    """A released processor: its classes (transformers names) and their settings, as its files give them.

    Attributes:
        processor_class, image_processor_class, video_processor_class: the transformers classes.
        image: the image processor's settings.
        video: the video processor's settings.
        processor: the processor's own settings (e.g. LLaVA-OneVision's ``num_image_tokens``).
    """

    processor_class: str
    image_processor_class: str
    video_processor_class: str
    image: dict
    video: dict
    processor: dict


@dataclass(frozen=True)
class ReleasedCheckpoint:
    """One released checkpoint, without its weights.

    Attributes:
        hub_name: its name on the hub, as ``conf/model/*.yaml`` ship it.
        config: the shaping fields of its ``config.json``, written as the file writes them (legacy keys
            such as ``rope_scaling`` included: transformers reads them as it reads the file).
        parameters: its exact parameter count, as these fields build it.
        processor: its processor's released settings.
    """

    hub_name: str
    config: dict
    parameters: int
    processor: ProcessorSettings


RELEASED: dict[Family, ReleasedCheckpoint] = {
    Family.qwen2_vl: ReleasedCheckpoint(
        hub_name="Qwen/Qwen2-VL-7B-Instruct",
        config={
            "model_type": "qwen2_vl",
            **_QWEN2_7B_TEXT,
            **_QWEN_VL_TOKEN_IDS,
            "vocab_size": 152064,
            "max_position_embeddings": 32768,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": False,
            "vision_config": {
                "depth": 32,
                "embed_dim": 1280,
                "hidden_size": 3584,
                "hidden_act": "quick_gelu",
                "mlp_ratio": 4,
                "num_heads": 16,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
            },
        },
        parameters=8_291_375_616,
        processor=ProcessorSettings(
            "Qwen2VLProcessor",
            "Qwen2VLImageProcessor",
            "Qwen2VLVideoProcessor",
            image=_QWEN2_VL_PIXELS,
            video={**_QWEN2_VL_PIXELS, **_NO_FRAME_CAP},
            processor={},
        ),
    ),
    Family.qwen2_5_vl: ReleasedCheckpoint(
        hub_name="Qwen/Qwen2.5-VL-7B-Instruct",
        config={
            "model_type": "qwen2_5_vl",
            **_QWEN2_7B_TEXT,
            **_QWEN_VL_TOKEN_IDS,
            "vocab_size": 152064,
            "max_position_embeddings": 128000,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": False,
            "vision_config": {
                "depth": 32,
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "hidden_act": "silu",
                "num_heads": 16,
                "out_hidden_size": 3584,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
                "tokens_per_second": 2,
            },
        },
        parameters=8_292_166_656,
        processor=ProcessorSettings(
            "Qwen2_5_VLProcessor",
            "Qwen2VLImageProcessor",
            "Qwen2VLVideoProcessor",
            image=_QWEN2_VL_PIXELS,
            video={**_QWEN2_VL_PIXELS, **_NO_FRAME_CAP},
            processor={},
        ),
    ),
    Family.qwen3_vl: ReleasedCheckpoint(
        hub_name="Qwen/Qwen3-VL-8B-Instruct",
        config={
            "model_type": "qwen3_vl",
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "tie_word_embeddings": False,
            "text_config": {
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "hidden_act": "silu",
                "rms_norm_eps": 1e-6,
                "vocab_size": 151936,
                "max_position_embeddings": 262144,
                "rope_theta": 5000000,
                "rope_scaling": {
                    "rope_type": "default",
                    "mrope_section": [24, 20, 20],
                    "mrope_interleaved": True,
                },
                "bos_token_id": 151643,
                "eos_token_id": 151645,
            },
            "vision_config": {
                "depth": 27,
                "hidden_size": 1152,
                "intermediate_size": 4304,
                "hidden_act": "gelu_pytorch_tanh",
                "num_heads": 16,
                "out_hidden_size": 4096,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "num_position_embeddings": 2304,
                "deepstack_visual_indexes": [8, 16, 24],
            },
        },
        parameters=8_767_123_696,
        processor=ProcessorSettings(
            "Qwen3VLProcessor",
            "Qwen2VLImageProcessor",
            "Qwen3VLVideoProcessor",
            image={
                "size": {"shortest_edge": 65536, "longest_edge": 16777216},
                "patch_size": 16,
                "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": _HALF,
                "image_std": _HALF,
            },
            # Qwen3-VL's video budget is over the whole clip (frames x height x width), not per frame.
            video={
                "size": {"shortest_edge": 4096, "longest_edge": 25165824},
                "patch_size": 16,
                "temporal_patch_size": 2,
                "merge_size": 2,
                "image_mean": _HALF,
                "image_std": _HALF,
                **_NO_FRAME_CAP,
            },
            processor={},
        ),
    ),
    Family.llava_onevision: ReleasedCheckpoint(
        hub_name="llava-hf/llava-onevision-qwen2-7b-ov-hf",
        config={
            "model_type": "llava_onevision",
            "image_token_index": 151646,
            "video_token_index": 151647,
            "image_grid_pinpoints": _LLAVA_OV_PINPOINTS,
            "vision_aspect_ratio": "anyres_max_9",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "full",
            "projector_hidden_act": "gelu",
            "use_image_newline_parameter": True,  # the learnt image_newline after each row of features
            "tie_word_embeddings": False,
            "text_config": {
                "model_type": "qwen2",
                **_QWEN2_7B_TEXT,
                "vocab_size": 152128,
                "max_position_embeddings": 32768,
                "tie_word_embeddings": False,
            },
            "vision_config": {
                "model_type": "siglip_vision_model",
                "hidden_size": 1152,
                "intermediate_size": 4304,
                "num_hidden_layers": 26,
                "num_attention_heads": 16,
                "image_size": 384,
                "patch_size": 14,
                "vision_use_head": False,
            },
        },
        parameters=8_030_807_584,
        processor=ProcessorSettings(
            "LlavaOnevisionProcessor",
            "LlavaOnevisionImageProcessor",
            "LlavaOnevisionVideoProcessor",
            image={
                "size": {"height": 384, "width": 384},
                "image_grid_pinpoints": _LLAVA_OV_PINPOINTS,
                "do_pad": True,
                "image_mean": _HALF,
                "image_std": _HALF,
            },
            video={"size": {"height": 384, "width": 384}, "image_mean": _HALF, "image_std": _HALF},
            # 27 x 27 SigLIP patches per tile; a video frame's are pooled 2x2 to 14 x 14 = 196.
            processor={
                "num_image_tokens": 729,
                "vision_feature_select_strategy": "full",
                "vision_aspect_ratio": "anyres_max_9",
            },
        ),
    ),
    Family.internvl: ReleasedCheckpoint(
        hub_name="OpenGVLab/InternVL3-8B-hf",
        config={
            "model_type": "internvl",
            "image_token_id": 151667,  # <IMG_CONTEXT>; <img> and </img> are 151665 and 151666
            "image_seq_length": 256,
            "downsample_ratio": 0.5,  # pixel shuffle: 2 x 2 patches become one token
            "projector_hidden_act": "gelu",
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
            "tie_word_embeddings": False,
            "text_config": {
                "model_type": "qwen2",
                **_QWEN2_7B_TEXT,
                "vocab_size": 151674,
                "max_position_embeddings": 32768,
                # InternVL3's language models extend their context by dynamic NTK scaling.
                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
                "tie_word_embeddings": False,
            },
            "vision_config": {
                "model_type": "internvl_vision",
                "hidden_size": 1024,
                "intermediate_size": 4096,
                "num_hidden_layers": 24,
                "num_attention_heads": 16,
                "image_size": [448, 448],
                "patch_size": [14, 14],
                "hidden_act": "gelu",
                "attention_bias": True,  # InternViT-300M's qkv biases (the class default has none)
                "use_qk_norm": False,
                "norm_type": "layer_norm",
                "layer_norm_eps": 1e-6,
                "layer_scale_init_value": 0.1,
                "use_absolute_position_embeddings": True,
                "use_mean_pooling": True,
            },
        },
        parameters=7_944_373_760,
        processor=ProcessorSettings(
            "InternVLProcessor",
            "GotOcr2ImageProcessor",
            "InternVLVideoProcessor",
            image={
                "size": {"height": 448, "width": 448},
                "crop_to_patches": True,
                "min_patches": 1,
                "max_patches": 12,
                "image_mean": _IMAGENET_MEAN,
                "image_std": _IMAGENET_STD,
            },
            video={
                "size": {"height": 448, "width": 448},
                "image_mean": _IMAGENET_MEAN,
                "image_std": _IMAGENET_STD,
            },
            processor={"image_seq_length": 256},
        ),
    ),
}


def released_checkpoint(family: Family | str) -> ReleasedCheckpoint:
    """The released checkpoint of ``family``.

    Raises:
        ConfigError: ``family`` is not one of the five.
    """
    if family not in RELEASED:
        raise ConfigError(f"model.family={family!r} is not one of {', '.join(RELEASED)}")
    return RELEASED[Family(family)]


def released_config(family: Family | str) -> PretrainedConfig:
    """The released ``config.json`` of ``family`` as transformers reads that file (a ``PretrainedConfig``)."""
    import copy

    from transformers import CONFIG_MAPPING

    fields = copy.deepcopy(released_checkpoint(family).config)  # transformers pops from what it is given
    return CONFIG_MAPPING[fields["model_type"]].from_dict(fields)


def architecture_config(model_cfg: ModelConfig) -> tuple[PretrainedConfig, str]:
    """``(config, source)``: the architecture of ``model_cfg.name_or_path``, never its weights.

    The checkpoint's own ``config.json`` when ``name_or_path`` is a directory holding one (a ``tiny`` model
    is built there first, as loading builds it) or a hub name in the local hub cache; else the released
    shape of that hub name from ``RELEASED``. ``source`` says which, in words.

    Raises:
        FamilyMismatch: the checkpoint is of another family than ``model_cfg.family``.
        ConfigError: neither a config.json nor one of the released hub names.
    """
    from transformers import AutoConfig

    build_if_tiny(model_cfg)
    name = model_cfg.name_or_path
    config_file = _local_config_file(name)
    if config_file is not None:
        config = AutoConfig.from_pretrained(
            config_file.parent, local_files_only=True, trust_remote_code=model_cfg.trust_remote_code
        )
        source = f"config.json at {config_file.parent}"
    else:
        entry = next((entry for entry in RELEASED.values() if entry.hub_name == name), None)
        if entry is None:
            hub_names = ", ".join(checkpoint.hub_name for checkpoint in RELEASED.values())
            raise ConfigError(
                f"model.name_or_path={name!r} has no config.json and is not one of the five released "
                f"checkpoints ({hub_names}): give a checkpoint directory with its config.json"
            )
        config = released_config(entry.config["model_type"])
        source = f"released shape of {name} (models/released.py)"
    _check_family(model_cfg, config.model_type)
    return config, source


def _local_config_file(name: str) -> Path | None:
    """The config.json of a checkpoint directory, or of a hub name in the local hub cache; else None."""
    if os.path.isdir(name):
        path = Path(name) / "config.json"
        return path if path.is_file() else None
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a hub name either (a path that is not there, ...)
        return None
    return Path(cached) if isinstance(cached, str) else None


def meta_model(config: PretrainedConfig, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """The model of ``config`` on the meta device: every parameter shaped, none allocated, built in a second
    or two; with the released Qwen-VL positions that ``models.loading.load_model`` gives a loaded model."""
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    use_released_positions(model)
    return model


def released_processor(family: Family | str) -> ProcessorMixin:
    """``family``'s real processor classes with its released settings, and a small offline tokenizer holding
    the family's special tokens (``models.tiny``'s BPE: the media tokens are the real ones, ordinary text
    tokenises otherwise than the released tokenizer, and the token ids are not the released ones)."""
    import transformers

    from models.tiny import train_tokenizer

    settings = released_checkpoint(family).processor
    image_processor = getattr(transformers, settings.image_processor_class)(**settings.image)
    video_processor = getattr(transformers, settings.video_processor_class)(**settings.video)
    return getattr(transformers, settings.processor_class)(
        image_processor=image_processor,
        tokenizer=train_tokenizer(Family(family).value),
        video_processor=video_processor,
        **settings.processor,
    )


def checkpoint_processor(model_cfg: ModelConfig) -> tuple[ProcessorMixin, str]:
    """``(processor, source)``: the processor of ``model_cfg.name_or_path`` when its directory (or the local
    hub cache) holds one, its tokenizer included; else the released processor of ``model_cfg.family``
    (:func:`released_processor`). ``source`` says which, in words."""
    from transformers import AutoProcessor

    build_if_tiny(model_cfg)
    config_file = _local_config_file(model_cfg.name_or_path)
    if config_file is not None and any((config_file.parent / name).is_file() for name in _PROCESSOR_FILES):
        processor = AutoProcessor.from_pretrained(
            config_file.parent, local_files_only=True, trust_remote_code=model_cfg.trust_remote_code
        )
        return processor, f"processor at {config_file.parent}"
    source = f"released processor of {model_cfg.family} (models/released.py)"
    return released_processor(model_cfg.family), source
