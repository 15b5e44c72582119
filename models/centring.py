"""A random vision tower's output centred and scaled on real clips: the stand-in's start.

At random initialisation a Qwen-VL tower and merger give every visual token nearly the same vector: on the
synthetic world's clips, what differs between tokens is a few percent of what they share (the dark
background fills most patches, and each layer's normalisation and small weights keep the common part).
The language model, whose own normalisation reads a token's direction, then sees one vector per clip
and learns nothing from the frames (docs/results/2026-12-07-standin.md). Shifting and scaling the merger's
last layer so that its output over a batch of training clips has zero mean and unit spread keeps all the
tower computes and removes the common part: a data-dependent initialisation, done once, when the
stand-in's random start is built.
"""

from __future__ import annotations

import torch

from core.config import StageMethod, TrainConfig
from core.errors import ConfigError
from core.media import FrameCache
from models.chat import make_adapter

CENTRING_CLIPS = 32  # training clips the output is centred on (one forward pass of the tower)
_CENTRED_FAMILIES = ("qwen2_vl", "qwen2_5_vl")  # a merger ending in one Linear: model.visual.merger.mlp


def visual_output(model, batch: dict) -> torch.Tensor:
    """The merger's output for a processor batch's videos: one row per visual token."""
    with torch.no_grad():
        out = model.model.visual(batch["pixel_values_videos"], grid_thw=batch["video_grid_thw"])
    return getattr(out, "pooler_output", out)  # transformers 5 returns an output object


def centre_visual_output(model, batch: dict) -> None:
    """Shift and scale the merger's last layer so that its output over ``batch``'s videos has zero mean
    per channel and unit spread overall (the channels keep their relative scales)."""
    out = visual_output(model, batch)
    mean = out.mean(0)
    spread = (out - mean).std()
    last = model.model.visual.merger.mlp[-1]
    with torch.no_grad():
        last.weight.div_(spread)
        last.bias.sub_(mean).div_(spread)


def centring(cfg: TrainConfig, samples: list, cache: FrameCache):
    """``model.tiny_centre_visual``: what building the run's tiny model runs before saving it
    (``build_tiny_checkpoint``'s ``prepare``): its visual output centred on the first ``CENTRING_CLIPS``
    training samples with a video, rendered as training renders them. None when not asked for.

    Raises:
        ConfigError: the stage is not supervised, the family's merger is not one this knows, or no
            sample has a video.
    """
    family = cfg.model.family
    if not (cfg.model.tiny and cfg.model.tiny_centre_visual):
        return None
    if cfg.stage.method != StageMethod.sft:
        raise ConfigError("model.tiny_centre_visual centres on supervised training clips: stage.method=sft")
    if family not in _CENTRED_FAMILIES:
        raise ConfigError(f"model.tiny_centre_visual: a {family} tower is not one models/centring.py centres")
    clips = [s for s in samples if any(p.type == "video" for t in s.turns for p in t.parts)][:CENTRING_CLIPS]
    if not clips:
        raise ConfigError("model.tiny_centre_visual: no training sample has a video to centre on")

    def prepare(model, processor) -> None:
        adapter = make_adapter(family, processor, cfg.media, cache, cfg.model.chat_format)
        centre_visual_output(
            model, adapter.training_batch([adapter.render(s, for_generation=False) for s in clips])
        )

    return prepare
