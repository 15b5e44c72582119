"""The OVIBench judge metrics as data, and the prompt that asks an LLM judge for one of them.

Six metrics score an open-ended reaction to an interruption (seed 003, the OVIBench paper):

- ``iac`` and ``ifa``: binary (0/1). The paper gives no definitions; ours are reconstructed
  (shared/spec/benchmarks.md §2): IAC = the reaction's *class* is right for the interruption type
  (stop / ignore-and-continue / revise); IFA = the *whole* response actually follows the interruption.
- ``tfs``, ``ves``, ``cfs``, ``ccs``: 1–10, with the paper's rubric text (tables 5–8) quoted verbatim
  and its score caps (tables 9–11) given to the judge as rules to apply.

Which metrics apply to which interruption type (``APPLIES_TO``) is our choice, documented there. Any
change to a definition, a rubric, a cap or the prompt wording must bump ``RUBRIC_VERSION``: the judge
cache is keyed by it, and judgements made under different versions must never be mixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUBRIC_VERSION = "ovi-3"  # 3: answers that ended before their interruption called finished; IFA not nested

Scale = tuple[int, int]
BINARY: Scale = (0, 1)
TEN_POINT: Scale = (1, 10)

CANCELLATION, FALSE_TRIGGER, CORRECTION = "Cancellation", "False Trigger", "Correction"
ALL_TYPES = (CANCELLATION, FALSE_TRIGGER, CORRECTION)

# What the right reaction is for each type (benchmarks.md §2); shown to the judge for every metric.
TYPE_REACTIONS: dict[str, str] = {
    CANCELLATION: (
        'the user stops the answer ("stop", "never mind"): the right reaction is to STOP, with at most a '
        "brief acknowledgement, and not to go on with the old content."
    ),
    FALSE_TRIGGER: (
        'an irrelevant signal (a back-channel "uh-huh", talk to someone else, noise): the right reaction '
        "is to IGNORE it and CONTINUE the original answer seamlessly, without repeating what was said."
    ),
    CORRECTION: (
        'the user changes the question or a premise ("I meant the red car"): the right reaction is to '
        "REVISE: drop the old conclusion and answer the corrected question from the video seen so far."
    ),
}


@dataclass(frozen=True)
class Metric:
    """One judged metric.

    Attributes:
        name: the score key (lower case, e.g. ``"tfs"``).
        title: the name shown to the judge.
        scale: ``BINARY`` or ``TEN_POINT``.
        definition: what the metric measures.
        levels: ``(score, criterion)`` pairs, highest first.
        caps: ``(condition, maximum score)`` pairs; a cap applies whenever its condition holds.
        source: where the text comes from (paper tables, or "reconstructed").
        classes: a classification metric: the judge names one of these (the interruption types), blind
            to the item's own type, and the item scores 1 when it names the right one.
    """

    name: str
    title: str
    scale: Scale
    definition: str
    levels: tuple[tuple[int, str], ...]
    caps: tuple[tuple[str, int], ...] = ()
    source: str = ""
    classes: tuple[str, ...] = ()


# Tables 5–8 publish criteria for 10 down to 5 only. Below 5 the paper's caps decide; this sentence
# (ours) tells the judge what to do when a response falls short of level 5 and no cap names the fault.
_BELOW_FIVE = (
    "A response that does not meet even the level-5 criterion scores from 1 to 4, lower the worse it is "
    "(the rubric publishes no text for these levels)."
)

IAC = Metric(
    name="iac",
    title="IAC (reaction class, binary)",
    scale=BINARY,
    definition=(
        "Is the CLASS of the reaction right for the interruption type? Cancellation -> the response "
        "stops; False Trigger -> it ignores the interruption and continues the original answer; "
        "Correction -> it revises and addresses the corrected question. Judge only the class of the "
        "reaction, not its quality, fluency or factual accuracy."
    ),
    levels=(
        (1, "The reaction's class (stop / ignore-and-continue / revise) matches the interruption type."),
        (
            0,
            "The reaction's class is wrong (e.g. stops on a false trigger, continues after a cancellation, "
            "keeps answering the old question after a correction).",
        ),
    ),
    source="reconstructed (benchmarks.md §2); the paper gives no definition",
)

IFA = Metric(
    name="ifa",
    title="IFA (interruption following, binary)",
    scale=BINARY,
    definition=(
        "Does the response, by its end, do what the user's interruption wanted? Judge the outcome only, "
        "independently of the reaction class: a response can follow the interruption while its reaction "
        "is of the wrong class (e.g. it asks whether the user wants it to stop, then goes on with the "
        "original answer after a False Trigger), and the reverse."
    ),
    levels=(
        (
            1,
            "The outcome is what the interruption wanted: after a Cancellation the old answer does not go "
            "on; after a False Trigger the original answer goes on; after a Correction the response answers "
            "the corrected question, with no part still asserting the old conclusion.",
        ),
        (0, "The outcome is not what the interruption wanted."),
    ),
    # Not nested in IAC: the paper's IFA exceeds its IAC (VideoLLaMA3-7B False Trigger 48.27 vs 34.52).
    source="reconstructed (benchmarks.md §2); the paper gives no definition, and its IFA can exceed its IAC",
)

TFS = Metric(
    name="tfs",
    title="TFS (Textual Fluency Score, 1-10)",
    scale=TEN_POINT,
    definition=(
        "How fluently and naturally the response moves from the interrupted answer into the right "
        "strategy for the interruption: no repetition, filler or semantic jumps."
    ),
    # Seed 003, Table 5 (verbatim).
    levels=(
        (
            10,
            "Immediately enters the correct strategy; no repetition, filler transition, or semantic jump; "
            "reads like natural human real-time dialogue.",
        ),
        (
            9,
            "Correct strategy executed immediately; may contain a very short transition word; no "
            "repetition or semantic discontinuity.",
        ),
        (
            8,
            "Strategy is correct; may contain one explicit transition sentence; no semantic confusion; no "
            "repetition exceeding one sentence.",
        ),
        (7, "Strategy is correct, with only minor repetition or slightly rigid structure."),
        (
            6,
            "Strategy is correct, but repeats original content for more than one sentence or briefly "
            "becomes illogical before recovering.",
        ),
        (
            5,
            "Eventually shifts to the correct strategy, but contains noticeable discontinuity or delayed "
            "revision.",
        ),
    ),
    # The paper publishes no cap table for TFS.
    source="seed 003 Table 5",
)

VES = Metric(
    name="ves",
    title="VES (Visual Evidence Score, 1-10)",
    scale=TEN_POINT,
    definition=(
        "Whether what the response says about the video (objects, actions, attributes, timing) is "
        "genuinely present in the video as seen up to the interruption."
    ),
    # Seed 003, Table 6 (verbatim).
    levels=(
        (
            10,
            "All mentioned objects, actions, and attributes (e.g., color, position, state) are genuinely "
            "present; no hallucination; the description accurately reflects the visual state at the "
            "interruption moment; no temporal misalignment.",
        ),
        (
            9,
            "All visual elements genuinely exist; only extremely minor detail imprecision is present; "
            "timing is essentially synchronized.",
        ),
        (
            8,
            "Major visual elements are correct; one minor detail may be vague or slightly inaccurate; no "
            "obvious hallucination.",
        ),
        (7, "Core objects and actions are correct, with only one minor visual error or slight temporal lag."),
        (
            6,
            "Most visual content is correct, but there is one obvious but non-core visual error, or a "
            "noticeable temporal synchronization deviation.",
        ),
        (
            5,
            "Core visual elements are correct, but multiple minor visual errors are present, or there is "
            "partial over-generalization.",
        ),
    ),
    # Seed 003, Table 9 (verbatim conditions).
    caps=(
        ("One core visual error", 4),
        ("Two or more core visual errors", 3),
        ("Obvious fabricated scene", 2),
        ("Content completely detached from the video", 1),
    ),
    source="seed 003 Table 6 (rubric), Table 9 (caps)",
)

CFS = Metric(
    name="cfs",
    title="CFS (Correction Following Score, 1-10)",
    scale=TEN_POINT,
    definition=(
        "How completely the response drops the old conclusion and rebuilds the answer under the user's "
        "corrected question or premise."
    ),
    # Seed 003, Table 7 (verbatim).
    levels=(
        (
            10,
            "Explicitly states that the old conclusion was incorrect; fully retracts the conflicting "
            "semantics; completely reconstructs the response under the new constraints; no residual old "
            "semantics remain.",
        ),
        (
            9,
            "Fully follows the new constraints; does not explicitly apologize or deny the old conclusion, "
            "but contains no actual residual semantic error.",
        ),
        (
            8,
            "Major semantic conflicts are corrected; only extremely minor and irrelevant old phrasing "
            "remains.",
        ),
        (7, "The core conflict is corrected, but some secondary old semantics remain uncleared."),
        (6, "The model attempts correction, but still retains noticeable fragments of the old conclusion."),
        (5, "The model performs partial rewriting, but the core constraints are not fully satisfied."),
    ),
    # Seed 003, Table 10 (verbatim conditions).
    caps=(
        ("Clearly continues the core old conclusion", 4),
        ("Old and new conclusions coexist", 3),
        ("Completely ignores the correction signal", 1),
    ),
    source="seed 003 Table 7 (rubric), Table 10 (caps)",
)

CCS = Metric(
    name="ccs",
    title="CCS (Contextual Consistency Score, 1-10)",
    scale=TEN_POINT,
    definition=(
        "Whether the response keeps what should be kept from the conversation so far (the question, the "
        "part of the answer already given, context still valid after the interruption), changing only "
        "what the interruption requires."
    ),
    # Seed 003, Table 8 (verbatim).
    levels=(
        (
            10,
            "All semantic units that should be preserved are fully retained; only minimal necessary "
            "modifications are made; no irrelevant expansion or structural disruption occurs.",
        ),
        (
            9,
            "Almost all preservable context is retained; only a very small amount of non-core information "
            "is lost.",
        ),
        (8, "All core semantics are preserved, but some secondary details are missing."),
        (7, "The main semantics are preserved, but some core information is slightly weakened."),
        (
            6,
            "Core semantics are only partially preserved, and some unrelated content is clearly deleted "
            "or rewritten.",
        ),
        (5, "Only part of the core semantics is preserved, and the structure is noticeably reorganized."),
    ),
    # Seed 003, Table 11 (verbatim conditions).
    caps=(
        ("Unjustified deletion of core semantic units", 4),
        ("Large-scale rewriting of original context", 3),
        ("Complete topic shift", 1),
    ),
    source="seed 003 Table 8 (rubric), Table 11 (caps)",
)

CA_OPEN = Metric(
    name="ca_open",
    title="CA (interruption type, as the reaction treats it)",  # in the judge's prompt: changing it re-judges
    scale=BINARY,
    definition=(
        "Which interruption type does the MODEL RESPONSE treat the interruption as? Read only what the "
        "response does: it stops (at most a brief acknowledgement) -> Cancellation; it ignores the "
        "interruption and goes on with the original answer -> False Trigger; it takes up a changed question "
        "or premise and answers that -> Correction. You are not told the interruption's type."
    ),
    levels=(
        (1, "Cancellation: the response stops, at most with a brief acknowledgement."),
        (1, "False Trigger: the response goes on with the original answer, ignoring the interruption."),
        (1, "Correction: the response revises, answering the changed question or premise."),
    ),
    source=(
        "reconstructed, and NOT the paper's open-ended CA: the type the reaction implies, named by the "
        "judge. The paper's tables rule this reading out (Table 12: Cancellation CA 100% for all six models "
        "while their Cancellation IAC is 51-96%), which fits the model naming the type, as in the "
        "multiple-choice form; the paper does not say how an open-ended reply is made to name it, so that "
        "number is not reproduced"
    ),
    classes=ALL_TYPES,
)

METRICS: dict[str, Metric] = {m.name: m for m in (IAC, TFS, VES, IFA, CFS, CCS, CA_OPEN)}

# Which metrics are judged for which interruption type: every metric on every type, as the paper's per-type
# tables 12-14 report them and its Table 2 averages them (item-level means; eval/benchmarks/ovi.py). On
# a type where a metric has little to measure (CFS after a Cancellation or a False Trigger) the judge
# follows the rubric as written, as the paper's judges did: its CFS there is 0.69-2.20.
APPLIES_TO: dict[str, tuple[str, ...]] = {name: ALL_TYPES for name in METRICS}

# Item fields the prompt needs; the optional ones are used when present.
REQUIRED_FIELDS = (
    "question",
    "partial_answer",
    "interruption",
    "interruption_type",
    "reference_reaction",
    "response",
)
OPTIONAL_FIELDS = (
    "visual_evidence",
    "answer",
    "question_time",
    "interruption_time",
    "duration",
    "own_answer",
    "answer_finished",
)


def metrics_for(interruption_type: str) -> list[str]:
    """The metric names judged for an interruption type, in reporting order.

    Raises:
        ValueError: on an unknown interruption type.
    """
    if interruption_type not in ALL_TYPES:
        raise ValueError(f"unknown interruption type {interruption_type!r} (known: {ALL_TYPES})")
    return [name for name, types in APPLIES_TO.items() if interruption_type in types]


def get_metric(name: str) -> Metric:
    """The metric called ``name`` (case-insensitive).

    Raises:
        ValueError: on an unknown metric.
    """
    metric = METRICS.get(name.lower())
    if metric is None:
        raise ValueError(f"unknown judge metric {name!r} (known: {', '.join(METRICS)})")
    return metric


def judge_prompt(metric: str, item: dict[str, Any]) -> str:
    """The judge prompt for one metric on one item.

    Args:
        metric: a name in ``METRICS``.
        item: ``question``, ``partial_answer``, ``interruption``, ``interruption_type``,
            ``reference_reaction`` and ``response`` (the evaluated model's reaction after the
            interruption); optionally ``visual_evidence`` (a text description of the video up to the
            interruption), ``answer`` (the full original answer), ``question_time`` and
            ``interruption_time`` (seconds).

    Returns:
        The prompt text; it asks for ``{"score": <number>, "reason": "<short>"}`` and nothing else.

    Raises:
        ValueError: on an unknown metric or interruption type, or a missing required field.
    """
    spec = get_metric(metric)
    missing = [key for key in REQUIRED_FIELDS if item.get(key) is None]
    if missing:
        raise ValueError(f"judge item lacks required field(s) {missing}")
    if item["interruption_type"] not in ALL_TYPES:
        raise ValueError(f"unknown interruption type {item['interruption_type']!r} (known: {ALL_TYPES})")
    case = _blind_item_section(item) if spec.classes else _item_section(item)
    sections = [_preamble(), case, _metric_section(spec), _output_section(spec)]
    return "\n\n".join(sections) + "\n"


def _preamble() -> str:
    types = "\n".join(f"- {name}: {reaction}" for name, reaction in TYPE_REACTIONS.items())
    return (
        "You are a strict, impartial judge for OVIBench, a benchmark of online video question answering "
        "under interruption. A model was answering a user's question about a video stream; partway through "
        "its answer the user interrupted; the model then produced the response you are judging. Score ONE "
        "metric, exactly as defined below.\n\n"
        f"Interruption types and the right reaction to each:\n{types}"
    )


def _item_section(item: dict[str, Any]) -> str:
    lines = ["## The case", f"Question: {item['question']}"]
    if item.get("question_time") is not None and item.get("interruption_time") is not None:
        lines.append(_timing_line(item))
    lines += [
        f"{_spoken_label(item)}: {item['partial_answer']}",
        f"Interruption ({item['interruption_type']}): {item['interruption']}",
        f"{_reference_label(item)}: {item['reference_reaction']}",
        _evidence_line(item),
        f"MODEL RESPONSE TO JUDGE (after the interruption): {item['response']}",
    ]
    return "\n".join(lines)


def _timing_line(item: dict[str, Any]) -> str:
    t_q, t_i = float(item["question_time"]), float(item["interruption_time"])
    line = f"Timing: the question arrived at {t_q:.1f} s of the video; the interruption at {t_i:.1f} s. "
    # An answer can be interrupted after the video's last frame: the model then saw all of it.
    duration = item.get("duration")
    if duration is not None and t_i > float(duration):
        return line + f"The video ended at {float(duration):.1f} s; the model had seen all of it."
    return line + "The model had seen the video up to the interruption."


def _blind_item_section(item: dict[str, Any]) -> str:
    """The case without the interruption's type or a reference reaction (both would give the type away)."""
    return "\n".join(
        [
            "## The case",
            f"Question: {item['question']}",
            f"{_spoken_label(item)}: {item['partial_answer']}",
            f"Interruption: {item['interruption']}",
            f"MODEL RESPONSE TO JUDGE (after the interruption): {item['response']}",
        ]
    )


