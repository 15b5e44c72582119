"""What a preference pair is: one conversation ending with the right reaction to an interruption, and a wrong
one (DPO), or each reaction alone, labelled desirable or not (KTO). How pairs are made from OVI samples is a
builder's (data_builders/preferences.py); how they become model inputs is models/pairs.py's.

Both are stored as HF dataset rows: a :class:`~core.sample.Sample` row ending with the chosen reaction (or
the labelled one), plus the pair's fields (``rejected``, ``error``, ``behaviour``, ``source_rows``: the OVI
row ids it was made from; or ``label`` and ``error``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from core.sample import Part, Sample


def with_reaction(sample: Sample, text: str) -> Sample:
    """The same conversation ending with another reaction (``text``) as its final, trained turn."""
    last = replace(sample.turns[-1], parts=[Part.txt(text)])
    return replace(sample, turns=[*sample.turns[:-1], last])


@dataclass
class PreferencePair:
    """One pair: ``sample`` ends with the chosen reaction (the only turn with loss); ``rejected`` is the
    wrong reaction's text, ``error`` what it does wrong, ``source_rows`` the OVI rows it was made from."""

    sample: Sample
    rejected: str
    error: str
    behaviour: str
    source_rows: list[str]

    @property
    def id(self) -> str:
        return self.sample.id

    @property
    def interruption_type(self) -> str:
        return self.sample.meta["interruption_type"]

    @property
    def chosen(self) -> str:
        return self.sample.turns[-1].text

    def rejected_sample(self) -> Sample:
        """The same conversation ending with the rejected reaction instead."""
        return with_reaction(self.sample, self.rejected)

    def to_row(self) -> dict[str, Any]:
        return {
            **self.sample.to_row(),
            "rejected": self.rejected,
            "error": self.error,
            "behaviour": self.behaviour,
            "source_rows": json.dumps(self.source_rows),
        }

    @staticmethod
    def from_row(row: dict[str, Any]) -> PreferencePair:
        return PreferencePair(
            sample=Sample.from_row(row),
            rejected=row["rejected"],
            error=row["error"],
            behaviour=row["behaviour"],
            source_rows=json.loads(row["source_rows"]),
        )


@dataclass
class LabelledReaction:
    """One conversation ending with a reaction and whether it is the right one (KTO's unpaired data):
    ``sample`` ends with the reaction (its only turn with loss); ``error`` is what a wrong one does wrong
    (None for the right one), ``source_rows`` the OVI rows it was made from."""

    sample: Sample
    desirable: bool
    error: str | None
    source_rows: list[str]

    @property
    def id(self) -> str:
        return self.sample.id

    @property
    def reaction(self) -> str:
        return self.sample.turns[-1].text

    def to_row(self) -> dict[str, Any]:
        return {
            **self.sample.to_row(),
            "label": self.desirable,
            "error": self.error or "",
            "source_rows": json.dumps(self.source_rows),
        }

    @staticmethod
    def from_row(row: dict[str, Any]) -> LabelledReaction:
        return LabelledReaction(
            sample=Sample.from_row(row),
            desirable=bool(row["label"]),
            error=row["error"] or None,
            source_rows=json.loads(row["source_rows"]),
        )


def unpaired(pairs: Iterable[PreferencePair]) -> list[LabelledReaction]:
    """The pairs as KTO's unpaired data: each conversation with its right reaction once (desirable; id
    ``<instance>[-mcq]-chosen``) and each distinct wrong one (undesirable; the pair's id), in pair order."""
    reactions, seen = [], set()
    for pair in pairs:
        meta = {k: v for k, v in pair.sample.meta.items() if k != "error"}
        chosen = replace(pair.sample, id=pair.id.removesuffix(pair.error) + "chosen", meta=meta)
        for reaction in (
            LabelledReaction(chosen, True, None, pair.source_rows),
            LabelledReaction(pair.rejected_sample(), False, pair.error, pair.source_rows),
        ):
            conversation = reaction.sample.to_row()["messages"]
            if conversation not in seen:
                seen.add(conversation)
                reactions.append(reaction)
    return reactions
