"""V2P-Bench: multiple-choice questions about what a visual prompt marks on a video frame.

Scored by the official rule (the reply's first character is the answer letter) with the tolerant
extraction beside it (``core/answers.py``); reported by dimension, duration bucket, task group, source
and prompt shape. Overall and per-category values are micro averages over items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.answers import official_correct, tolerant_letter
from core.errors import ConfigError
from core.formats.v2p import DIMENSIONS, InputOrder, load_v2p_release
from core.sample import Sample
from eval.benchmarks.base import Benchmark, Meta, SummaryContext
from eval.benchmarks.shapes import SHAPES, UNKNOWN, prompt_shape

# The paper's three tasks (seed 000, Key Designs 2: "Basic Perception includes object attributes and human
# attributes ... Temporal Understanding includes forward timing, reverse timing, action sequences, spatial
# relationships, object directions, feature mapping, and counting. High-level Reasoning covers causal
# relationships, plot understanding, and counterfactual reasoning").
TASK_GROUPS: dict[str, frozenset[str]] = {
    "basic_perception": frozenset({"OA", "HA"}),
    "temporal_understanding": frozenset({"FT", "RT", "AS", "SR", "OD", "FM", "GC"}),
    "high_level_reasoning": frozenset({"CR", "PU", "CI"}),
}
SHORT_MAX_S = 240.0  # the code behind the published tables uses 240 s, not the prose's "3 min"
MEDIUM_MAX_S = 1800.0
DURATIONS = ("short", "medium", "long")


@dataclass
class V2PSettings:
    """``eval.settings.v2p``: the release, and how its items are asked (the diagnostics derived from V2P's
    items read these too)."""

    root: str | None = None  # a V2P-Bench release directory (dataset_info.jsonl, videos/, frames/)
    input_order: InputOrder = InputOrder.official  # where the visual-prompt frame goes in the user turn
    max_new_tokens: int = 64  # the official script's
    shuffle_seed: int = 0  # v2p_shuffled: which video each question is paired with


def load(settings: V2PSettings) -> list[Sample]:
    """The release's items (validated; bad rows raise naming the file, line and field)."""
    if not settings.root:
        raise ConfigError("eval.settings.v2p.root is not set (a V2P-Bench release directory)")
    return load_v2p_release(settings.root, input_order=settings.input_order)


def score(prediction: str, meta: Meta) -> dict[str, float]:
    """``accuracy`` by the official rule and ``accuracy_tolerant`` by the tolerant extraction, 0/1."""
    prediction = prediction or ""
    answer = meta["answer"]
    return {
        "accuracy": float(official_correct(prediction, answer)),
        "accuracy_tolerant": float(tolerant_letter(prediction) == answer),
    }


def categories(meta: Meta) -> dict[str, str]:
    """``dimension`` (label), ``duration`` (bucket), ``task_group``, ``source`` and ``shape``."""
    label = dimension_label(meta["dimension"])
    return {
        "dimension": label,
        "duration": duration_bucket(float(meta["duration"])),
        "task_group": task_group(label),
        "source": str(meta["source"]),
        # A text-prompt diagnostic item is reported under the shape of the visual prompt it replaces.
        "shape": prompt_shape(meta.get("visual_prompt_question", meta["question"])),
    }


def duration_bucket(seconds: float) -> str:
    """The paper's duration bucket: short < 240 s <= medium < 1800 s <= long."""
    if seconds < SHORT_MAX_S:
        return "short"
    if seconds < MEDIUM_MAX_S:
        return "medium"
    return "long"


def dimension_label(dimension: int) -> str:
    """Short label for a dimension id, e.g. ``1 -> "OA"``; unknown ids become ``"dim<id>"``."""
    entry = DIMENSIONS.get(int(dimension))
    return entry[0] if entry else f"dim{dimension}"


def task_group(label: str) -> str:
    """The paper's task of a dimension label, or ``"unknown"``."""
    for group, labels in TASK_GROUPS.items():
        if label in labels:
            return group
    return UNKNOWN


