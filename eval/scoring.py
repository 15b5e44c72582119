"""Per-sample scoring for V2P-Bench and OVIBench, and the category keys each item is reported under.

Everything here is a pure function of one result record::

    {"id": str, "task": "v2p" | "ovi", "prediction": str, "meta": {...}}

V2P scores come in two flavours that are always reported side by side: the *official* rule (the
first character of the raw response is the answer letter) and a *tolerant* extraction (think blocks
and answer prefixes stripped, first standalone letter). The tolerant rule is fixed here so that it
cannot drift between checkpoints.

OVIBench open-ended items need an LLM judge; they get no scores here (an empty dict), so they are
counted as unjudged and never averaged in as zeros.
"""

from __future__ import annotations

import re
from typing import Any

from data_builders.v2p_format import DIMENSIONS

# The corrected dimension map lives with the release format; re-exported here for scoring.

# Reconstructed from the paper's colour coding; the authors released no grouping.
TASK_GROUPS: dict[str, frozenset[str]] = {
    "perception": frozenset({"OA", "HA", "OD", "FM"}),
    "temporal": frozenset({"FT", "RT", "AS"}),
    "reasoning": frozenset({"CR", "PU", "CI"}),
    "spatial": frozenset({"SR"}),
    "counting": frozenset({"GC"}),
}

SHORT_MAX_S = 240.0  # the code behind the published tables uses 240 s, not the prose's "3 min"
MEDIUM_MAX_S = 1800.0

INTERRUPTION_TYPES = ("Cancellation", "False Trigger", "Correction")

UNKNOWN = "unknown"

Z_LETTERS = "ABCDZ"  # option letters when the Z option ("not enough information") is offered


# ---------------------------------------------------------------------------------------------------
# V2P: answer extraction


def official_correct(prediction: str, answer: str) -> bool:
    """The official V2P-Bench rule: the raw response's first character equals the answer letter.

    No stripping and no case folding: ``" B"`` and ``"b"`` are wrong for ``"B"``; an empty response is
    wrong.
    """
    return bool(prediction) and prediction[0] == answer


_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)

# Answer lead-ins stripped (repeatedly, case-insensitively) before looking at the first letter.
_ANSWER_PREFIX = re.compile(
    r"""^(?:
        (?:the\s+)?(?:(?:best|correct|final)\s+)?(?:answer|option|choice)\b\s*(?:is\b|:)?
      | [\s*#>"'`:(\[]+
    )""",
    re.IGNORECASE | re.VERBOSE,
)


def strip_thinking(prediction: str) -> str:
    """Drop ``<think>…</think>`` blocks (an unclosed block runs to the end).

    Text before a lone ``</think>`` is dropped too: some chat templates open the think block in the
    prompt, so only its closing tag appears in the response.
    """
    text = _THINK_BLOCK.sub(" ", prediction)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    return text.strip()


def _strip_answer_prefixes(text: str) -> tuple[str, bool]:
    """Strip answer lead-ins; return the rest and whether a worded lead-in ("Answer:") was removed."""
    worded = False
    while True:
        match = _ANSWER_PREFIX.match(text)
        if not match or not match.group(0):
            return text, worded
        worded = worded or any(ch.isalpha() for ch in match.group(0))
        text = text[match.end() :]


def tolerant_letter(prediction: str, letters: str = "ABCD") -> str | None:
    """Extract an option letter from a free-form response, or None.

    The rule (kept fixed across checkpoints):

    1. drop ``<think>…</think>`` blocks;
    2. strip lead-ins such as "Answer:", "The answer is", "The best answer is", "(", quotes, markdown;
    3. a letter at the head that stands alone is the answer — lower case too (``"b"``, ``"b."``), unless
       it is the article "a"/"A" starting a sentence ("A man walks…"); after a worded lead-in
       ("The answer is A because…") a capital "A" counts;
    4. otherwise the first standalone capital letter among ``letters`` anywhere in the text, again
       skipping "A" used as an article.

    Args:
        prediction: the raw model output.
        letters: the option letters that count as answers.

    Returns:
        The upper-case letter, or None when no letter is found.
    """
    text, worded = _strip_answer_prefixes(strip_thinking(prediction))
    head = re.match(r"([A-Za-z])(?![A-Za-z0-9])\s*(.?)", text)
    if head and head.group(1).upper() in letters:
        letter, next_char = head.group(1), head.group(2)
        is_article = letter.upper() == "A" and next_char.isalpha()
        if not is_article or (letter == "A" and worded):
            return letter.upper()
    for match in re.finditer(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])(\s*)(.?)", text):
        letter, gap, next_char = match.groups()
        if letter not in letters:
            continue
        if letter == "A" and gap and next_char.islower():
            continue  # "A man …": the article, not option A
        return letter
    return None


