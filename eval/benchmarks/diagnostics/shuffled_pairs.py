"""``v2p_shuffled``: each V2P question over the video and VP frame of another item in the same duration
bucket, with the Z option, scored for the refusal rate and the hack ratio."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from core.decoding import MediaSpec
from core.sample import Part, Sample
from eval.benchmarks.base import Derived, Meta, SummaryContext
from eval.benchmarks.diagnostics.derived import Description, derived_sample, diagnostic
from eval.benchmarks.diagnostics.z_option import score_with_z, with_z_option
from eval.benchmarks.v2p import DURATIONS, V2P, V2PSettings, duration_bucket

DESCRIPTION: Description = (
    "Shuffled pairs",
    "Each question gets another video of its duration bucket (plus the Z option): the refusal rate is "
    "how often Z is chosen, the hack ratio how often the original answer is still picked without its "
    "evidence (paper, Qwen2.5-VL-7B: refusal 6.4%; hack ratio 11.1/23.0/33.8% short/medium/long at "
    "4 frames).",
)


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

    shuffled = derived_sample(with_z_option(sample), "shuffled", f"shuffled:{donor.id}", parts=swap)
    shuffled.meta.update(visual_input_of=donor.id, donor_duration=donor.meta.get("duration"))
    return shuffled


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
        bucket = duration_bucket(float(sample.meta["duration"]))
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


def _video_key(sample: Sample) -> str:
    """The video an item is asked about: its video file (several items share one)."""
    paths = [p.path for t in sample.turns for p in t.parts if p.type == "video" and p.path]
    return paths[0] if paths else str(sample.meta.get("video_id", sample.source_id))


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


def _shuffled_items(samples: list[Sample], settings: V2PSettings) -> Derived:
    shuffled, left_out = shuffle_pairs(samples, settings.shuffle_seed)
    return Derived(
        shuffled, {"seed": settings.shuffle_seed, "n_left_out": len(left_out), "left_out": left_out}
    )


def _shuffled_summary(context: SummaryContext) -> dict[str, Any]:
    """The diagnostic's account of its items and the frame count behind the hack ratio (it holds for one
    frame count)."""
    return {"derived": {**context.info, "frames": _frame_count(context.media)}}


def _frame_count(media: MediaSpec) -> int | str:
    """Frames per video under ``media``: the hack ratio holds for one frame count."""
    if media.num_frames is not None:
        return media.num_frames
    return f"{media.fps:g} fps, at most {media.max_frames}"


def _shuffled_numbers(entry, show, models) -> str:
    buckets = [b for b in DURATIONS if f"hack_ratio/duration/{b}" in entry.get("metrics", {})]
    by_bucket = ", ".join(f"{b} {show(f'hack_ratio/duration/{b}')}" for b in buckets)
    frames = entry.get("derived", {}).get("frames", "?")
    return (
        f"refusal (Z) {show('refusal_rate')}, hack ratio {show('hack_ratio')} ({by_bucket}) "
        f"at {frames} frames per video"
    )


def _duration_only(meta: Meta) -> dict[str, str]:
    return {"duration": duration_bucket(float(meta["duration"]))}  # the hack ratio is read by bucket


def _shuffled_made_with(settings: V2PSettings) -> dict[str, Any]:
    # Recorded under its earlier name (eval.diagnostics_seed), so results stamped before keep their stamp.
    return {**V2P.made_with(settings), "diagnostics_seed": settings.shuffle_seed}


V2P_SHUFFLED = diagnostic(
    "v2p_shuffled",
    DESCRIPTION,
    _shuffled_items,
    _shuffled_numbers,
    score=score_shuffled,
    categories=_duration_only,
    made_with=_shuffled_made_with,
    metric_order=("refusal_rate", "refusal_rate_tolerant", "hack_ratio", "hack_ratio_tolerant"),
    summary=_shuffled_summary,
)
