"""``stage.preference``: the settings of DPO and KTO, beside the stages (train/preference.py).
``python -m train`` registers the dataclass as the schema of ``stage.preference``
(``train.stage_settings``), so a misspelt key or an unknown loss fails when the config is composed."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.choice import Choice
from core.vocab import ItemForm

# TRL's DPOConfig.loss_type values, as TRL names them.
DpoLoss = Choice(
    "DpoLoss",
    [
        (name, name)
        for name in (
            "sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
            "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm",
        )
    ],
    module=__name__,
)  # fmt: skip


@dataclass
class PreferenceConfig:
    """``stage.preference``: DPO's and KTO's settings (TRL's names)."""

    beta: float = 0.1  # how far the policy may move from the reference (the held-out pairs report at it)
    # dpo: TRL's DPOConfig.loss_type values, summed: [sigmoid] is DPO, [ipo] IPO, [sigmoid, sft] adds the
    # chosen reaction's NLL (RPO)
    loss_type: list[DpoLoss] = field(default_factory=lambda: [DpoLoss.sigmoid])
    # which pairs train (held-out metrics report both): open (the reaction itself) and/or mcq (the answer
    # letter and type over a wrong option's, which keeps the MCQ answer format trained)
    pair_forms: list[ItemForm] = field(default_factory=lambda: [ItemForm.open, ItemForm.mcq])