# ---------------------------------------------------------------------------------------------------
# V2P: categories


def duration_bucket(seconds: float) -> str:
    """The paper's duration bucket: short < 240 s <= medium < 1800 s <= long."""
    if seconds < SHORT_MAX_S:
        return "short"
    if seconds < MEDIUM_MAX_S:
        return "medium"
    return "long"


def dimension_label(dimension: int) -> str:
    """Short label for a dimension id, e.g. ``1 -> "OA"``; unknown ids become ``"dim<id>"``."""
    entry = DIMENSIONS.get(int(dimension))
    return entry[0] if entry else f"dim{dimension}"


def task_group(label: str) -> str:
    """The (reconstructed) task group of a dimension label, or ``"unknown"``."""
    for group, labels in TASK_GROUPS.items():
        if label in labels:
            return group
    return UNKNOWN


# Shape nouns as they appear in questions, plurals spelled out so the match maps back to a shape.
_SHAPE_NOUNS: dict[str, tuple[str, ...]] = {
    "rectangle": ("bounding box", "bounding boxes", "box", "boxes", "boxed", "rectangle", "rectangles"),
    "ellipse": ("circle", "circles", "circled", "ellipse", "ellipses", "oval", "ovals"),
    "triangle": ("triangle", "triangles"),
    "mask_contour": ("contour", "contours", "mask", "masks", "outline", "outlines", "outlined"),
    "scribble": ("scribble", "scribbles", "scribbled", "doodle", "doodles"),
    "point": ("dot", "dots", "point", "points"),
    "arrow": ("arrow", "arrows"),
    "som": ("number tag", "number tags", "numeric tag", "numeric tags", "tag", "tags", "label", "labels"),
}
_NOUN_TO_SHAPE = {noun: shape for shape, nouns in _SHAPE_NOUNS.items() for noun in nouns}
_ANY_NOUN = "|".join(sorted(map(re.escape, _NOUN_TO_SHAPE), key=len, reverse=True))
_ENCLOSING_NOUN = "|".join(
    re.escape(noun)
    for shape in ("rectangle", "ellipse", "triangle", "mask_contour", "scribble")
    for noun in sorted(_SHAPE_NOUNS[shape], key=len, reverse=True)
)
_MODIFIERS = r"(?:[a-z-]+\s+){0,2}?"  # up to two words such as "red", "big yellow"

