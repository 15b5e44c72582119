"""The verifiable rewards of the GRPO stage: pure functions of a completion and its item, fixed by rule.

A reward is ``reward(completion, item) -> float | None``: None when it does not apply to the item, otherwise
a score in [0, 1]. :data:`REWARDS` names them all, :func:`applicable` says which apply to an item and
:func:`weighted` scores a completion on all of those at once, with the weighted total the stage trains on.

Items are the training data's samples: V2P items asked as multiple choice, or in open form
(``meta["form"] == "open"``: the question without its options), and OVI items, open or multiple choice,
whose last turn is the reaction to an interruption. In a GRPO rollout an OVI item's cut answer is the
model's own, in ``meta["spoken"]``; without it the dataset's ``partial_answer`` is what was spoken.

A completion that games the rules (:func:`hacked`: empty, an echo of the options or the question, every
letter or every interruption type named) earns 0 on every reward. Words are compared normalised
(:func:`_words`): lower case, punctuation dropped, apostrophes closed up ("I'll" -> "ill"), numbers
canonical ("1.0" -> "1") and number words as digits ("three" -> "3", "twenty-one" -> "21"). Completions are
read raw, as the official V2P rule reads them; only the OVI multiple-choice rewards drop think blocks, as
the benchmark does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

from core.answers import interruption_types_named, official_correct, parse_ovi_mcq, strip_thinking
from core.errors import ConfigError
from core.sample import Sample
from core.vocab import INTERRUPTION_TYPES
from data_builders.ovi_format import LETTERS
from data_builders.phrasings import BANKS
from data_builders.v2p_format import INSTRUCTION

Reward = Callable[[str, Sample], "float | None"]

RUN = 3  # words in a row taken from a text that make a reply repeat it
QUESTION_SHARE = 0.75  # a reply holding this share of a question line's content words repeats it
ACK_MAX_WORDS = 10  # a short acknowledgement (the longest in the banks has 7 words)
EXTRA_WORD_COST = 0.1  # ovi_cancellation: what each word past the acknowledgement costs

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
_OPTION_LINE = re.compile(r"^\s*[A-Z]:\s+\S")  # a V2P question's "A: text" line
_OPTION_LABEL = re.compile(r"(?<![A-Za-z0-9])([A-D])\s*[:)]")  # "A: …", "B) …", "(C)"
_LETTER_RUN = re.compile(r"(?<![A-Za-z0-9])([A-D]+)(?![A-Za-z0-9])")  # "A", "ABCD"
_LONE_LETTER = re.compile(r"\s*([A-Z])\.?\s*")


def _words(text: str) -> list[str]:
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


_ACKNOWLEDGEMENTS = frozenset(tuple(_words(a)) for bank in BANKS.values() for a in bank.acknowledgements)
_STOCK_NON_ANSWERS = frozenset(tuple(_words(f)) for bank in BANKS.values() for f in bank.fallbacks)


def _content(words: list[str]) -> set[str]:
    return set(words) - FUNCTION_WORDS


def _starts(words: list[str], run: list[str]) -> list[int]:
    """Where ``run`` occurs in ``words``, word for word (never for an empty run)."""
    size = len(run)
    return [i for i in range(len(words) - size + 1) if size and words[i : i + size] == run]


def _holds(words: list[str], run: list[str]) -> bool:
    return bool(_starts(words, run))


def _shares_run(words: list[str], source: list[str], size: int) -> bool:
    """Whether ``words`` hold ``size`` words of ``source`` in a row (False when ``source`` is shorter)."""
    runs = {tuple(source[i : i + size]) for i in range(len(source) - size + 1)}
    return size > 0 and any(tuple(words[i : i + size]) in runs for i in range(len(words) - size + 1))


def _sentences(text: str) -> list[list[str]]:
    """The words of each sentence of ``text`` that has any."""
    return [words for words in map(_words, _SENTENCE_END.split(text)) if words]


def _f1(words: list[str], reference: list[str]) -> float:
    """Word overlap: the F1 of the bags of words (each word counted as often as it occurs in both)."""
    common = sum((Counter(words) & Counter(reference)).values())
    if not common:
        return 0.0
    precision, recall = common / len(words), common / len(reference)
    return 2 * precision * recall / (precision + recall)


# The item's parts.


def _is_v2p(item: Sample, open_form: bool) -> bool:
    return item.task == "v2p" and (item.meta.get("form") == "open") == open_form


def _is_ovi(item: Sample, form: str, kind: str | None = None) -> bool:
    meta = item.meta
    return item.task == "ovi" and meta["format"] == form and kind in (None, meta["interruption_type"])


def _options(item: Sample) -> list[str]:
    return item.meta.get("options") or []


def _letters(item: Sample) -> str:
    """The item's option letters; all four where it shows no options (an open OVI item)."""
    return LETTERS[: len(_options(item))] or LETTERS