def _spoken_label(item: dict[str, Any]) -> str:
    if item.get("own_answer") and item.get("answer_finished"):  # the simulation had nothing left to cut
        return (
            "What the model itself said before the interruption (its own answer, which it had FINISHED: the "
            "interruption came after it ended, so nothing of it was cut)"
        )
    if item.get("own_answer"):
        return "What the model itself said before the interruption (its own answer, cut mid-way)"
    return "Answer spoken before the interruption (cut mid-way)"


def _reference_label(item: dict[str, Any]) -> str:
    if item.get("own_answer"):  # the reference continues the dataset's answer, not the model's own
        return (
            "Reference reaction (guidance only: written after the dataset's reference answer, not after "
            "what the model said above, so a right reaction may word things differently and, after a False "
            "Trigger, continue from another point)"
        )
    return "Reference reaction (one right reaction; others may be right too)"


def _evidence_line(item: dict[str, Any]) -> str:
    """The visual evidence as text: a description when given, otherwise the grounded answers stand in."""
    if item.get("visual_evidence"):
        description = item["visual_evidence"]
        return f"What the video shows (text description, standing in for the frames): {description}"
    # The judge is a text model and sees no frames. On our synthetic world the answers are built from
    # exact ground-truth captions, so the full original answer and the reference reaction describe the
    # video faithfully; on real data this is weaker evidence, and the prompt says so.
    grounded = ["the reference reaction above"]
    if item.get("answer"):
        grounded.insert(0, f"the full original answer (to the question as first asked): {item['answer']}")
    listed = "\n".join(f"- {text}" for text in grounded)
    return (
        "What the video shows: no frames or description are available to you. The following are grounded "
        f"in the video and stand in for it:\n{listed}\nTreat visual claims that contradict them as errors; "
        "claims they neither support nor contradict are unverified, not wrong."
    )


