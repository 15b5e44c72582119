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

from core.answers import official_correct, tolerant_letter
from core.decoding import MediaSpec
from core.sample import Part, Sample, Turn
from data_builders.visual_prompts import PROMPT_NOUNS
from data_builders.vp_variants import TargetsUnavailable, load_targets, target_phrase
from eval.benchmarks import v2p
from eval.benchmarks.base import Benchmark, Derived, Meta, SummaryContext

Z_OPTION = "Z: the video does not provide enough information"
Z_LETTERS = "ABCDZ"  # option letters when the Z option is offered

# Benchmark -> (title, what its numbers mean), for report.md.
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "v2p_blind": (
        "Blind (text only)",
        "Accuracy with neither video nor VP frame, against its own chance level (one over the item's "
        "options: 25–33% on four-to-three options); near chance means the questions need the video. Not "
        "comparable with the paper's 1.4–9.6%, a rate on the questions its blind filter kept.",
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


def _blind_items(samples: list[Sample], settings: v2p.V2PSettings) -> Derived:
    return Derived([blind(s) for s in samples])


def _z_items(samples: list[Sample], settings: v2p.V2PSettings) -> Derived:
    return Derived([with_z_option(s) for s in samples])


def _shuffled_items(samples: list[Sample], settings: v2p.V2PSettings) -> Derived:
    shuffled, left_out = shuffle_pairs(samples, settings.shuffle_seed)
    return Derived(
        shuffled, {"seed": settings.shuffle_seed, "n_left_out": len(left_out), "left_out": left_out}
    )


def _text_prompt_items(samples: list[Sample], settings: v2p.V2PSettings) -> Derived:
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


def _derived_summary(context: SummaryContext) -> dict[str, Any]:
    """The diagnostic's account of its items (what was left out, or why it was skipped)."""
    return {"derived": dict(context.info)}


def _shuffled_summary(context: SummaryContext) -> dict[str, Any]:
    """... and the frame count behind the hack ratio (it holds for one frame count)."""
    return {"derived": {**context.info, "frames": _frame_count(context.media)}}


def _text_prompt_summary(context: SummaryContext) -> dict[str, Any]:
    """... and text- vs visual-prompt accuracy on the same items, per model."""
    if "skipped" in context.info:
        return _derived_summary(context)
    pairs = {
        name: text_vs_visual(results.get("v2p", []), results.get("v2p_text_prompt", []))
        for name, results in context.scored.items()
    }
    return {"derived": {**context.info, "text_vs_visual": pairs}}


def _frame_count(media: MediaSpec) -> int | str:
    """Frames per video under ``media``: the hack ratio holds for one frame count."""
    if media.num_frames is not None:
        return media.num_frames
    return f"{media.fps:g} fps, at most {media.max_frames}"


def _text_prompt_logged(entry: dict[str, Any], name: str) -> dict[str, float]:
    """Text- and visual-prompt accuracy on the same items, for the model."""
    paired = entry.get("derived", {}).get("text_vs_visual", {}).get(name)
    if not paired or not paired["n"]:
        return {}
    return {
        "v2p_text_prompt/same_items/text_prompt": paired["text_prompt"],
        "v2p_text_prompt/same_items/visual_prompt": paired["visual_prompt"],
    }


# ---------------------------------------------------------------------------------------------------
# The report's line per diagnostic: its numbers (reference -> last model) and what they mean


def _report_line(name: str, show_numbers: Callable[[dict[str, Any], Callable[[str], str], tuple], str]):
    """The ``report_lines`` hook of the diagnostic ``name``, whose numbers ``show_numbers(entry, show,
    models)`` says."""

    def lines(entry: dict[str, Any], models: tuple[str, str | None]) -> list[str]:
        title, meaning = DESCRIPTIONS[name]
        info = entry.get("derived", {})
        if "skipped" in info:
            return [f"- **{title}** (`{name}`): {info['skipped']}."]
        show = _shown(entry.get("metrics", {}), models[1])
        left_out = f" {info['n_left_out']} item(s) left out." if info.get("n_left_out") else ""
        numbers = show_numbers(entry, show, models)
        return [f"- **{title}** (`{name}`, {info.get('n_items', 0)} items): {numbers}.{left_out} *{meaning}*"]

    return lines


def _shown(metrics: dict[str, Any], last: str | None) -> Callable[[str], str]:
    def show(key: str) -> str:
        metric = metrics.get(key)
        if metric is None:
            return "–"
        values = [_percent(metric["baseline"])]
        if last:
            point = metric["checkpoints"].get(last)
            values.append(_percent(point["value"] if point else None))
        return " → ".join(values)

    return show


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{round(value * 100, 1) + 0.0:.1f}"


def _accuracy_numbers(entry, show, models) -> str:
    return f"accuracy {show('accuracy')}"


def _z_numbers(entry, show, models) -> str:
    return f"accuracy {show('accuracy')}, Z chosen {show('z_rate')}"


def _shuffled_numbers(entry, show, models) -> str:
    buckets = [b for b in v2p.DURATIONS if f"hack_ratio/duration/{b}" in entry.get("metrics", {})]
    by_bucket = ", ".join(f"{b} {show(f'hack_ratio/duration/{b}')}" for b in buckets)
    frames = entry.get("derived", {}).get("frames", "?")
    return (
        f"refusal (Z) {show('refusal_rate')}, hack ratio {show('hack_ratio')} ({by_bucket}) "
        f"at {frames} frames per video"
    )


def _text_prompt_numbers(entry, show, models) -> str:
    pairs = entry.get("derived", {}).get("text_vs_visual", {})
    shown = [
        f"{name}: text {_percent(pair['text_prompt'])} vs visual {_percent(pair['visual_prompt'])}"
        for name, pair in pairs.items()
        if name in models and pair["n"]
    ]
    n = max((pair["n"] for pair in pairs.values()), default=0)
    return f"on the same {n} items, " + ("; ".join(shown) or "–")


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


def _shuffled_made_with(settings: v2p.V2PSettings) -> dict[str, Any]:
    # Recorded under its earlier name (eval.diagnostics_seed), so results stamped before keep their stamp.
    return {**v2p.made_with(settings), "diagnostics_seed": settings.shuffle_seed}


def _diagnostic(
    name: str,
    derive,
    numbers=_accuracy_numbers,
    score=v2p.score,
    categories=v2p.categories,
    made_with=v2p.made_with,
    metric_order=v2p.V2P.metric_order,
    summary=_derived_summary,
    logged=None,
) -> Benchmark:
    """A benchmark derived from V2P's items (same generation and settings, same reports), with its line in
    the report's Diagnostics section."""
    return Benchmark(
        name=name,
        version=1,
        title=f"V2P-Bench diagnostic: {DESCRIPTIONS[name][0]}",
        source="v2p",
        derive=derive,
        score=score,
        categories=categories,
        made_with=made_with,
        max_new_tokens=v2p.max_new_tokens,
        metric_order=metric_order,
        category_order=v2p.CATEGORY_ORDER,
        summary=summary,
        report_lines=_report_line(name, numbers),
        **({"logged": logged} if logged else {}),
    )


V2P_BLIND = _diagnostic("v2p_blind", _blind_items)
V2P_Z = _diagnostic(
    "v2p_z",
    _z_items,
    _z_numbers,
    score=score_with_z,
    metric_order=("accuracy", "accuracy_tolerant", "z_rate", "z_rate_tolerant"),
)
V2P_SHUFFLED = _diagnostic(
    "v2p_shuffled",
    _shuffled_items,
    _shuffled_numbers,
    score=score_shuffled,
    categories=_duration_only,
    made_with=_shuffled_made_with,
    metric_order=("refusal_rate", "refusal_rate_tolerant", "hack_ratio", "hack_ratio_tolerant"),
    summary=_shuffled_summary,
)
V2P_TEXT_PROMPT = _diagnostic(
    "v2p_text_prompt",
    _text_prompt_items,
    _text_prompt_numbers,
    summary=_text_prompt_summary,
    logged=_text_prompt_logged,
)
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