def _question_lines(item: Sample) -> list[list[str]]:
    """The words of each line of the question asked, a V2P question's option lines and instruction aside."""
    lines = item.meta["question"].replace(INSTRUCTION, "").splitlines()
    return [_words(line) for line in lines if not _OPTION_LINE.match(line)]


def _spoken(item: Sample) -> list[str]:
    """What the model said before the cut: its own words in a rollout, else the dataset's."""
    spoken = item.meta.get("spoken")
    return _words(item.meta["partial_answer"] if spoken is None else spoken)


def _rest(item: Sample) -> list[str]:
    """The words of the original answer after what was spoken."""
    answer = _words(item.meta["answer"])
    return answer[_cut(answer, _spoken(item)) :]


def _cut(answer: list[str], spoken: list[str]) -> int:
    """Where the spoken words end in the answer's: after the longest run of the spoken part's last words
    (two at least, unless one was spoken) that the answer holds, else after as many words as were spoken.

    The dataset's partial answer opens its answer, so its cut is its length; a rollout's spoken part is the
    model's own words, which may open the answer differently ("A red circle" for "The red circle").
    """
    for size in range(len(spoken), min(2, len(spoken)) - 1, -1):
        at = _starts(answer, spoken[len(spoken) - size :])
        if at:
            return at[0] + size
    return min(len(spoken), len(answer))


# What a reply names.


def _named_options(words: list[str], options: list[str]) -> set[int]:
    """The indices of the options whose text ``words`` hold in a row, whole words; an occurrence inside a
    longer option's occurrence does not count ("red" inside "dark red")."""
    spans = [
        (index, start, start + len(run))
        for index, run in enumerate(map(_words, options))
        for start in _starts(words, run)
    ]
    return {
        index
        for index, start, end in spans
        if not any(s <= start and end <= e and e - s > end - start for _, s, e in spans)
    }


def _letters_named(text: str) -> set[str]:
    return {letter for run in _LETTER_RUN.findall(text) for letter in run}


def _repeats_question(words: list[str], item: Sample) -> bool:
    """Whether ``words`` hold a line of the question word for word (three words or more), or most of a
    line's content words (75%, of three or more)."""
    held = set(words)
    for line in _question_lines(item):
        content = _content(line)
        if len(line) >= RUN and _holds(words, line):
            return True
        if len(content) >= RUN and len(content & held) >= QUESTION_SHARE * len(content):
            return True
    return False


def hacked(completion: str, item: Sample) -> str | None:
    """Why ``completion`` games the rewards, or None; every reward scores a hacked completion 0.

    - empty: no word at all (whitespace or punctuation only);
    - echoes the options: option labels of two or more letters ("A: …", "B) …"), or the texts of two or more
      of the item's options (:func:`_named_options`);
    - repeats the question: a line of it word for word, or most of a line's content words
      (:func:`_repeats_question`; the question's other lines, such as an instruction, aside);
    - names every option letter ("A B C D", "A/B/C/D", "ABCD"; the item's letters, all four for an open
      OVI item);
    - names every interruption type.
    """
    words = _words(completion)
    if not words:
        return "empty reply"
    if len(set(_OPTION_LABEL.findall(completion))) >= 2:
        return "echoes the option lines"
    if len(_named_options(words, _options(item))) >= 2:
        return "names two or more options' texts"
    if _repeats_question(words, item):
        return "repeats the question"
    if set(_letters(item)) <= _letters_named(completion):
        return "names every option letter"
    if len(interruption_types_named(completion)) == len(INTERRUPTION_TYPES):
        return "names every interruption type"
    return None


# The rewards.


def v2p_letter(completion: str, item: Sample) -> float | None:
    """V2P multiple choice, the official rule: 1 when the reply's first character is the answer letter (no
    stripping, no case folding: " B" and "b" are wrong for "B"; "B because …" is right), else 0."""
    if not _is_v2p(item, open_form=False):
        return None
    if hacked(completion, item):
        return 0.0
    return float(official_correct(completion, item.meta["answer"]))


def v2p_format(completion: str, item: Sample) -> float | None:
    """V2P multiple choice: 1 when the reply is one of the item's option letters and nothing else (whitespace
    around it and one trailing period allowed: "B", " B.\\n"), right or wrong; else 0."""
    if not _is_v2p(item, open_form=False):
        return None
    if hacked(completion, item):
        return 0.0
    match = _LONE_LETTER.fullmatch(completion)
    return float(bool(match) and match.group(1) in _letters(item))


