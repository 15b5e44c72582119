"""What games the rewards: a completion that earns 0 on every reward (:func:`hacked`), and the item's parts
that tell (its options, its letters, its question's lines)."""

from __future__ import annotations

import re

from core.answers import interruption_types_named
from core.formats.ovi import LETTERS
from core.formats.v2p import INSTRUCTION
from core.sample import Sample
from core.vocab import INTERRUPTION_TYPES
from train.rewards import text

QUESTION_SHARE = 0.75  # a reply holding this share of a question line's content words repeats it

_OPTION_LINE = re.compile(r"^\s*[A-Z]:\s+\S")  # a V2P question's "A: text" line
_OPTION_LABEL = re.compile(r"(?<![A-Za-z0-9])([A-D])\s*[:)]")  # "A: …", "B) …", "(C)"
_LETTER_RUN = re.compile(r"(?<![A-Za-z0-9])([A-D]+)(?![A-Za-z0-9])")  # "A", "ABCD"


def options(item: Sample) -> list[str]:
    return item.meta.get("options") or []


def letters(item: Sample) -> str:
    """The item's option letters; all four where it shows no options (an open OVI item)."""
    return LETTERS[: len(options(item))] or LETTERS


def question_lines(item: Sample) -> list[list[str]]:
    """The words of each line of the question asked, a V2P question's option lines and instruction aside."""
    lines = item.meta["question"].replace(INSTRUCTION, "").splitlines()
    return [text.words(line) for line in lines if not _OPTION_LINE.match(line)]


def letters_named(completion: str) -> set[str]:
    return {letter for run in _LETTER_RUN.findall(completion) for letter in run}


def repeats_question(words: list[str], item: Sample) -> bool:
    """Whether ``words`` hold a line of the question word for word (three words or more), or most of a
    line's content words (75%, of three or more)."""
    held = set(words)
    for line in question_lines(item):
        content = text.content(line)
        if len(line) >= text.RUN and text.holds(words, line):
            return True
        if len(content) >= text.RUN and len(content & held) >= QUESTION_SHARE * len(content):
            return True
    return False


def hacked(completion: str, item: Sample) -> str | None:
    """Why ``completion`` games the rewards, or None; every reward scores a hacked completion 0.

    - empty: no word at all (whitespace or punctuation only);
    - echoes the options: option labels of two or more letters ("A: …", "B) …"), or the texts of two or more
      of the item's options (``text.named_options``);
    - repeats the question: a line of it word for word, or most of a line's content words
      (:func:`repeats_question`; the question's other lines, such as an instruction, aside);
    - names every option letter ("A B C D", "A/B/C/D", "ABCD"; the item's letters, all four for an open
      OVI item);
    - names every interruption type.
    """
    words = text.words(completion)
    if not words:
        return "empty reply"
    if len(set(_OPTION_LABEL.findall(completion))) >= 2:
        return "echoes the option lines"
    if len(text.named_options(words, options(item))) >= 2:
        return "names two or more options' texts"
    if repeats_question(words, item):
        return "repeats the question"
    if set(letters(item)) <= letters_named(completion):
        return "names every option letter"
    if len(interruption_types_named(completion)) == len(INTERRUPTION_TYPES):
        return "names every interruption type"
    return None
