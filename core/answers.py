"""Reading an answer out of a model's reply: pure functions, fixed across checkpoints.

The official V2P-Bench rule reads the reply's first character; the tolerant extraction (think blocks and
answer lead-ins stripped, the first standalone letter) is reported beside it, never instead of it. The
OVIBench multiple-choice reply is a letter and an interruption type. The judge reads replies with their
think blocks stripped too: it scores what the user would hear.
"""

from __future__ import annotations

import re

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
_TYPE_PATTERN = re.compile(r"\b(cancell?ation|false[\s_-]*trigger|correction)\b", re.IGNORECASE)


def official_correct(prediction: str, answer: str) -> bool:
    """The official V2P-Bench rule: the raw response's first character equals the answer letter.

    No stripping and no case folding: ``" B"`` and ``"b"`` are wrong for ``"B"``; an empty response is
    wrong.
    """
    return bool(prediction) and prediction[0] == answer


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


def parse_ovi_mcq(prediction: str) -> tuple[str | None, str | None]:
    """Parse an OVIBench MCQ answer such as ``"B (Correction)"``.

    Returns:
        ``(letter, interruption_type)``: the first standalone A–D letter (see ``tolerant_letter``) and the
        one interruption type the reply names, in canonical spelling ("Cancellation", "False Trigger",
        "Correction"; case-insensitive, "false-trigger"/"false_trigger" accepted). A reply naming several
        types (echoing the instruction's "Cancellation, False Trigger or Correction") names none: the
        first named would otherwise make the echo right on every Cancellation item. Either may be None.
    """
    text = strip_thinking(prediction)
    named = interruption_types_named(text)
    return tolerant_letter(text), named.pop() if len(named) == 1 else None


def interruption_types_named(text: str) -> set[str]:
    """Every interruption type ``text`` names, in canonical spelling."""
    return {_canonical_type(match.group(1)) for match in _TYPE_PATTERN.finditer(text)}


def interruption_type_named(text: str) -> str | None:
    """The first interruption type named in ``text``, in canonical spelling, or None."""
    match = _TYPE_PATTERN.search(text)
    return _canonical_type(match.group(1)) if match else None


def _canonical_type(name: str) -> str:
    folded = name.lower()
    if folded.startswith("cancel"):
        return "Cancellation"
    if folded.startswith("false"):
        return "False Trigger"
    return "Correction"
