"""The preference stage as KTO (``stage.method=kto``): TRL's KTOTrainer on the DPO stage's pairs, unpaired.

KTO needs no pairs: each conversation ending with a reaction is labelled desirable (the right reaction) or
not (a wrong one), and the loss pushes the first up and the second down against the reference, measured
from a KL estimate. The data are the same pairs as DPO's (train/dpo.py ``training_pairs``), unpaired
(data_builders/preferences.py ``unpaired``: each right reaction once, each distinct wrong one once, with
the pair's provenance). Our collator renders them through the chat adapter and adds TRL's KL rows: each
row's prompt with the previous row's reaction (models/pairs.py ``unpaired_batch``); the KL forward reuses
the rows' video inputs, which the KL rows share. Everything else is TRL's: the loss, the KL estimate, the
reference forwards, the logged rewards.

The right reactions are about three times rarer than the wrong ones, so their loss is weighted to balance
(``balancing_weight``; TRL's own check of that balance is in the dataset preparation we skip). The
reference is the starting model, as for DPO (LoRA: the adapter switched off; full fine-tuning: a second
load), and ``stage.start_from`` makes an SFT checkpoint the start (train/dpo.py ``resolve_start``).
"""

from __future__ import annotations

import random

from trl import KTOTrainer

from core.config import StageConfig, TrainConfig, TrainerConfig
from core.media import FrameCache
from core.rundir import RunDir
from data_builders.preferences import LabelledReaction, unpaired
from models.chat import VideoChatAdapter
from models.pairs import unpaired_batch
from train.dpo import PreferenceMethod, RenderedRowsTrainer, training_pairs


def kto_arguments(stage: StageConfig, trainer: TrainerConfig) -> tuple[type, dict]:
    """TRL's KTOConfig and what it takes beyond the Trainer's arguments (recipe.training_arguments)."""
    from trl import KTOConfig

    return KTOConfig, {
        "beta": stage.beta,
        "max_length": None,  # truncating would cut video tokens from the prompt
        "gradient_checkpointing": trainer.gradient_checkpointing,  # KTOConfig's default is True
    }


def unpaired_dataset(cfg: TrainConfig, chat: VideoChatAdapter, cache: FrameCache, run_dir: RunDir):
    """The training pairs, unpaired, as an HF dataset of labelled reaction rows in an order shuffled by
    ``trainer.seed``.

    KTOConfig samples rows in order (TRL pairs its KL completions with neighbouring rows ahead of time); ours
    are paired within each batch as it is drawn, so the rows are shuffled here, once, or a batch would hold
    one instance's reactions only.
    """
    import datasets

    reactions = unpaired(training_pairs(cfg, chat, cache, run_dir))
    random.Random(cfg.trainer.seed).shuffle(reactions)
    return datasets.Dataset.from_list([reaction.to_row() for reaction in reactions])


class UnpairedCollator:
    """Labelled reaction rows → one KTO batch (the rows and their KL rows) rendered by the chat adapter."""

    def __init__(self, adapter: VideoChatAdapter):
        self.adapter = adapter

    def __call__(self, rows: list[dict]) -> dict:
        return unpaired_batch(self.adapter, [LabelledReaction.from_row(row) for row in rows])


class UnpairedTrainer(RenderedRowsTrainer, KTOTrainer):
    """TRL's KTOTrainer with the recipe's optimizer groups, sampler and clipping (RecipeTrainer) on
    labelled reaction rows that UnpairedCollator renders, the right reactions weighted up to balance the
    wrong ones (``balancing_weight``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.desirable_weight = balancing_weight(self.train_dataset["label"])
        self.args.desirable_weight = self.desirable_weight  # as trained, in the saved arguments


def balancing_weight(labels: list[bool]) -> float:
    """KTO's weight on the desirable rows' loss that balances the undesirable rows' (the KTO paper's Eq. 8:
    the weighted counts within [1, 4/3] of each other; here equal).

    Each instance gives its right reaction once and up to four wrong ones, about 3 wrong rows to a right one
    on OVI-Train; unweighted, pushing the wrong reactions down outweighs holding the right ones up, and the
    quickstart's model lost every answer (empty replies by step 200).
    """
    desirable = sum(labels)
    return (len(labels) - desirable) / max(desirable, 1)


KTO = PreferenceMethod(kto_arguments, unpaired_dataset, UnpairedCollator, UnpairedTrainer)
