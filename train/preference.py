"""The post-SFT stages: DPO and KTO through TRL's trainers, on what a model should and should not do when
interrupted. Each is a :class:`train.stages.Method` run by the SFT recipe's own steps (``train.recipe``).

Data: preference pairs (``data_builders.preferences``: the right reaction to an interruption over each
wrong one) made from data.train's OVI samples, or read from pair datasets (``builder=preference``), in the
forms of ``stage.preference.pair_forms``, mixed by ``data.weights`` as SFT samples are. DPO trains on the
pairs; KTO on the same pairs unpaired (each right reaction once, each distinct wrong one once, labelled
desirable or not). The stages' settings are ``stage.preference`` (``train.preference_config``).
TRL has no collator for video conversations, so the rows stay rows of an HF dataset until a batch is drawn,
then the chat adapter renders them as SFT and evaluation render them (``models.pairs``): DPO's chosen rows
then rejected rows with a ``completion_mask`` over the final reaction; KTO's rows and its KL rows (each
prompt with the previous row's reaction). Everything else is TRL's: the losses, the reference forwards, the
KL estimate, the logged rewards and margins.

The reference is the starting model: under LoRA the model with its fresh adapter switched off (no second
copy), under full fine-tuning the starting model loaded again, frozen. ``stage.start_from`` makes an SFT
checkpoint the starting model, merged once (:func:`with_start_model`); it is then the run's base and its
baseline, so the held-out pairs (the ``ovi_pairs`` benchmark) measure what the stage changed.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from filelock import FileLock
from trl import DPOTrainer, KTOTrainer

from core.config import TrainConfig
from core.errors import ConfigError, DataError
from core.media import FrameCache, check_media
from core.pairs import LabelledReaction, PreferencePair, unpaired
from core.run import Run
from core.rundir import RunDir
from data_builders.preferences import load_pairs
from models.chat import VideoChatAdapter, follows_on
from models.loading import is_adapter, load_model, save_merged
from models.pairs import pair_batch, unpaired_batch
from train.data import MIX_STRATEGY, TrainingSet, dataset_shares, mix_datasets
from train.stages import Method
from train.trainer import RecipeHooks


def with_start_model(cfg: TrainConfig, run_dir: RunDir) -> TrainConfig:
    """``cfg`` with ``stage.start_from`` as its base model: a full checkpoint as it is; a LoRA checkpoint
    merged into the base once, under ``run_dir.start_model_dir`` (file-locked: every rank calls this before
    the process group exists, one merges). The baseline is then the SFT model, and the results cache keys
    it by its own weights.

    Raises:
        ConfigError: ``stage.start_from`` is not a directory.
    """
    start = cfg.stage.start_from
    if start is None:
        return cfg
    if not Path(start).is_dir():
        raise ConfigError(f"stage.start_from={start}: not a checkpoint directory")
    started = Path(start)
    if is_adapter(started):
        started = run_dir.start_model_dir
        run_dir.path.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{started}.lock"):
            if not (started / "config.json").exists():
                save_merged(cfg.model, Path(start), started)
    return replace(cfg, model=replace(cfg.model, name_or_path=str(started), tiny=False))


def training_pairs(run: Run, cache: FrameCache) -> TrainingSet:
    """The training pairs of ``data.train`` (pair datasets, or OVI samples made into pairs) in the forms of
    ``stage.preference.pair_forms``, mixed by ``data.weights``, whose media decode; the others are
    quarantined.

    Raises:
        ConfigError: ``stage.preference.pair_forms`` is empty; bad ``data.weights``.
        DataError: no pair at all.
    """
    cfg = run.cfg
    forms = cfg.stage.preference.pair_forms
    if not forms:
        raise ConfigError("stage.preference.pair_forms is empty: name open and/or mcq")
    per_dataset = [
        [pair for pair in load_pairs(directory) if pair.sample.meta["format"] in forms]
        for directory in cfg.data.train
    ]
    shares = dataset_shares(cfg.data.train, cfg.data.weights)
    drawn = mix_datasets(per_dataset, shares, cfg.trainer.seed)
    pairs = [pair for group in drawn for pair in group]
    if not pairs:
        raise DataError(", ".join(cfg.data.train), "no preference pair in data.train (OVI samples make them)")
    follow_on = follows_on(cfg.model.family)
    samples = [pair.sample for pair in pairs]
    good, bad = check_media(samples, cfg.media, cache, desc="train", follow_on=follow_on)
    kept = {sample.id for sample in good}
    return TrainingSet([p for p in pairs if p.id in kept], bad, pair_mix(cfg, per_dataset, drawn, shares))


def pair_mix(
    cfg: TrainConfig, per_dataset: list[list], drawn: list[list], shares: list[float] | None
) -> dict[str, Any]:
    """What ``data_mix.json`` records of a preference run: each dataset's pairs and how many were drawn."""
    entries = [
        {
            "path": path,
            "weight": cfg.data.weights[position] if shares else None,
            "share": shares[position] if shares else None,
            "pairs": len(per_dataset[position]),  # in the dataset, in stage.preference.pair_forms
            "drawn": len(drawn[position]),  # for the epoch, before media checks
        }
        for position, path in enumerate(cfg.data.train)
    ]
    strategy = MIX_STRATEGY if shares else "concat"
    drawn_pairs = sum(map(len, drawn))
    return {"strategy": strategy, "seed": cfg.trainer.seed, "pairs": drawn_pairs, "datasets": entries}


