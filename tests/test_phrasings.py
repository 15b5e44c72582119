"""Phrase banks: their sizes, their disjointness, and that a training build never speaks held-out words."""

from __future__ import annotations

import json
import re
from itertools import permutations
from pathlib import Path

import pytest

from core.vocab import PHRASINGS
from data_builders.phrasings import BANKS, EVAL, PARAPHRASED, PhraseBank, Phrasings, normalised, phrased_by

# Slot texts as the builder fills them: an object's name, a window's start and end, a question.
SLOTS = {"correction_object": ("red circle",), "correction_time": ("2.0", "4.5")}
QUESTION = "What happens in the video between 1.0 s and 4.0 s?"


def _made(bank: Phrasings) -> list[str]:
    """Every text the bank makes: its plain phrasings, and each template with slot texts filled in."""
    texts = [*bank.cancellations, *bank.false_triggers, *bank.acknowledgements, *bank.fallbacks]
    for kind, slots in SLOTS.items():
        texts += [template.format(*slots) for template in getattr(bank, kind)]
    return texts + [bank.question(template, QUESTION) for template in bank.correction_question]


@pytest.mark.parametrize("name", sorted(BANKS))
def test_each_bank_has_at_least_20_utterances_per_type_and_10_acknowledgements(name: str):
    bank = BANKS[name]
    assert {kind: len(set(texts)) >= 20 for kind, texts in bank.utterances.items()} == dict.fromkeys(
        ("Cancellation", "False Trigger", "Correction"), True
    )
    assert all(len(templates) >= 6 for templates in (bank.correction_object, bank.correction_time))
    assert len(bank.correction_question) >= 6 and len(set(bank.acknowledgements)) >= 10
    assert len(bank.fallbacks) >= 2
    normalised_phrasings = [normalised(p) for p in bank.phrasings]
    assert len(set(normalised_phrasings)) == len(normalised_phrasings)  # no phrasing twice


@pytest.mark.parametrize(("name", "other"), list(permutations(sorted(BANKS), 2)))
def test_no_phrasing_in_two_banks(name: str, other: str):
    assert not {normalised(p) for p in BANKS[name].phrasings} & {
        normalised(p) for p in BANKS[other].phrasings
    }
    # Nor does a template of one bank make what another bank says.
    made = [(text, p) for text in _made(BANKS[name]) for p in BANKS[other].phrasings if phrased_by(text, p)]
    assert not made


def _words(text: str) -> list[str]:
    return re.findall(r"\{\}|[a-z0-9']+", text.replace("’", "'").replace("-", " ").lower())


@pytest.mark.parametrize(("name", "other"), list(permutations(sorted(BANKS), 2)))
def test_no_phrasing_of_one_bank_lies_inside_another_banks(name: str, other: str):
    """Disjoint as whole strings was not enough: train's "Go on." sat inside the paraphrased "mmm go on",
    train's "Okay." inside eval's "Uh, okay.", so a held-out phrasing carried a trained one whole."""

    def inside(small: list[str], big: list[str]) -> bool:
        return any(big[i : i + len(small)] == small for i in range(len(big) - len(small) + 1))

    found = [
        (p, q) for p in BANKS[name].phrasings for q in BANKS[other].phrasings if inside(_words(p), _words(q))
    ]
    assert not found


def test_bank_names_are_the_row_phrasings_and_a_build_picks_train_or_eval():
    assert tuple(BANKS) == PHRASINGS
    assert {bank.value for bank in PhraseBank} == {"train", "eval"}


def test_the_paraphrased_bank_speaks_casually():
    assert EVAL.question("New question: {}", QUESTION) == f"New question: {QUESTION}"
    spoken = PARAPHRASED.question("um scratch that uh {}", QUESTION)
    assert spoken == "um scratch that uh what happens in the video between 1.0 s and 4.0 s"
    assert PARAPHRASED.question("oh wait actually {}", "I wonder: is it red?") == (
        "oh wait actually I wonder: is it red"
    )
    lower_case = [u for texts in PARAPHRASED.utterances.values() for u in texts if u == u.lower()]
    assert len(lower_case) == sum(map(len, PARAPHRASED.utterances.values()))


def test_phrased_by_compares_normalised_and_fills_slots():
    assert phrased_by("ok, you can END it there", "OK, you can end it there.")
    assert phrased_by("Sorry, I meant the blue square.", "Sorry, I meant the {}.")
    assert not phrased_by("Sorry, I meant the blue square.", "I meant the {}.")
    assert not phrased_by("Sorry, I meant the .", "Sorry, I meant the {}.")  # a slot is never empty


def _rows(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "ovibench.jsonl").read_text().splitlines()]


def test_a_training_build_never_speaks_held_out_words(synthetic_build):
    held_out = EVAL.phrasings + PARAPHRASED.phrasings
    rows = _rows(synthetic_build.ovi_train.parent)
    assert rows and {r["phrasing"] for r in rows} == {"train"}
    for row in rows:
        for text in (row["interruption"], row["reference_reaction"], *row.get("options", [])):
            assert not [p for p in held_out if phrased_by(text, p)], (row["id"], text)


def test_the_synthetic_twin_speaks_eval_and_paraphrased_words_and_says_so(synthetic_build):
    rows = _rows(synthetic_build.ovibench)
    assert {r["phrasing"] for r in rows} == {"eval", "paraphrased"}
    info = json.loads((synthetic_build.ovibench / "build_info.json").read_text())
    assert info["settings"]["phrasings"]["bank"] == "eval" and info["settings"]["phrasings"]["version"] >= 1
    assert sum(info["by_phrasing"].values()) == len(rows)
