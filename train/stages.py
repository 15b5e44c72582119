"""What a training stage brings to the recipe (``stage.method``), and the first stage, supervised
fine-tuning. The post-SFT stages are in ``train.preference`` (DPO, KTO) and ``train.grpo`` (GRPO);
``train.recipe`` runs whichever is chosen through the same steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.media import FrameCache
from core.run import Run
from models.chat import VideoChatAdapter, follows_on
from train.data import Collator, SampleDataset, TrainingSet, training_set
from train.trainer import RecipeTrainer


@dataclass(frozen=True)
class Method:
    """A training stage.

    Attributes:
        rows: ``(run, cache) -> TrainingSet``: its training rows from ``data.train``, mixed by
            ``data.weights`` and media-checked (what does not decode is quarantined), before any model loads.
        arguments: ``(run, rows) -> (TrainingArguments class, its own arguments)``: TRL's config class of the
            stage and what it takes beyond the Trainer's arguments (``train.recipe.training_arguments``).
        batches: ``(rows, chat adapter) -> (dataset, collator)``: the rows as the trainer draws them and the
            collator that renders each batch through the chat adapter.
        trainer: the trainer class (its loop and loss; ``train.trainer.RecipeHooks`` mixed in).
        reference: whether the trainer takes a frozen reference model (a post-SFT stage's starting model).
        implicit_reward: whether it trains an implicit reward, beta x the log-ratio to the reference (DPO,
            KTO), which the held-out pairs then report.
        trainer_kwargs: ``(run, chat adapter) -> what else its trainer takes``.
        cannot_pack: why ``data.packing=true`` is refused for this stage (the compose-time error says it);
            None: its batches pack (``train.data.PackingCollator``; the trainer takes packed batches).
    """

    rows: Callable[[Run, FrameCache], TrainingSet]
    arguments: Callable[[Run, TrainingSet], tuple[type | None, dict[str, Any]]]
    batches: Callable[[TrainingSet, VideoChatAdapter], tuple[Any, Callable]]
    trainer: type
    reference: bool = False
    implicit_reward: bool = False
    trainer_kwargs: Callable[[Run, VideoChatAdapter], dict[str, Any]] = lambda run, chat: {}
    cannot_pack: str | None = "its batches have no packed form"


def sft_rows(run: Run, cache: FrameCache) -> TrainingSet:
    cfg = run.cfg
    follow_on = follows_on(cfg.model.family)
    return training_set(cfg.data, cfg.trainer.seed, cfg.media, cache, follow_on=follow_on)


def sft_arguments(run: Run, rows: TrainingSet) -> tuple[None, dict[str, Any]]:
    return None, {}  # the Trainer's own arguments


def sft_batches(rows: TrainingSet, chat: VideoChatAdapter) -> tuple[SampleDataset, Collator]:
    return SampleDataset(rows.rows, chat), Collator(chat)


SFT = Method(sft_rows, sft_arguments, sft_batches, RecipeTrainer, cannot_pack=None)
