"""The OVI rewards: each interruption type's open reaction by rule (Cancellation, False Trigger,
Correction), and the multiple-choice answer and type as OVIBench scores them.

An OVI item's last turn is the reaction to an interruption. In a GRPO rollout its cut answer is the model's
own, in ``meta["spoken"]``; without it the dataset's ``partial_answer`` is what was spoken. Only the
multiple-choice rewards drop think blocks, as the benchmark does.
"""

from __future__ import annotations

from core.answers import interruption_types_named, parse_ovi_mcq, strip_thinking
from core.sample import Sample
from core.vocab import ItemForm
from data_builders.phrasings import BANKS
from eval.benchmarks.ovi import is_open_item
from train.rewards import text
from train.rewards.hacks import hacked

ACK_MAX_WORDS = 10  # a short acknowledgement (the longest in the banks has 7 words)
EXTRA_WORD_COST = 0.1  # ovi_cancellation: what each word past the acknowledgement costs

_ACKNOWLEDGEMENTS = frozenset(tuple(text.words(a)) for bank in BANKS.values() for a in bank.acknowledgements)
_STOCK_NON_ANSWERS = frozenset(tuple(text.words(f)) for bank in BANKS.values() for f in bank.fallbacks)


def is_open_of(item: Sample, kind: str) -> bool:
    """Whether the item is an open OVI item of interruption type ``kind``."""
    return is_open_item(item) and item.meta["interruption_type"] == kind


def is_mcq(item: Sample) -> bool:
    return item.task == "ovi" and item.meta["format"] == ItemForm.mcq


# The item's parts.


def spoken(item: Sample) -> list[str]:
    """What the model said before the cut: its own words in a rollout, else the dataset's."""
    said = item.meta.get("spoken")
    return text.words(item.meta["partial_answer"] if said is None else said)


def rest(item: Sample) -> list[str]:
    """The words of the original answer after what was spoken."""
    answer = text.words(item.meta["answer"])
    return answer[cut(answer, spoken(item)) :]


def cut(answer: list[str], said: list[str]) -> int:
    """Where the spoken words end in the answer's: after the longest run of the spoken part's last words
    (two at least, unless one was spoken) that the answer holds, else after as many words as were spoken.

    The dataset's partial answer opens its answer, so its cut is its length; a rollout's spoken part is the
    model's own words, which may open the answer differently ("A red circle" for "The red circle").
    """
    for size in range(len(said), min(2, len(said)) - 1, -1):
        at = text.starts(answer, said[len(said) - size :])
        if at:
            return at[0] + size
    return min(len(said), len(answer))


# The rewards.


def ovi_cancellation(completion: str, item: Sample) -> float | None:
    """Open-form Cancellation: acknowledges and stops, continuing none of the cut answer.

    The reply's first sentence is its acknowledgement: 1, less 0.1 for each word past it (the words after
    the first sentence, and a first sentence's words beyond 10), floored at 0. 0 when the reply takes up the
    cut answer (:func:`takes_up_answer`: a restart, a continuation, a paraphrase of it); a leading bank
    acknowledgement is not searched for it ("Right, I'll stop talking." when the rest is "right."). 0 too
    for a bank's stock non-answer ("Could you repeat the question?"): the data offer those as wrong options.
    """
    if not is_open_of(item, "Cancellation"):
        return None
    if hacked(completion, item):
        return 0.0
    first, *later = text.sentences(completion)
    after = [word for sentence in later for word in sentence]
    searched = after if tuple(first) in _ACKNOWLEDGEMENTS else first + after
    if takes_up_answer(searched, item) or tuple(first) in _STOCK_NON_ANSWERS:
        return 0.0
    extra = len(after) + max(0, len(first) - ACK_MAX_WORDS)
    return max(0.0, 1.0 - EXTRA_WORD_COST * extra)


def takes_up_answer(words: list[str], item: Sample) -> bool:
    """Whether ``words`` take up the cut answer: three words in a row of the original answer or of what was
    spoken, the whole rest of the answer where fewer than three words remain, or two content words of the
    answer or of what was spoken ("The red triangle, okay." after "A red triangle moves")."""
    answer, remaining, said = text.words(item.meta["answer"]), rest(item), spoken(item)
    return (
        len(text.content(words) & text.content(answer + said)) >= 2
        or text.shares_run(words, answer, min(text.RUN, len(answer)))
        or text.shares_run(words, remaining, min(text.RUN, len(remaining)))
        or text.shares_run(words, said, text.RUN)  # a rollout's own words: one or two in a row match anything
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
    if not is_open_of(item, "False Trigger"):
        return None
    remaining = rest(item)
    if not remaining:
        return None
    if hacked(completion, item):
        return 0.0
    words = text.words(completion)
    if stops(words) or restarts(words, item) or answers_interruption(words, item):
        return 0.0
    return text.f1(words, remaining)


def stops(words: list[str]) -> bool:
    """Whether ``words`` hold a bank acknowledgement, word for word."""
    return any(text.holds(words, list(acknowledgement)) for acknowledgement in _ACKNOWLEDGEMENTS)


def restarts(words: list[str], item: Sample) -> bool:
    """Whether ``words`` open with the spoken part's first three words (all, where fewer were spoken) or
    hold those three anywhere."""
    opening = spoken(item)[: text.RUN]
    return bool(opening) and (
        words[: len(opening)] == opening or (len(opening) == text.RUN and text.holds(words, opening))
    )


def answers_interruption(words: list[str], item: Sample) -> bool:
    """Whether ``words`` use a content word of the interruption that the original answer does not."""
    heard = text.content(text.words(item.meta["interruption"])) - set(text.words(item.meta["answer"]))
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
    answer (:func:`goes_on`: "crosses the middle …", whose words the new answer may share). None when the
    right reaction has no content word.
    """
    if not is_open_of(item, "Correction"):
        return None
    right = text.content(text.words(item.meta["reference_reaction"]))
    original = text.content(text.words(item.meta["answer"]))
    fact = (right - original) or right
    if not fact:
        return None
    if hacked(completion, item):
        return 0.0
    words = text.words(completion)
    if stops(words) or goes_on(words, item):
        return 0.0
    used = set(words)
    # Only against a numeric fact: "one" is a number too ("the green one"), and no wrong fact elsewhere.
    stray_numbers = numbers(used) - right if numbers(right) else set()
    if stray_numbers or used & (original - right):
        return 0.0
    return len(fact & used) / len(fact)


def numbers(words: set[str]) -> set[str]:
    return {word for word in words if word[0].isdigit()}


def goes_on(words: list[str], item: Sample) -> bool:
    """Whether ``words`` open with the first three words of the old answer's rest, where the right
    reaction does not open so."""
    opening = rest(item)[: text.RUN]
    reaction = text.words(item.meta["reference_reaction"])
    return bool(opening) and words[: len(opening)] == opening and reaction[: len(opening)] != opening


def ovi_ma(completion: str, item: Sample) -> float | None:
    """OVI multiple choice, MA: 1 when the reply's answer letter (the first standalone A–D letter, as the
    benchmark reads it: ``core.answers.parse_ovi_mcq``) is ``answer_letter``, else 0."""
    if not is_mcq(item):
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
    if not is_mcq(item):
        return None
    if hacked(completion, item):
        return 0.0
    return float(interruption_types_named(strip_thinking(completion)) == {item.meta["interruption_type"]})