def max_new_tokens(meta: Meta, settings: V2PSettings) -> int:
    return settings.max_new_tokens


# The official input (infer/infer_qwen2.5-vl.py of the release; conf/media/qwen_64f.yaml): the media
# fields that define it, as a MediaSpec holds them.
OFFICIAL_MEDIA = {
    "num_frames": 64,
    "min_pixels": 128 * 28 * 28,
    "max_pixels": 336 * 336,
    "image_min_pixels": 256 * 28 * 28,
    "image_max_pixels": 8192 * 28 * 28,
    "grid": 28,
    "tile": None,
}
# The same input as each family's release processes it, resized once (conf/media/<family>_64f.yaml):
# Qwen3-VL's 32-px grid; LLaVA-OneVision's and InternVL3's frames at their tile, the prompt frame left to
# their own tiling. A family's own geometry is the official input for it, not a departure from it.
OFFICIAL_MEDIA_BY_FAMILY = {
    "Qwen2-VL and Qwen2.5-VL": OFFICIAL_MEDIA,
    "Qwen3-VL": {**OFFICIAL_MEDIA, "grid": 32},
    "LLaVA-OneVision": {**OFFICIAL_MEDIA, "min_pixels": 384**2, "max_pixels": 384**2, "grid": 1, "tile": 384},
    "InternVL3": {**OFFICIAL_MEDIA, "min_pixels": 448**2, "max_pixels": 448**2, "grid": 1, "tile": 448},
}


def media_protocol(context: SummaryContext) -> dict[str, Any]:
    """The media the items were answered with, named beside the scores: the official input (as which
    family's release processes it, past Qwen2-VL and Qwen2.5-VL's) or not."""
    media = context.media
    used = {key: getattr(media, key) for key in OFFICIAL_MEDIA}
    described = _described(media)
    for family, official in OFFICIAL_MEDIA_BY_FAMILY.items():
        if used == official:
            as_processed = "" if official is OFFICIAL_MEDIA else f" as {family}'s release processes it"
            return {"protocol": f"the official input{as_processed}: {described}"}
    return {"protocol": f"NOT the official input (64 frames of at most 336x336): {described}"}


def _described(media) -> str:
    """The media in words: frames per span and their size, the prompt frame's pixel range, the grid."""
    if media.tile is not None:
        size = f"{media.tile}x{media.tile}"
    else:
        side = int(media.max_pixels**0.5)
        size = f"at most {media.max_pixels} px (~{side}x{side})"
    prompt = f"{media.image_min_pixels}-{media.image_max_pixels} px"
    described = f"{media.num_frames or 'fps-sampled'} frames of {size}, prompt frame {prompt}"
    if media.grid == 1:
        return f"{described} at its own size"
    if media.grid != OFFICIAL_MEDIA["grid"]:
        return f"{described}, sides in multiples of {media.grid}"
    return described


def made_with(settings: V2PSettings) -> dict[str, Any]:
    return {"max_new_tokens": settings.max_new_tokens, "input_order": str(settings.input_order)}


CATEGORY_ORDER = {
    "dimension": tuple(label for label, _ in DIMENSIONS.values()),
    "duration": DURATIONS,
    "task_group": tuple(TASK_GROUPS),
    "shape": (*SHAPES, UNKNOWN),
}

V2P = Benchmark(
    name="v2p",
    version=2,  # 2: the prompt frame's own pixel budget, frames resized as the processor rounds, 64 tokens
    title="V2P-Bench",
    load=load,
    score=score,
    categories=categories,
    made_with=made_with,
    summary=media_protocol,
    settings_class=V2PSettings,
    max_new_tokens=max_new_tokens,
    headline=("accuracy",),
    metric_order=("accuracy", "accuracy_tolerant"),
    category_order=CATEGORY_ORDER,
    synthetic="v2p_bench",
)
