"""The preference stage (``stage.method=dpo``): DPO through TRL's DPOTrainer on our video samples.

TRL has no collator for video conversations, so the recipe gives it ours: pairs (data_builders/preferences.py)
stay rows of an HF dataset until a batch is drawn, then the chat adapter renders the chosen and the rejected
conversation of each pair, as SFT and evaluation render them, and batches them as TRL's concatenated
forward wants them (models/pairs.py: chosen rows, then rejected rows, ``completion_mask`` over the final
reaction only). TRL's own dataset preparation (tokenising ``prompt``/``chosen``/``rejected`` text columns) is
skipped. Everything else is TRL's: the loss, the reference forward, the logged rewards and margins.

The reference is the starting model. Under LoRA a fresh adapter is put on it and the reference is the same
model with the adapter switched off (peft's ``disable_adapter``), so no second copy is held: TRL would copy
the adapter as a frozen "ref" adapter, which for a fresh adapter computes the same thing, and that copy is
removed. Under full fine-tuning the starting model is loaded a second time, frozen. ``stage.start_from``
makes an SFT checkpoint the starting model (``resolve_start``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from trl import DPOTrainer

from core import distributed
from core.config import StageConfig, TrainConfig, TrainerConfig
from core.errors import ConfigError, DataError
from core.files import write_json_atomic
from core.media import FrameCache, check_media
from core.rundir import RunDir
from core.vocab import ITEM_FORMS
from data_builders.preferences import PreferencePair, load_pairs
from models.chat import VideoChatAdapter
from models.loading import is_adapter, load_model, save_merged
from models.pairs import pair_batch
from train.data import MIX_STRATEGY, dataset_shares, mix_datasets
from train.trainer import RecipeTrainer

START_MODEL = "start_model"  # <run_dir>/start_model: base + the SFT adapter of stage.start_from, merged


def resolve_start(cfg: TrainConfig, run_dir: RunDir) -> None:
    """Make ``stage.start_from`` the run's base (``model.name_or_path``): a full checkpoint as it is; a LoRA
    checkpoint merged into the base once, under ``<run_dir>/start_model`` (file-locked: every rank calls
    this before the process group exists, one merges). The baseline is then the SFT model, and the results
    cache keys it by its own weights.

    Raises:
        ConfigError: ``stage.start_from`` is not a directory.
    """
    start = cfg.stage.start_from
    if start is None:
        return
    if not Path(start).is_dir():
        raise ConfigError(f"stage.start_from={start}: not a checkpoint directory")
    if not is_adapter(Path(start)):
        cfg.model.name_or_path, cfg.model.tiny = str(start), False
        return
    merged = run_dir.path / START_MODEL
    run_dir.path.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{merged}.lock"):
        if not (merged / "config.json").exists():
            save_merged(cfg.model, Path(start), merged)
    cfg.model.name_or_path, cfg.model.tiny = str(merged), False


def dpo_arguments(stage: StageConfig, trainer: TrainerConfig) -> tuple[type, dict]:
    """TRL's DPOConfig and what it takes beyond the Trainer's arguments (recipe.training_arguments)."""
    from trl import DPOConfig

    return DPOConfig, {
        "beta": stage.beta,
        "loss_type": list(stage.loss_type),
        "max_length": None,  # truncating would cut video tokens from the prompt
        "gradient_checkpointing": trainer.gradient_checkpointing,  # DPOConfig's default is True
    }


def preference_dataset(cfg: TrainConfig, chat: VideoChatAdapter, cache: FrameCache, run_dir: RunDir):
    """:func:`training_pairs` as an HF dataset of pair rows."""
    import datasets

    return datasets.Dataset.from_list([pair.to_row() for pair in training_pairs(cfg, chat, cache, run_dir)])


def training_pairs(
    cfg: TrainConfig, chat: VideoChatAdapter, cache: FrameCache, run_dir: RunDir
) -> list[PreferencePair]:
    """The training pairs of ``data.train`` (pair datasets, or OVI samples made into pairs) in the forms of
    ``stage.pair_forms``, mixed by ``data.weights`` as SFT samples are (train/data.py; recorded in
    ``data_mix.json``), whose media decode; the others are quarantined (``quarantine_train.json``).

    Raises:
        ConfigError: ``stage.pair_forms`` is empty or names an unknown form; bad ``data.weights``.
        DataError: no pair at all.
    """
    unknown = sorted(set(cfg.stage.pair_forms) - set(ITEM_FORMS))
    if unknown or not cfg.stage.pair_forms:
        raise ConfigError(f"stage.pair_forms: {unknown or 'empty'}; choose among {list(ITEM_FORMS)}")
    per_dataset = [
        [pair for pair in load_pairs(directory) if pair.sample.meta["format"] in cfg.stage.pair_forms]
        for directory in cfg.data.train
    ]
    shares = dataset_shares(cfg.data.train, cfg.data.weights)
    drawn = mix_datasets(per_dataset, shares, cfg.trainer.seed)
    if distributed.is_main():
        write_json_atomic(run_dir.data_mix_file, pair_mix(cfg, per_dataset, drawn, shares), indent=2)
    pairs = [pair for group in drawn for pair in group]
    if not pairs:
        raise DataError(", ".join(cfg.data.train), "no preference pair in data.train (OVI samples make them)")
    good, bad = check_media(
        [pair.sample for pair in pairs], cfg.media, cache, desc="train", follow_on=chat.follow_on
    )
    run_dir.write_quarantine("train", bad)
    kept = {sample.id for sample in good}
    return [pair for pair in pairs if pair.id in kept]


def pair_mix(
    cfg: TrainConfig, per_dataset: list[list], drawn: list[list], shares: list[float] | None
) -> dict[str, Any]:
    """What ``data_mix.json`` records of a preference run: each dataset's pairs and how many were drawn."""
    entries = [
        {
            "path": path,
            "weight": cfg.data.weights[position] if shares else None,
            "share": shares[position] if shares else None,
            "pairs": len(per_dataset[position]),  # in the dataset, in stage.pair_forms
            "drawn": len(drawn[position]),  # for the epoch, before media checks
        }
        for position, path in enumerate(cfg.data.train)
    ]
    strategy = MIX_STRATEGY if shares else "concat"
    drawn_pairs = sum(map(len, drawn))
    return {"strategy": strategy, "seed": cfg.trainer.seed, "pairs": drawn_pairs, "datasets": entries}


