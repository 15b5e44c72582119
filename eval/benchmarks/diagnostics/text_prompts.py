"""``v2p_text_prompt``: the V2P items with the marked target named in words ("the red circle") and the
VP frame removed, against the visual-prompt accuracy on the same items."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from core.sample import Part, Sample
from core.vocab import PROMPT_NOUNS
from data_builders.vp_variants import TargetsUnavailable, load_targets, target_phrase
from eval.benchmarks.base import Derived, SummaryContext
from eval.benchmarks.diagnostics.derived import (
    Description,
    derived_sample,
    derived_summary,
    diagnostic,
    percent,
    with_question,
)
from eval.benchmarks.v2p import V2PSettings

DESCRIPTION: Description = (
    "Text prompt vs visual prompt",
    "The marked target is named in words instead of drawn (VP frame removed), against the "
    "visual-prompt accuracy on the same items (paper, GPT-4o: 53.0 text vs 65.4 visual).",
)

_NO_WORDING = "no wording that is unique and names no option"
_NOUNS = "|".join(
    re.escape(noun.removeprefix("the ")) for noun in sorted(PROMPT_NOUNS.values(), key=len, reverse=True)
)
# "the object marked by the box", "the person pointed to by the red arrow": the drawn-prompt reference.
_VP_REFERENCE = re.compile(
    r"\bthe\s+\w+\s+(?:marked|indicated|highlighted|enclosed|circled|outlined|pointed\s+(?:to|at))\s+"
    rf"(?:by|with|in)\s+(?:the|an?)\s+(?:[\w-]+\s+){{0,2}}?(?:{_NOUNS})\b",
    re.IGNORECASE,
)


def text_prompt(sample: Sample, phrase: str) -> Sample:
    """The question with its drawn-prompt reference replaced by ``phrase``, and no VP frame.

    ``meta["visual_prompt_question"]`` keeps the original, so the item is still reported under the shape
    of its visual prompt.

    Raises:
        ValueError: the question has no reference to a drawn prompt, or still has one after rewriting.
    """
    question = sample.meta["question"]

    def words(match: re.Match[str]) -> str:
        return phrase[:1].upper() + phrase[1:] if match.group(0)[0].isupper() else phrase

    rewritten, count = _VP_REFERENCE.subn(words, question)
    if not count or re.search(r"\bmarked\s+(?:by|with)\b", rewritten, re.IGNORECASE):
        raise ValueError(f"{sample.id}: no rewritable visual-prompt reference in the question")
    derived = with_question(sample, rewritten)
    derived = derived_sample(derived, "text_prompt", f"text_prompt:{phrase}", parts=_drop_images)
    derived.meta.update(visual_prompt_question=question, target_phrase=phrase)
    return derived


def _drop_images(parts: list[Part]) -> list[Part]:
    return [part for part in parts if part.type != "image"]


def _text_prompt_items(samples: list[Sample], settings: V2PSettings) -> Derived:
    built, info = _text_prompt_benchmark(samples, settings.root)
    return Derived(built or [], info)


def _text_prompt_benchmark(
    samples: Sequence[Sample], release_root: str | Path | None
) -> tuple[list[Sample] | None, dict[str, Any]]:
    try:
        if release_root is None:
            raise TargetsUnavailable("no V2P release directory to read target attributes from")
        targets = load_targets(release_root)
    except TargetsUnavailable as err:
        return None, {"skipped": f"text_prompt skipped: {err}"}
    built, left_out = [], Counter()
    for sample in samples:
        target = targets.get(sample.id)
        phrase = target and target_phrase(target, avoid=sample.meta.get("options", []))
        if phrase is None:
            left_out["no target attributes" if target is None else _NO_WORDING] += 1
            continue
        try:
            built.append(text_prompt(sample, phrase))
        except ValueError:
            left_out["no visual-prompt reference in the question"] += 1
    return built, {"n_left_out": sum(left_out.values()), "left_out": dict(left_out)}


def text_vs_visual(visual: Iterable[dict], text: Iterable[dict]) -> dict[str, Any]:
    """Accuracy (official rule) of the text-prompt records and of the visual-prompt records of the same items.

    Args:
        visual: scored ``v2p`` records; text: scored ``v2p_text_prompt`` records (``eval.scored``).
    """
    by_id = {
        record["id"]: record["scores"]["accuracy"] for record in visual if "accuracy" in record["scores"]
    }
    pairs = [(r["scores"]["accuracy"], by_id[r["id"]]) for r in text if r["id"] in by_id]
    if not pairs:
        return {"n": 0, "text_prompt": None, "visual_prompt": None}
    return {
        "n": len(pairs),
        "text_prompt": sum(t for t, _ in pairs) / len(pairs),
        "visual_prompt": sum(v for _, v in pairs) / len(pairs),
    }


def _text_prompt_summary(context: SummaryContext) -> dict[str, Any]:
    """The diagnostic's account of its items and text- vs visual-prompt accuracy on the same items, per
    model."""
    if "skipped" in context.info:
        return derived_summary(context)
    pairs = {
        name: text_vs_visual(results.get("v2p", []), results.get("v2p_text_prompt", []))
        for name, results in context.scored.items()
    }
    return {"derived": {**context.info, "text_vs_visual": pairs}}


def _text_prompt_logged(entry: dict[str, Any], name: str) -> dict[str, float]:
    """Text- and visual-prompt accuracy on the same items, for the model."""
    paired = entry.get("derived", {}).get("text_vs_visual", {}).get(name)
    if not paired or not paired["n"]:
        return {}
    return {
        "v2p_text_prompt/same_items/text_prompt": paired["text_prompt"],
        "v2p_text_prompt/same_items/visual_prompt": paired["visual_prompt"],
    }


def _text_prompt_numbers(entry, show, models) -> str:
    pairs = entry.get("derived", {}).get("text_vs_visual", {})
    shown = [
        f"{name}: text {percent(pair['text_prompt'])} vs visual {percent(pair['visual_prompt'])}"
        for name, pair in pairs.items()
        if name in models and pair["n"]
    ]
    n = max((pair["n"] for pair in pairs.values()), default=0)
    return f"on the same {n} items, " + ("; ".join(shown) or "–")


V2P_TEXT_PROMPT = diagnostic(
    "v2p_text_prompt",
    DESCRIPTION,
    _text_prompt_items,
    _text_prompt_numbers,
    summary=_text_prompt_summary,
    logged=_text_prompt_logged,
)
