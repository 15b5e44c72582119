"""Held-out preference pairs (OVIBench): how often a model prefers the right reaction to an interruption
over a wrong one (open form), or the right answer letter and type over a wrong option's (MCQ form).

A log-likelihood benchmark: each item is one pair made from an OVIBench item never trained on
(``data_builders.preferences``: the right reaction over each wrong one, labelled by what it does wrong);
the model gives the summed log-probability of the chosen and of the rejected completion, and the item
counts as right when the chosen one is more likely. Reported overall, per interruption type and per form,
against the run's first model (its baseline: for a preference training, the starting model) with paired
bootstrap intervals, like every benchmark.

``reward_accuracy`` and ``margin`` (with ``beta``, which a preference training sets to its stage's): the
implicit reward of a preference training, beta x the log-ratio to the reference; the reference is the
starting model, whose log-probabilities are the baseline's, so the margin is
``beta x ((chosen - chosen_ref) - (rejected - rejected_ref))`` and reward accuracy the share of pairs where
it is positive. Needs the model's log-probabilities: a served model does not score it (``NotServed``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from core.errors import ConfigError
from core.formats.ovi import load_ovibench
from core.pairs import PreferencePair, with_reaction
from core.sample import Sample
from core.vocab import INTERRUPTION_TYPES, ITEM_FORMS
from data_builders.preferences import pairs_from_samples
from eval.benchmarks.base import Benchmark, Kind, Meta
from eval.benchmarks.ovi import viewer_timeline


@dataclass
class OviPairsSettings:
    """``eval.settings.ovi_pairs``."""

    root: str | None = None  # an OVIBench directory (ovibench.jsonl, videos/), never trained on
    # the implicit reward's beta (DPO and KTO set their stage.preference.beta); null: accuracy and its delta
    beta: float | None = None


def load(settings: OviPairsSettings) -> list[Sample]:
    """One item per pair of every OVIBench item (pairs are two forwards: ``eval.limit`` bounds them too)."""
    if not settings.root:
        raise ConfigError("eval.settings.ovi_pairs.root is not set (an OVIBench directory)")
    return [as_item(pair) for pair in pairs_from_samples(load_ovibench(settings.root), settings.root).pairs]


def as_item(pair: PreferencePair) -> Sample:
    """The pair as one benchmark item: its chosen conversation, with the rejected reaction and what it does
    wrong in ``meta`` (so a change to either is a changed item, predicted again)."""
    meta = {**pair.sample.meta, "rejected": pair.rejected, "error": pair.error, "behaviour": pair.behaviour}
    return replace(pair.sample, meta=meta)


def requests(item: Sample) -> list[Sample]:
    """The chosen conversation, then the same conversation ending with the rejected reaction."""
    return [item, with_reaction(item, item.meta["rejected"])]


def score(prediction: list[float], meta: Meta) -> dict[str, float]:
    """``accuracy``: 1 when the chosen completion is more likely than the rejected one."""
    chosen, rejected = prediction
    return {"accuracy": float(chosen > rejected)}


def reward(prediction: list[float], reference: list[float], settings: OviPairsSettings) -> dict[str, float]:
    """The implicit reward against the reference's log-probabilities (with ``beta`` only)."""
    if settings.beta is None:
        return {}
    (chosen, rejected), (chosen_ref, rejected_ref) = prediction, reference
    margin = settings.beta * ((chosen - chosen_ref) - (rejected - rejected_ref))
    return {"reward_accuracy": float(margin > 0), "margin": margin}


def categories(meta: Meta) -> dict[str, str]:
    return {"type": meta["interruption_type"], "form": meta["format"]}


def made_with(settings: OviPairsSettings) -> dict[str, Any]:
    return {}  # beta changes the scores read from the log-probabilities, not the log-probabilities


def notes(settings: OviPairsSettings) -> dict[str, Any]:
    if settings.beta is None:
        return {"reward": "reward accuracy and margin: only for a preference training's checkpoints"}
    return {
        "reward": f"reward accuracy and margin: the implicit reward (beta {settings.beta}) against the "
        "run's first model, the starting model"
    }


OVI_PAIRS = Benchmark(
    name="ovi_pairs",
    version=1,
    title="Held-out preference pairs (OVIBench)",
    kind=Kind.loglikelihood,
    load=load,
    requests=requests,
    score=score,
    relative=reward,
    categories=categories,
    made_with=made_with,
    settings_class=OviPairsSettings,
    headline=("accuracy", *(f"accuracy/type/{kind}" for kind in INTERRUPTION_TYPES)),
    graded=frozenset({"margin"}),
    metric_order=("accuracy", "reward_accuracy", "margin"),
    category_order={"type": INTERRUPTION_TYPES, "form": ITEM_FORMS},
    notes=notes,
    viewer_item=viewer_timeline,  # each pair is an OVIBench item: its timeline
    synthetic="ovibench",
)
