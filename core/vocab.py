"""The closed vocabularies every package speaks: OVI interruption types, item forms, the phrase banks'
names, and the visual-prompt shapes. One spelling each; a mix or a table of them is keyed by these, never by
position."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from core.choice import Choice
from core.errors import ConfigError


class InterruptionType(str, Enum):
    """An OVI interruption type. Configs name a member by its key (``false_trigger``); rows, results and
    reports carry its value, the papers' spelling (``"False Trigger"``). The order is the reports'."""

    cancellation = "Cancellation"  # the user stops the answer: stop, at most a brief acknowledgement
    false_trigger = "False Trigger"  # an irrelevant signal: ignore it and continue seamlessly
    correction = "Correction"  # the user changes the question or a premise: answer the corrected one

    def __str__(self) -> str:
        return self.value


INTERRUPTION_TYPES: tuple[str, ...] = tuple(kind.value for kind in InterruptionType)


def by_type(weights: Mapping[Any, float]) -> dict[InterruptionType, float]:
    """A mapping keyed by interruption type, whatever spells its keys (a member, its name
    ``false_trigger`` or its value ``"False Trigger"``), with every type present (absent ones weigh 0).

    Raises:
        ConfigError: a key that names no interruption type.
    """
    keyed: dict[InterruptionType, float] = dict.fromkeys(InterruptionType, 0)
    for key, weight in weights.items():
        kind = InterruptionType.__members__.get(str(key)) or _by_value(key)
        keyed[kind] = weight
    return keyed


def _by_value(key: Any) -> InterruptionType:
    try:
        return InterruptionType(str(key))
    except ValueError:
        names = ", ".join(InterruptionType.__members__)
        raise ConfigError(f"{key!r} is not an interruption type (one of {names})") from None


# OVI-Train's mix of types as the paper builds it, Cancellation : Correction : False Trigger = 1 : 2 : 1; the
# paper's overall OVIBench values are means weighted by it (its Table 2 matches Tables 12-14 at this mix).
PAPER_MIX: dict[InterruptionType, int] = {
    InterruptionType.cancellation: 1,
    InterruptionType.correction: 2,
    InterruptionType.false_trigger: 1,
}


class ItemForm(Choice):
    """How an item is asked; a sample carries it as ``meta["format"]`` (an OVIBench row's ``format``). An
    OVI item is written in either form; a V2P item is multiple choice as released (no ``format`` in its
    meta), and GRPO also asks it open (``stage.grpo.v2p_forms``)."""

    mcq = "mcq"  # options to choose from (OVI: four continuations, and the interruption type to name)
    open = "open"  # answered in words (OVI: the reaction, scored by the judge; V2P: without its options)


ITEM_FORMS: tuple[str, ...] = tuple(form.value for form in ItemForm)


class Phrasing(Choice):
    """The phrase bank an OVI interruption's words came from, as a row records it (``phrasing``); the banks
    themselves are data_builders/phrasings.py's, keyed by these names."""

    train = "train"  # OVI-Train's
    eval = "eval"  # the OVIBench twin's
    paraphrased = "paraphrased"  # casual spoken wording, a share of the twin's items


PHRASINGS: tuple[str, ...] = tuple(bank.value for bank in Phrasing)


class PromptShape(Choice):
    """The 8 visual-prompt shapes of V2P-Bench."""

    rectangle = "rectangle"
    ellipse = "ellipse"
    triangle = "triangle"
    mask_contour = "mask_contour"  # a ring around the object's mask (its box's ellipse without one)
    scribble = "scribble"
    point = "point"
    arrow = "arrow"
    som = "som"  # a Set-of-Mark number tag


PROMPT_SHAPES: tuple[str, ...] = tuple(shape.value for shape in PromptShape)
# How a question names the object a prompt of each shape marks ("What colour is the box?").
PROMPT_NOUNS: dict[str, str] = {
    "rectangle": "the box",
    "ellipse": "the circle",
    "triangle": "the triangle",
    "mask_contour": "the contour",
    "scribble": "the scribble",
    "point": "the dot",
    "arrow": "the arrow",
    "som": "the number tag",
}
