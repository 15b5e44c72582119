"""How the rewards read text: words normalised, then compared as runs, bags or sets.

Normalised: lower case, punctuation dropped, apostrophes closed up ("I'll" -> "ill"), numbers canonical
("1.0" -> "1") and number words as digits ("three" -> "3", "twenty-one" -> "21").
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal

RUN = 3  # words in a row taken from a text that make a reply repeat it

# Words that carry no fact: left out where words are compared as facts (a correction's words, the
# question's, an interruption's), never where texts are matched in a row. Normalised spelling ("ill").
FUNCTION_WORDS = frozenset(
    """a an the of to in on at by for with from into onto and or but so as than then is are was were be
    been being am it its this that these those there here do does did has have had will would can could
    should may might must i me my you your he him his she her we us our they them their ill im ive id youre
    thats""".split()
)
_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
} | {
    word: 10 * tens
    for tens, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)
}
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")
_APOSTROPHE = re.compile(r"['’]")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s+|$)")


def words(text: str) -> list[str]:
    """``text``'s words, normalised (see the module docstring)."""
    tokens = _TOKEN.findall(_APOSTROPHE.sub("", text.lower()))
    found, i = [], 0
    while i < len(tokens):
        token, value = tokens[i], _NUMBER_WORDS.get(tokens[i])
        unit = _NUMBER_WORDS.get(tokens[i + 1], 0) if i + 1 < len(tokens) else 0
        if value is None:
            found.append(format(Decimal(token).normalize(), "f") if token[0].isdigit() else token)
        elif value >= 20 and 0 < unit < 10:  # "twenty one", and "twenty-one" split at the hyphen
            found.append(str(value + unit))
            i += 1
        else:
            found.append(str(value))
        i += 1
    return found


def content(text_words: list[str]) -> set[str]:
    return set(text_words) - FUNCTION_WORDS


def starts(text_words: list[str], run: list[str]) -> list[int]:
    """Where ``run`` occurs in ``text_words``, word for word (never for an empty run)."""
    size = len(run)
    return [i for i in range(len(text_words) - size + 1) if size and text_words[i : i + size] == run]


def holds(text_words: list[str], run: list[str]) -> bool:
    return bool(starts(text_words, run))


def shares_run(text_words: list[str], source: list[str], size: int) -> bool:
    """Whether ``text_words`` hold ``size`` words of ``source`` in a row (False when ``source`` is
    shorter)."""
    runs = {tuple(source[i : i + size]) for i in range(len(source) - size + 1)}
    windows = range(len(text_words) - size + 1)
    return size > 0 and any(tuple(text_words[i : i + size]) in runs for i in windows)


def sentences(text: str) -> list[list[str]]:
    """The words of each sentence of ``text`` that has any."""
    return [found for found in map(words, _SENTENCE_END.split(text)) if found]


def f1(text_words: list[str], reference: list[str]) -> float:
    """Word overlap: the F1 of the bags of words (each word counted as often as it occurs in both)."""
    common = sum((Counter(text_words) & Counter(reference)).values())
    if not common:
        return 0.0
    precision, recall = common / len(text_words), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def named_options(text_words: list[str], options: list[str]) -> set[int]:
    """The indices of the options whose text ``text_words`` hold in a row, whole words; an occurrence
    inside a longer option's occurrence does not count ("red" inside "dark red")."""
    spans = [
        (index, start, start + len(run))
        for index, run in enumerate(map(words, options))
        for start in starts(text_words, run)
    ]
    return {
        index
        for index, start, end in spans
        if not any(s <= start and end <= e and e - s > end - start for _, s, e in spans)
    }
