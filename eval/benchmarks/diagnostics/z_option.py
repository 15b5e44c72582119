"""``v2p_z``: the V2P items with an option ``Z: the video does not provide enough information`` appended,
scored for accuracy and for how often Z is chosen."""

from __future__ import annotations

import re

from core.answers import official_correct, tolerant_letter
from core.sample import Sample
from eval.benchmarks.base import Derived, Meta
from eval.benchmarks.diagnostics.derived import Description, diagnostic, with_question
from eval.benchmarks.v2p import V2PSettings

Z_OPTION = "Z: the video does not provide enough information"
Z_LETTERS = "ABCDZ"  # option letters when the Z option is offered

DESCRIPTION: Description = (
    "Z option",
    "Accuracy, and how often the added 'Z: the video does not provide enough information' is chosen "
    "on the real inputs; a high Z rate there is over-refusal.",
)

_OPTION_LINE = re.compile(r"^\s*[A-Z]:\s+\S", re.MULTILINE)


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
    derived = with_question(sample, "\n".join(lines))
    derived.meta.update(z_option=True, diagnostic="z_option", variant="z_option")
    return derived


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


def _z_items(samples: list[Sample], settings: V2PSettings) -> Derived:
    return Derived([with_z_option(s) for s in samples])


def _z_numbers(entry, show, models) -> str:
    return f"accuracy {show('accuracy')}, Z chosen {show('z_rate')}"


V2P_Z = diagnostic(
    "v2p_z",
    DESCRIPTION,
    _z_items,
    _z_numbers,
    score=score_with_z,
    metric_order=("accuracy", "accuracy_tolerant", "z_rate", "z_rate_tolerant"),
)