def v2p_words(completion: str, item: Sample) -> float | None:
    """V2P open form: 1 when the reply names the right option's text and no other option's, else 0.

    Named: the option's normalised words in a row, whole words ("1" names "one" but not "10"); an option's
    words inside a longer option's occurrence are not that option named (:func:`_named_options`).
    """
    if not _is_v2p(item, open_form=True):
        return None
    if hacked(completion, item):
        return 0.0
    right = _letters(item).index(item.meta["answer"])
    return float(_named_options(_words(completion), _options(item)) == {right})


def ovi_cancellation(completion: str, item: Sample) -> float | None:
    """Open-form Cancellation: acknowledges and stops, continuing none of the cut answer.

    The reply's first sentence is its acknowledgement: 1, less 0.1 for each word past it (the words after
    the first sentence, and a first sentence's words beyond 10), floored at 0. 0 when the reply takes up the
    cut answer (:func:`_takes_up_answer`: a restart, a continuation, a paraphrase of it); a leading bank
    acknowledgement is not searched for it ("Right, I'll stop talking." when the rest is "right."). 0 too
    for a bank's stock non-answer ("Could you repeat the question?"): the data offer those as wrong options.
    """
    if not _is_ovi(item, "open", "Cancellation"):
        return None
    if hacked(completion, item):
        return 0.0
    first, *later = _sentences(completion)
    after = [word for sentence in later for word in sentence]
    searched = after if tuple(first) in _ACKNOWLEDGEMENTS else first + after
    if _takes_up_answer(searched, item) or tuple(first) in _STOCK_NON_ANSWERS:
        return 0.0
    extra = len(after) + max(0, len(first) - ACK_MAX_WORDS)
    return max(0.0, 1.0 - EXTRA_WORD_COST * extra)


def _takes_up_answer(words: list[str], item: Sample) -> bool:
    """Whether ``words`` take up the cut answer: three words in a row of the original answer or of what was
    spoken, the whole rest of the answer where fewer than three words remain, or two content words of the
    answer or of what was spoken ("The red triangle, okay." after "A red triangle moves")."""
    answer, rest, spoken = _words(item.meta["answer"]), _rest(item), _spoken(item)
    return (
        len(_content(words) & _content(answer + spoken)) >= 2
        or _shares_run(words, answer, min(RUN, len(answer)))
        or _shares_run(words, rest, min(RUN, len(rest)))
        or _shares_run(words, spoken, RUN)  # a rollout's own words: one or two in a row match anything
    )


def ovi_false_trigger(completion: str, item: Sample) -> float | None:
    """Open-form False Trigger: resumes the interrupted answer where it was cut.

    The word overlap (F1 of the bags of normalised words) with the rest of the original answer, its words
    after what was spoken. 0 when the reply stops (holds a bank acknowledgement), restarts (opens with the
    spoken part's first three words, or all of them where fewer were spoken, or holds those three anywhere)
    or treats the interruption as something to answer (uses a content word of the interruption that the
    original answer does not: "yup", "turn" after "can you turn the music down?"). None when nothing of the
    answer remains.
    """
    if not _is_ovi(item, "open", "False Trigger"):
        return None
    rest = _rest(item)
    if not rest:
        return None
    if hacked(completion, item):
        return 0.0
    words = _words(completion)
    if _stops(words) or _restarts(words, item) or _answers_interruption(words, item):
        return 0.0
    return _f1(words, rest)


def _stops(words: list[str]) -> bool:
    """Whether ``words`` hold a bank acknowledgement, word for word."""
    return any(_holds(words, list(acknowledgement)) for acknowledgement in _ACKNOWLEDGEMENTS)


def _restarts(words: list[str], item: Sample) -> bool:
    """Whether ``words`` open with the spoken part's first three words (all, where fewer were spoken) or
    hold those three anywhere."""
    opening = _spoken(item)[:RUN]
    return bool(opening) and (
        words[: len(opening)] == opening or (len(opening) == RUN and _holds(words, opening))
    )


def _answers_interruption(words: list[str], item: Sample) -> bool:
    """Whether ``words`` use a content word of the interruption that the original answer does not."""
    heard = _content(_words(item.meta["interruption"])) - set(_words(item.meta["answer"]))
    return bool(heard & set(words))