# Stage 1: phrases that use a shape noun as the drawn marker. Each captures the noun in group "noun".
_MARKER_PHRASES = [
    re.compile(p, re.IGNORECASE)
    for p in (
        # "marked by the red box", "pointed to by the arrow", "highlighted with a circle"
        rf"\b(?:marked|indicated|highlighted|enclosed|surrounded|circled|framed|outlined|labell?ed|tagged"
        rf"|annotated|pointed\s+(?:to|at)|selected|specified|denoted|shown|drawn)\s+(?:by|with|in|using)\s+"
        rf"(?:the\s+|an?\s+)?{_MODIFIERS}(?P<noun>{_ANY_NOUN})\b",
        # "the box drawn", "the green arrow shown in the frame"
        rf"\b(?:the|an?)\s+{_MODIFIERS}(?P<noun>{_ANY_NOUN})\s+(?:drawn|shown|marked|annotated|in\s+the"
        rf"\s+(?:image|frame|picture|figure))\b",
        # "the person in the red box": only enclosing shapes can hold a target
        rf"\b(?:in|inside|within)\s+(?:the|an?)\s+{_MODIFIERS}(?P<noun>{_ENCLOSING_NOUN})\b",
    )
]
# Set-of-Mark numbers: "labeled 2", "marked with the number 3", "tag #1", "numbered tags".
_SOM_PHRASES = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?:labell?ed|marked|tagged|numbered)\s+(?:as\s+|with\s+)?(?:the\s+)?(?:number\s+|#\s*)?\d+\b",
        r"\b(?:number|numeric|tag|label|mark)\s*#?\s*\d+\b",
        r"\bnumbered\s+(?:tags?|labels?|marks?)\b",
    )
]
# Stage 2: plain keywords. "point", "number", "label" and "mask" are left out here because they are
# common in ordinary questions ("at which point", "the number of", "wearing a mask"); stage 1 still
# catches them in marker phrases.
_FALLBACK_KEYWORD = re.compile(
    r"\b(?P<noun>bounding box(?:es)?|box(?:es|ed)?|rectangles?|circle[sd]?|ellipses?|ovals?|triangles?"
    r"|contours?|outline[sd]?|scribble[sd]?|doodles?|dots?|arrows?|number tags?)\b",
    re.IGNORECASE,
)
_OPTION_LINE = re.compile(r"^\s*[A-H]\s*[:.)]", re.MULTILINE)


def question_stem(question: str) -> str:
    """The question text before its first option line (``A: …``), so options don't leak into rules."""
    match = _OPTION_LINE.search(question)
    return question[: match.start()] if match else question


def prompt_shape(question: str) -> str:
    """Guess the visual-prompt shape from the question wording (the release has no shape field).

    Shapes: rectangle, ellipse, triangle, mask_contour, scribble, point, arrow, som (Set-of-Mark numeric
    tags), or ``"unknown"``. Only the question stem is read, not the option lines.

    The rule has two stages so that a shape noun naming an *object* ("a triangle on the sign") is not
    taken for the prompt when the question also names the marker:

    1. marker phrases — "marked by the (red) box", "pointed to by the arrow", "the circle drawn",
       "in the green rectangle", "labeled 2", "tag #3"; the earliest match in the text wins;
    2. otherwise the first plain shape keyword (box, circle, triangle, arrow, dot, contour, scribble,
       doodle, number tag …; not the everyday words point/number/label/mask).
    """
    stem = question_stem(question)
    found: list[tuple[int, str]] = []
    for pattern in _MARKER_PHRASES:
        for match in pattern.finditer(stem):
            found.append((match.start(), _NOUN_TO_SHAPE[_normalise_noun(match.group("noun"))]))
    for pattern in _SOM_PHRASES:
        found.extend((match.start(), "som") for match in pattern.finditer(stem))
    if found:
        return min(found)[1]
    keyword = _FALLBACK_KEYWORD.search(stem)
    return _NOUN_TO_SHAPE[_normalise_noun(keyword.group("noun"))] if keyword else UNKNOWN


def _normalise_noun(noun: str) -> str:
    return re.sub(r"\s+", " ", noun.lower())


# ---------------------------------------------------------------------------------------------------
# OVI: answer extraction

_TYPE_PATTERN = re.compile(r"\b(cancell?ation|false[\s_-]*trigger|correction)\b", re.IGNORECASE)


def parse_ovi_mcq(prediction: str) -> tuple[str | None, str | None]:
    """Parse an OVIBench MCQ answer such as ``"B (Correction)"``.

    Returns:
        ``(letter, interruption_type)``: the first standalone A–D letter (see ``tolerant_letter``) and the
        first interruption type named anywhere, in canonical spelling ("Cancellation", "False Trigger",
        "Correction"; case-insensitive, "false-trigger"/"false_trigger" accepted). Either may be None.
    """
    text = strip_thinking(prediction)
    type_match = _TYPE_PATTERN.search(text)
    return tolerant_letter(text), _canonical_type(type_match.group(1)) if type_match else None


def _canonical_type(name: str) -> str:
    folded = name.lower()
    if folded.startswith("cancel"):
        return "Cancellation"
    if folded.startswith("false"):
        return "False Trigger"
    return "Correction"


