"""V2P-Bench hack diagnostics: benchmarks derived from the V2P items.

The V2P-Bench paper probes whether a model answers from the evidence or guesses; its authors released no
code for it, so each transform here is *our reconstruction* of the paper's description. Every diagnostic is
a copy of the (media-checked) V2P items, same ids, evaluated as one more benchmark, so per-item results,
resume, ``summary.json``, deltas against the baseline and W&B logging apply unchanged:

===================  ===========================================================================
benchmark            the copy
===================  ===========================================================================
``v2p_blind``        text only: no video, no visual-prompt (VP) frame
``v2p_z``            an option ``Z: the video does not provide enough information`` appended
``v2p_shuffled``     the video and VP frame of another item in the same duration bucket, with the Z
                     option: the refusal rate and the hack ratio
``v2p_text_prompt``  the target named in words ("the red circle"), VP frame removed
===================  ===========================================================================

The transforms are pure functions ``Sample -> Sample``; each benchmark below derives its items from the
V2P items with one of them.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.config import EvalConfig
from core.decoding import MediaSpec
from core.sample import Part, Sample, Turn
from data_builders.visual_prompts import PROMPT_NOUNS
from data_builders.vp_variants import TargetsUnavailable, load_targets, target_phrase
from eval.answers import official_correct, tolerant_letter
from eval.benchmarks import v2p
from eval.benchmarks.base import Benchmark, Derived, Meta

Z_OPTION = "Z: the video does not provide enough information"
Z_LETTERS = "ABCDZ"  # option letters when the Z option is offered

# Benchmark -> (title, what its numbers mean), for report.md.
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "v2p_blind": (
        "Blind (text only)",
        "Accuracy with neither video nor VP frame; near chance means the questions need the video "
        "(paper: 1.4–9.6%).",
    ),
    "v2p_z": (
        "Z option",
        "Accuracy, and how often the added 'Z: the video does not provide enough information' is chosen "
        "on the real inputs; a high Z rate there is over-refusal.",
    ),
    "v2p_shuffled": (
        "Shuffled pairs",
        "Each question gets another video of its duration bucket (plus the Z option): the refusal rate is "
        "how often Z is chosen, the hack ratio how often the original answer is still picked without its "
        "evidence (paper, Qwen2.5-VL-7B: refusal 6.4%; hack ratio 11.1/23.0/33.8% short/medium/long at "
        "4 frames).",
    ),
    "v2p_text_prompt": (
        "Text prompt vs visual prompt",
        "The marked target is named in words instead of drawn (VP frame removed), against the "
        "visual-prompt accuracy on the same items (paper, GPT-4o: 53.0 text vs 65.4 visual).",
    ),
}

_NO_WORDING = "no wording that is unique and names no option"
_OPTION_LINE = re.compile(r"^\s*[A-Z]:\s+\S", re.MULTILINE)
_NOUNS = "|".join(
    re.escape(noun.removeprefix("the ")) for noun in sorted(PROMPT_NOUNS.values(), key=len, reverse=True)
)
# "the object marked by the box", "the person pointed to by the red arrow": the drawn-prompt reference.
_VP_REFERENCE = re.compile(
    r"\bthe\s+\w+\s+(?:marked|indicated|highlighted|enclosed|circled|outlined|pointed\s+(?:to|at))\s+"
    rf"(?:by|with|in)\s+(?:the|an?)\s+(?:[\w-]+\s+){{0,2}}?(?:{_NOUNS})\b",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------------
# Transforms: Sample -> Sample


def blind(sample: Sample) -> Sample:
    """Text only: the user turns lose their video and image parts."""
    return _derive(sample, "blind", "blind", parts=lambda parts: [p for p in parts if p.type == "text"])


def with_z_option(sample: Sample) -> Sample:
    """The question with ``Z: …`` after its last option line (before the instruction line, when there is
    one).

    Raises:
        ValueError: the question has no option line.
    """
    question = sample.meta["question"]
    lines = question.split("\n")
    options = [i for i, line in enumerate(lines) if _OPTION_LINE.match(line)]
    if not options:
        raise ValueError(f"{sample.id}: no option line to add the Z option after")
    lines.insert(options[-1] + 1, Z_OPTION)
    derived = _with_question(sample, "\n".join(lines))
    derived.meta.update(z_option=True, diagnostic="z_option", variant="z_option")
    return derived


def with_visual_input_of(sample: Sample, donor: Sample) -> Sample:
    """``sample``'s question (with the Z option) over ``donor``'s video and VP frame(s).

    The VP frame goes with the video: it is a frame of that video, so keeping the question's own frame
    would leave the evidence in the input.
    """
    media = [p for turn in donor.turns if turn.role == "user" for p in turn.parts if p.type != "text"]

    def swap(parts: list[Part]) -> list[Part]:
        out, placed = [], set()
        for part in parts:
            if part.type == "text":
                out.append(part)
            elif part.type not in placed:  # each kind of media goes where the first of its kind was
                placed.add(part.type)
                out += [p for p in media if p.type == part.type]
        return out

    shuffled = _derive(with_z_option(sample), "shuffled", f"shuffled:{donor.id}", parts=swap)
    shuffled.meta.update(visual_input_of=donor.id, donor_duration=donor.meta.get("duration"))
    return shuffled


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
    derived = _with_question(sample, rewritten)
    derived = _derive(derived, "text_prompt", f"text_prompt:{phrase}", parts=_drop_images)
    derived.meta.update(visual_prompt_question=question, target_phrase=phrase)
    return derived


def shuffle_pairs(samples: Sequence[Sample], seed: int) -> tuple[list[Sample], list[str]]:
    """Every sample over another sample's video, both in the same duration bucket (with the Z option).

    Deterministic for a seed. No sample keeps its own video (nor another item's copy of it): within a
    bucket the items are grouped by video, the groups and their members shuffled, and item ``i`` takes
    the visual input of item ``i + m`` (cyclically), ``m`` being the largest group's size. That moves every
    item off its video when no video holds more than half of the bucket; otherwise the surplus of the
    largest groups is left out.

    Returns:
        ``(shuffled samples in input order, ids left out because they could not be paired)``.
    """
    buckets: dict[str, dict[str, list[Sample]]] = {}
    for sample in samples:
        bucket = v2p.duration_bucket(float(sample.meta["duration"]))
        buckets.setdefault(bucket, {}).setdefault(_video_key(sample), []).append(sample)
    donors: dict[str, Sample] = {}
    left_out: list[str] = []
    for bucket, groups in buckets.items():
        rng = random.Random(f"{seed}:{bucket}")  # str seeds are stable across runs and platforms
        ordered = [list(groups[key]) for key in sorted(groups)]
        rng.shuffle(ordered)
        for group in ordered:
            rng.shuffle(group)
        left_out += _trim(ordered)
        items = [sample for group in ordered for sample in group]
        shift = max((len(group) for group in ordered), default=0)
        for i, sample in enumerate(items):
            donors[sample.id] = items[(i + shift) % len(items)]
    shuffled = [with_visual_input_of(s, donors[s.id]) for s in samples if s.id in donors]
    return shuffled, left_out


def _trim(groups: list[list[Sample]]) -> list[str]:
    """Drop items from the largest groups until none holds more than half; return the dropped ids."""
    dropped = []
    while groups and 2 * max(map(len, groups)) > sum(map(len, groups)):
        largest = max(groups, key=len)
        dropped.append(largest.pop().id)
        groups[:] = [group for group in groups if group]
    return dropped


# ---------------------------------------------------------------------------------------------------
# Derivations: V2P items -> the diagnostic's items


def _blind_items(samples: list[Sample], cfg: EvalConfig) -> Derived:
    return Derived([blind(s) for s in samples])


def _z_items(samples: list[Sample], cfg: EvalConfig) -> Derived:
    return Derived([with_z_option(s) for s in samples])


def _shuffled_items(samples: list[Sample], cfg: EvalConfig) -> Derived:
    shuffled, left_out = shuffle_pairs(samples, cfg.diagnostics_seed)
    return Derived(
        shuffled, {"seed": cfg.diagnostics_seed, "n_left_out": len(left_out), "left_out": left_out}
    )


def _text_prompt_items(samples: list[Sample], cfg: EvalConfig) -> Derived:
    built, info = _text_prompt_benchmark(samples, cfg.v2p_root)
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


def summary_entry(
    info: dict[str, dict[str, Any]], scored: dict[str, dict[str, list[dict]]], media: MediaSpec
) -> dict[str, dict[str, Any]]:
    """The summary's ``diagnostics`` entry: per diagnostic what was left out (or why it was skipped), the
    frame count behind the hack ratio, and text- vs visual-prompt accuracy per model.

    Args:
        info: per diagnostic benchmark, what its derivation said.
        scored: per model name (the baseline first), its scored records per benchmark.
        media: the run's media spec.
    """
    entry = {bench: dict(found) for bench, found in info.items()}
    if "v2p_shuffled" in entry:
        entry["v2p_shuffled"]["frames"] = _frame_count(media)
    if "v2p_text_prompt" in entry and "skipped" not in entry["v2p_text_prompt"]:
        entry["v2p_text_prompt"]["text_vs_visual"] = {
            name: text_vs_visual(results.get("v2p", []), results.get("v2p_text_prompt", []))
            for name, results in scored.items()
        }
    return entry


def _frame_count(media: MediaSpec) -> int | str:
    """Frames per video under ``media``: the hack ratio holds for one frame count."""
    if media.num_frames is not None:
        return media.num_frames
    return f"{media.fps:g} fps, at most {media.max_frames}"


# ---------------------------------------------------------------------------------------------------
# Scores


def score_with_z(prediction: str, meta: Meta) -> dict[str, float]:
    """V2P's accuracy (the tolerant rule reading A–D and Z), and ``z_rate``: how often Z is chosen."""
    prediction = prediction or ""
    letter = tolerant_letter(prediction, letters=Z_LETTERS)
    return {
        "accuracy": float(official_correct(prediction, meta["answer"])),
        "accuracy_tolerant": float(letter == meta["answer"]),
        "z_rate": float(official_correct(prediction, "Z")),
        "z_rate_tolerant": float(letter == "Z"),
    }


def score_shuffled(prediction: str, meta: Meta) -> dict[str, float]:
    """``refusal_rate`` (Z chosen) and ``hack_ratio`` (the original answer still chosen, though the input
    cannot hold its evidence). No accuracy: there is no right answer to that input."""
    scores = score_with_z(prediction, meta)
    return {
        "refusal_rate": scores["z_rate"],
        "refusal_rate_tolerant": scores["z_rate_tolerant"],
        "hack_ratio": scores["accuracy"],
        "hack_ratio_tolerant": scores["accuracy_tolerant"],
    }


def _duration_only(meta: Meta) -> dict[str, str]:
    return {"duration": v2p.duration_bucket(float(meta["duration"]))}  # the hack ratio is read by bucket


def _shuffled_settings(cfg: EvalConfig) -> dict[str, Any]:
    return {**v2p.settings(cfg), "diagnostics_seed": cfg.diagnostics_seed}


def _diagnostic(name: str, derive, score=v2p.score, categories=v2p.categories, settings=v2p.settings):
    """A benchmark derived from V2P's items (same generation, same reports)."""
    return Benchmark(
        name=name,
        version=1,
        title=f"V2P-Bench diagnostic: {DESCRIPTIONS[name][0]}",
        source="v2p",
        derive=derive,
        score=score,
        categories=categories,
        max_new_tokens=v2p.max_new_tokens,
        settings=settings,
        category_order=v2p.CATEGORY_ORDER,
    )


V2P_BLIND = _diagnostic("v2p_blind", _blind_items)
V2P_Z = _diagnostic("v2p_z", _z_items, score=score_with_z)
V2P_SHUFFLED = _diagnostic(
    "v2p_shuffled", _shuffled_items, score_shuffled, _duration_only, settings=_shuffled_settings
)
V2P_TEXT_PROMPT = _diagnostic("v2p_text_prompt", _text_prompt_items)


# ---------------------------------------------------------------------------------------------------
# Helpers


def _derive(
    sample: Sample, diagnostic: str, variant: str, *, parts: Callable[[list[Part]], list[Part]]
) -> Sample:
    """A copy with its user turns' parts mapped by ``parts`` and the diagnostic named in ``meta``.

    ``meta["variant"]`` tells a resumed evaluation whether a stored result was made from this very input.
    """
    meta = {**sample.meta, "diagnostic": diagnostic, "variant": variant}
    return replace(sample, turns=_map_user_parts(sample, parts), meta=meta)


def _with_question(sample: Sample, question: str) -> Sample:
    """A copy whose question text part (and ``meta["question"]``) is ``question``."""
    old = sample.meta["question"]

    def swap(part: Part) -> Part:
        return Part.txt(question) if part.type == "text" and part.text == old else part

    turns = _map_user_parts(sample, lambda parts: [swap(p) for p in parts])
    return replace(sample, turns=turns, meta={**sample.meta, "question": question})


def _map_user_parts(sample: Sample, parts: Callable[[list[Part]], list[Part]]) -> list[Turn]:
    """New turns: the user turns' parts mapped by ``parts``, the other turns' parts shared (never mutated)."""
    return [Turn(t.role, parts(list(t.parts)) if t.role == "user" else t.parts, t.loss) for t in sample.turns]


def _drop_images(parts: list[Part]) -> list[Part]:
    return [part for part in parts if part.type != "image"]


def _video_key(sample: Sample) -> str:
    """The video an item is asked about: its video file (several items share one)."""
    paths = [p.path for t in sample.turns for p in t.parts if p.type == "video" and p.path]
    return paths[0] if paths else str(sample.meta.get("video_id", sample.source_id))
