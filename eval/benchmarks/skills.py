"""Generic skills: the held-out questions the stand-in base model is measured on (not a paper's benchmark).

The items (``data_builders/generic_skills.py``) ask what a base model should already answer — colours,
shapes, counts, motion, order in time, presence, a short account of the clip, the rest of a sentence
about it, which listed word is a colour or a direction — in a sentence or by an option's letter, about
videos of a world of their own. The stand-in's build record reports these scores (``python -m train
+exp=standin``), and any model can be scored on them to see that tuning on drawn prompts and
interruptions kept its general skills.

Scoring needs no judge: a multiple-choice reply is right when it is the letter alone; an open reply
when it names every expected phrase and none of the rivals (the other values it could have said).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.sample import Sample
from core.vocab import ItemForm
from eval.benchmarks.base import Benchmark, Meta

KINDS = ("colour", "shape", "count", "motion", "order", "presence", "describe", "finish", "word_class")


@dataclass
class SkillsSettings:
    """``eval.settings.skills``: where the held-out items are, and how long an answer may be."""

    root: str | None = None  # a generic-skills build (its hf/ dataset)
    max_new_tokens: int = 48  # the longest open answer (an account of three objects) is ~35 tokens


def load(settings: SkillsSettings) -> list[Sample]:
    """The held-out items, as the builder saved them."""
    import datasets

    if not settings.root:
        raise ConfigError("eval.settings.skills.root is not set (a generic-skills build directory)")
    return [Sample.from_row(row) for row in datasets.load_from_disk(f"{settings.root}/hf")]


def _words(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()) + " "


def score(prediction: str, meta: Meta) -> dict[str, float]:
    """``accuracy``, 0/1: the option's letter alone, or a sentence naming every expected phrase and no
    rival."""
    prediction = prediction or ""
    if meta["format"] == ItemForm.mcq:
        return {"accuracy": float(prediction.strip().rstrip(".").strip() == meta["answer_letter"])}
    text = _words(prediction)
    said = [f" {phrase} " in text for phrase in meta["expected"]]
    rival = [f" {phrase} " in text for phrase in meta["rivals"]]
    return {"accuracy": float(all(said) and not any(rival))}


def categories(meta: Meta) -> dict[str, str]:
    """``kind`` (what is asked) and ``format`` (open or multiple choice)."""
    return {"kind": meta["kind"], "format": meta["format"]}


def max_new_tokens(meta: Meta, settings: SkillsSettings) -> int:
    return settings.max_new_tokens


def made_with(settings: SkillsSettings) -> dict[str, Any]:
    return {"max_new_tokens": settings.max_new_tokens}


SKILLS = Benchmark(
    name="skills",
    version=1,
    title="Generic skills (held out)",
    load=load,
    score=score,
    categories=categories,
    made_with=made_with,
    settings_class=SkillsSettings,
    max_new_tokens=max_new_tokens,
    headline=("accuracy",),
    category_order={"kind": KINDS, "format": tuple(map(str, ItemForm))},
    synthetic="skills_heldout",
)