def reference_model(cfg: TrainConfig, peft_model: bool):
    """The frozen reference for full fine-tuning (the starting model, loaded again); None under LoRA."""
    if peft_model:
        return None
    model, _ = load_model(cfg.model)
    model.requires_grad_(False)
    return model.eval()


def _rows_dataset(rows: list[dict]):
    import datasets

    return datasets.Dataset.from_list(rows)


def _trl_arguments(run: Run) -> dict[str, Any]:
    """What DPO's and KTO's configs take alike."""
    return {
        "beta": run.cfg.stage.preference.beta,
        "max_length": None,  # truncating would cut video tokens from the prompt
        "gradient_checkpointing": run.cfg.trainer.gradient_checkpointing,  # TRL's default is True
    }


# -- DPO ---------------------------------------------------------------------------------------------


def dpo_arguments(run: Run, rows: TrainingSet) -> tuple[type, dict[str, Any]]:
    """TRL's DPOConfig and what it takes beyond the Trainer's arguments."""
    from trl import DPOConfig

    losses = [str(loss) for loss in run.cfg.stage.preference.loss_type]
    return DPOConfig, {**_trl_arguments(run), "loss_type": losses}


class PairCollator:
    """Pair rows → the chosen and rejected conversations rendered by the chat adapter, one batch."""

    def __init__(self, adapter: VideoChatAdapter):
        self.adapter = adapter

    def __call__(self, rows: list[dict]) -> dict:
        return pair_batch(self.adapter, [PreferencePair.from_row(row) for row in rows])


def dpo_batches(rows: TrainingSet, chat: VideoChatAdapter):
    return _rows_dataset([pair.to_row() for pair in rows.rows]), PairCollator(chat)


class PreferenceTrainer(RecipeHooks, DPOTrainer):
    """TRL's DPOTrainer with the recipe's hooks, on pair rows that PairCollator renders."""


DPO = Method(
    training_pairs,
    dpo_arguments,
    dpo_batches,
    PreferenceTrainer,
    reference=True,
    implicit_reward=True,
    # TRL's DPOTrainer sums each row's completion log-probabilities (chosen rows, then rejected rows, in one
    # concatenated forward): a row holding several pairs' conversations would add them up.
    cannot_pack="DPO scores each row as one chosen or rejected conversation (TRL sums a row's log-probs)",
)


# -- KTO ---------------------------------------------------------------------------------------------


def kto_rows(run: Run, cache: FrameCache) -> TrainingSet:
    """The training pairs unpaired, in an order shuffled by ``trainer.seed``.

    KTOConfig samples rows in order (TRL pairs its KL completions with neighbouring rows ahead of time);
    ours are paired within each batch as it is drawn, so the rows are shuffled here, once, or a batch would
    hold one instance's reactions only.
    """
    pairs = training_pairs(run, cache)
    reactions = unpaired(pairs.rows)
    random.Random(run.cfg.trainer.seed).shuffle(reactions)
    return replace(pairs, rows=reactions)


def kto_arguments(run: Run, rows: TrainingSet) -> tuple[type, dict[str, Any]]:
    """TRL's KTOConfig and what it takes beyond the Trainer's arguments: the right reactions' loss
    weighted to balance the wrong ones' (:func:`balancing_weight`)."""
    from trl import KTOConfig

    weight = balancing_weight([reaction.desirable for reaction in rows.rows])
    return KTOConfig, {**_trl_arguments(run), "desirable_weight": weight}


def balancing_weight(labels: list[bool]) -> float:
    """KTO's weight on the desirable rows' loss that balances the undesirable rows' (the KTO paper's Eq. 8:
    the weighted counts within [1, 4/3] of each other; here equal).

    Each instance gives its right reaction once and up to four wrong ones, about 3 wrong rows to a right one
    on OVI-Train; unweighted, pushing the wrong reactions down outweighs holding the right ones up, and the
    quickstart's model lost every answer (empty replies by step 200).
    """
    desirable = sum(labels)
    return (len(labels) - desirable) / max(desirable, 1)


class UnpairedCollator:
    """Labelled reaction rows → one KTO batch (the rows and their KL rows) rendered by the chat adapter."""

    def __init__(self, adapter: VideoChatAdapter):
        self.adapter = adapter

    def __call__(self, rows: list[dict]) -> dict:
        return unpaired_batch(self.adapter, [LabelledReaction.from_row(row) for row in rows])


def kto_batches(rows: TrainingSet, chat: VideoChatAdapter):
    return _rows_dataset([reaction.to_row() for reaction in rows.rows]), UnpairedCollator(chat)


class UnpairedTrainer(RecipeHooks, KTOTrainer):
    """TRL's KTOTrainer with the recipe's hooks, on labelled reaction rows that UnpairedCollator renders."""


KTO = Method(
    kto_rows,
    kto_arguments,
    kto_batches,
    UnpairedTrainer,
    reference=True,
    implicit_reward=True,
    # The KL rows are spliced from the batch's own rows, and TRL sums log-probabilities per row.
    cannot_pack="KTO scores each row as one reaction and builds its KL rows from the batch's rows",
)
