"""The V2P rewards: the official first-character rule and a lone letter for multiple choice, the right
option's words for the open form (``meta["format"] == "open"``: the question without its options).
Completions are read raw, as the official rule reads them."""

from __future__ import annotations

import re

from core.answers import official_correct
from core.sample import Sample
from core.vocab import ItemForm
from train.rewards import text
from train.rewards.hacks import hacked, letters, options

_LONE_LETTER = re.compile(r"\s*([A-Z])\.?\s*")


def is_v2p(item: Sample, open_form: bool) -> bool:
    return item.task == "v2p" and (item.meta.get("format") == ItemForm.open) == open_form


def v2p_letter(completion: str, item: Sample) -> float | None:
    """V2P multiple choice, the official rule: 1 when the reply's first character is the answer letter (no
    stripping, no case folding: " B" and "b" are wrong for "B"; "B because …" is right), else 0."""
    if not is_v2p(item, open_form=False):
        return None
    if hacked(completion, item):
        return 0.0
    return float(official_correct(completion, item.meta["answer"]))


def v2p_format(completion: str, item: Sample) -> float | None:
    """V2P multiple choice: 1 when the reply is one of the item's option letters and nothing else (whitespace
    around it and one trailing period allowed: "B", " B.\\n"), right or wrong; else 0."""
    if not is_v2p(item, open_form=False):
        return None
    if hacked(completion, item):
        return 0.0
    match = _LONE_LETTER.fullmatch(completion)
    return float(bool(match) and match.group(1) in letters(item))


def v2p_words(completion: str, item: Sample) -> float | None:
    """V2P open form: 1 when the reply names the right option's text and no other option's, else 0.

    Named: the option's normalised words in a row, whole words ("1" names "one" but not "10"); an option's
    words inside a longer option's occurrence are not that option named (``text.named_options``).
    """
    if not is_v2p(item, open_form=True):
        return None
    if hacked(completion, item):
        return 0.0
    right = letters(item).index(item.meta["answer"])
    return float(text.named_options(text.words(completion), options(item)) == {right})