class PairCollator:
    """Pair rows → the chosen and rejected conversations rendered by the chat adapter, one batch."""

    def __init__(self, adapter: VideoChatAdapter):
        self.adapter = adapter

    def __call__(self, rows: list[dict]) -> dict:
        return pair_batch(self.adapter, [PreferencePair.from_row(row) for row in rows])


def reference_model(cfg: TrainConfig, peft_model: bool):
    """The frozen reference for full fine-tuning (the starting model, loaded again); None under LoRA."""
    if peft_model:
        return None
    model, _ = load_model(cfg.model)
    model.requires_grad_(False)
    return model.eval()


class RenderedRowsTrainer(RecipeTrainer):
    """The recipe's trainer in front of one of TRL's preference trainers (the next base of a subclass): the
    rows stay as they are (TRL's dataset preparation is skipped: our collator renders them per batch), and
    TRL's frozen "ref" copy of a fresh LoRA adapter is removed (the model with the adapter off computes the
    same)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "ref" in getattr(self.model, "peft_config", {}):
            self.model.delete_adapter("ref")

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset


class PreferenceTrainer(RenderedRowsTrainer, DPOTrainer):
    """TRL's DPOTrainer with the recipe's optimizer groups, sampler and clipping (RecipeTrainer) on pair
    rows that PairCollator renders."""


@dataclass(frozen=True)
class PreferenceMethod:
    """What the recipe takes from a preference method (``stage.method``): TRL's arguments class and its own
    arguments (``arguments(stage, trainer)``), the training rows (``dataset(cfg, chat, cache, run_dir)``),
    the collator that renders them (``collator(chat)``) and the trainer."""

    arguments: Callable[[StageConfig, TrainerConfig], tuple[type, dict]]
    dataset: Callable
    collator: type
    trainer: type


DPO = PreferenceMethod(dpo_arguments, preference_dataset, PairCollator, PreferenceTrainer)