def _metric_section(spec: Metric) -> str:
    low, high = spec.scale
    if spec.classes:
        classes = "\n".join(f"- {criterion}" for _, criterion in spec.levels)
        return f"## Metric: {spec.title}\n\n{spec.definition}\n\nClasses:\n{classes}"
    levels = "\n".join(f"{score}: {criterion}" for score, criterion in spec.levels)
    lines = [
        f"## Metric: {spec.title}, scored from {low} to {high}",
        spec.definition,
        f"Rubric:\n{levels}",
    ]
    if spec.scale == TEN_POINT:
        lines.append(_BELOW_FIVE)
    if spec.caps:
        caps = "\n".join(f"- {condition}: at most {cap}" for condition, cap in spec.caps)
        lines.append(
            "Score caps. Check every condition below; whenever one holds, the score may not exceed its "
            "cap, and when several hold, the lowest cap wins. Apply the caps after choosing a rubric "
            f"level:\n{caps}"
        )
    return "\n\n".join(lines)


def _output_section(spec: Metric) -> str:
    if spec.classes:
        names = " | ".join(f'"{name}"' for name in spec.classes)
        return (
            "## Output\n"
            "Reply with a single JSON object and nothing else (no code fence, no text before or after):\n"
            f'{{"class": <one of {names}>, "reason": "<one short sentence>"}}'
        )
    low, high = spec.scale
    allowed = f"{low} or {high}" if spec.scale == BINARY else f"an integer from {low} to {high}"
    return (
        "## Output\n"
        "Reply with a single JSON object and nothing else (no code fence, no text before or after):\n"
        f'{{"score": <{allowed}>, "reason": "<one short sentence>"}}'
    )