# ---------------------------------------------------------------------------------------------------
# Per-record entry points


def score_v2p(record: dict[str, Any]) -> dict[str, float]:
    """The 0/1 scores of one V2P result record, official rule and tolerant extraction side by side.

    - plain V2P, and the ``blind`` and ``text_prompt`` diagnostics: ``correct``, ``correct_tolerant``;
    - ``z_option`` (an added option Z, see ``eval.diagnostics``): those two, plus ``z_rate`` (the response
      starts with "Z") and ``z_rate_tolerant`` (Z extracted); the tolerant rule then reads A–D and Z;
    - ``shuffled`` (another item's video, with option Z): ``refusal_rate`` / ``refusal_rate_tolerant`` (Z
      chosen) and ``hack_ratio`` / ``hack_ratio_tolerant`` (the original answer still chosen, though the
      input cannot hold its evidence). No accuracy: there is no right answer to that input.
    """
    meta = record["meta"]
    prediction, answer = record["prediction"] or "", meta["answer"]
    with_z = bool(meta.get("z_option"))
    letter = tolerant_letter(prediction, letters=Z_LETTERS if with_z else "ABCD")
    correct = float(official_correct(prediction, answer)), float(letter == answer)
    if not with_z:
        return {"correct": correct[0], "correct_tolerant": correct[1]}
    refused = float(official_correct(prediction, "Z")), float(letter == "Z")
    if meta.get("diagnostic") == "shuffled":
        return {
            "refusal_rate": refused[0],
            "refusal_rate_tolerant": refused[1],
            "hack_ratio": correct[0],
            "hack_ratio_tolerant": correct[1],
        }
    return {
        "correct": correct[0],
        "correct_tolerant": correct[1],
        "z_rate": refused[0],
        "z_rate_tolerant": refused[1],
    }


def score_ovi(record: dict[str, Any]) -> dict[str, float]:
    """MCQ: ``{"ma": 0/1 answer, "ca": 0/1 interruption type}``; open-ended: ``{}`` (unjudged, not zero)."""
    meta = record["meta"]
    if meta["format"] != "mcq":
        return {}
    letter, kind = parse_ovi_mcq(record["prediction"] or "")
    return {"ma": float(letter == meta["answer_letter"]), "ca": float(kind == meta["interruption_type"])}


def score_record(record: dict[str, Any]) -> dict[str, float]:
    """Dispatch on ``record["task"]`` to ``score_v2p`` or ``score_ovi``."""
    scorers = {"v2p": score_v2p, "ovi": score_ovi}
    if record["task"] not in scorers:
        raise ValueError(f"record {record.get('id')!r}: unknown task {record['task']!r}")
    return scorers[record["task"]](record)


def category_keys(record: dict[str, Any]) -> dict[str, str]:
    """The categories a record is reported under.

    v2p: ``dimension`` (label), ``duration`` (bucket), ``task_group``, ``source``, ``shape``; the
    ``shuffled`` diagnostic: ``duration`` only.
    ovi: ``type`` (interruption type), ``format`` ("mcq" / "open").
    """
    meta = record["meta"]
    if record["task"] == "ovi":
        return {"type": meta["interruption_type"], "format": meta["format"]}
    if record["task"] != "v2p":
        raise ValueError(f"record {record.get('id')!r}: unknown task {record['task']!r}")
    duration = duration_bucket(float(meta["duration"]))
    if meta.get("diagnostic") == "shuffled":
        return {"duration": duration}  # the hack ratio is read by duration bucket only
    label = dimension_label(meta["dimension"])
    return {
        "dimension": label,
        "duration": duration,
        "task_group": task_group(label),
        "source": str(meta["source"]),
        # A text-prompt item is reported under the shape of the visual prompt it replaces.
        "shape": prompt_shape(meta.get("visual_prompt_question", meta["question"])),
    }


def scored_record(record: dict[str, Any]) -> dict[str, Any]:
    """The input row for ``eval.summary``: ``{"id", "task", "scores", "categories"}``."""
    return {
        "id": record["id"],
        "task": record["task"],
        "scores": score_record(record),
        "categories": category_keys(record),
    }