def ovi_correction(completion: str, item: Sample) -> float | None:
    """Open-form Correction: the revised answer carries the corrected fact and drops the wrong one.

    The corrected fact: the content words (function words aside; numbers count) of the right reaction that
    the original answer does not use, or all its content words where it has none of its own. The wrong
    fact: the original answer's content words that the right reaction does not use, and, where the right
    reaction states numbers (a time, a count), any other number. The reward is the share of the corrected
    fact's words the reply uses, and 0 when it uses any word of the wrong fact: a reply that keeps the old
    answer beside the new one hedges ("the green triangle, or the red circle"; "from 1 s or 3 s to 4.4 s"),
    and a partial penalty would pay for the hedge. 0 too when the reply stops (holds a bank
    acknowledgement: "Right, I'll stop talking." would otherwise recall "right") or goes on with the old
    answer (:func:`_goes_on`: "crosses the middle …", whose words the new answer may share). None when the
    right reaction has no content word.
    """
    if not _is_ovi(item, "open", "Correction"):
        return None
    right, original = _content(_words(item.meta["reference_reaction"])), _content(_words(item.meta["answer"]))
    fact = (right - original) or right
    if not fact:
        return None
    if hacked(completion, item):
        return 0.0
    words = _words(completion)
    if _stops(words) or _goes_on(words, item):
        return 0.0
    used = set(words)
    # Only against a numeric fact: "one" is a number too ("the green one"), and no wrong fact elsewhere.
    stray_numbers = _numbers(used) - right if _numbers(right) else set()
    if stray_numbers or used & (original - right):
        return 0.0
    return len(fact & used) / len(fact)


def _numbers(words: set[str]) -> set[str]:
    return {word for word in words if word[0].isdigit()}


def _goes_on(words: list[str], item: Sample) -> bool:
    """Whether ``words`` open with the first three words of the old answer's rest, where the right
    reaction does not open so."""
    opening = _rest(item)[:RUN]
    reaction = _words(item.meta["reference_reaction"])
    return bool(opening) and words[: len(opening)] == opening and reaction[: len(opening)] != opening


def ovi_ma(completion: str, item: Sample) -> float | None:
    """OVI multiple choice, MA: 1 when the reply's answer letter (the first standalone A–D letter, as the
    benchmark reads it: ``core.answers.parse_ovi_mcq``) is ``answer_letter``, else 0."""
    if not _is_ovi(item, "mcq"):
        return None
    if hacked(completion, item):
        return 0.0
    letter, _ = parse_ovi_mcq(completion)
    return float(letter == item.meta["answer_letter"])


def ovi_ca(completion: str, item: Sample) -> float | None:
    """OVI multiple choice, CA: 1 when the reply (think blocks dropped) names exactly one interruption type,
    however often, and it is ``interruption_type``; else 0.

    The benchmark takes the first type named anywhere, which a reply naming several games ("A
    (Cancellation, False Trigger)"): here that earns 0.
    """
    if not _is_ovi(item, "mcq"):
        return None
    if hacked(completion, item):
        return 0.0
    return float(interruption_types_named(strip_thinking(completion)) == {item.meta["interruption_type"]})


REWARDS: dict[str, Reward] = {
    "v2p_letter": v2p_letter,
    "v2p_format": v2p_format,
    "v2p_words": v2p_words,
    "ovi_cancellation": ovi_cancellation,
    "ovi_false_trigger": ovi_false_trigger,
    "ovi_correction": ovi_correction,
    "ovi_ma": ovi_ma,
    "ovi_ca": ovi_ca,
}


# Rewards the stage adds when configured (not pure functions): the LLM judge's (train/judge_reward.py).
OPTIONAL_REWARDS = ("ovi_judge",)


def applicable(item: Sample, extra: dict[str, Reward] | None = None) -> list[str]:
    """The names of the rewards that apply to ``item``, in :data:`REWARDS`' order, then ``extra``'s (rewards
    that are not pure functions: the judge's).

    Each rule reward is asked about an empty completion: one that applies scores it 0 (a hack), one that does
    not answers None, so this list and the rewards' own None never disagree.
    """
    rules = [name for name, reward in REWARDS.items() if reward("", item) is not None]
    return rules + [name for name in extra or {} if _is_ovi(item, "open")]


def weighted(
    completion: str, item: Sample, weights: dict[str, float], extra: dict[str, Reward] | None = None
) -> dict[str, float]:
    """Each applicable reward's value, and ``total``: their mean weighted by ``weights`` (name -> weight).

    An applicable reward without a weight weighs 0, and one with no value (an ``extra`` reward that could not
    score) is left out; ``total`` is 0 when no applicable reward weighs anything.

    Raises:
        ConfigError: a weight names no reward.
    """
    known = [*REWARDS, *OPTIONAL_REWARDS]
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ConfigError(f"reward weights: {', '.join(unknown)} not among the rewards ({', '.join(known)})")
    rewards = {**REWARDS, **(extra or {})}
    values = {name: rewards[name](completion, item) for name in applicable(item, extra)}
    values = {name: value for name, value in values.items() if value is not None}
    mass = sum(weights.get(name, 0.0) for name in values)
    total = sum(weights.get(name, 0.0) * value for name, value in values.items()) / mass if mass else 0.0
    return {**values, "total": total}
