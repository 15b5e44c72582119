"""The GRPO stage's verifiable rewards (train/rewards/): each reward right, wrong and partly right on
hand-made items, every hack scored 0 by every reward it applies to, replies that game the benchmarks' rules,
which rewards apply to which item, and the weighted total."""

from __future__ import annotations

import ast
import inspect

import pytest

from core.errors import ConfigError
from core.formats.ovi import ovi_row_to_sample
from core.formats.v2p import render_question
from core.sample import Part, Sample, Turn
from data_builders.phrasings import BANKS
from train import rewards
from train.rewards import REWARDS, applicable, check_weights, hacked, weighted

STEM = "How many circles does the box mark in the first half of the video?"
OPTIONS = ["4", "2", "1", "3"]  # the right one, C, is "1"

CANCELLATION = {
    "question": "Describe what the red triangle does.",
    "answer": "A red triangle moves to the left.",
    "partial_answer": "A red triangle moves",
    "interruption": "Skip the rest, thanks.",
    "reference_reaction": "Okay, I'll leave it at that.",
}
FALSE_TRIGGER = {
    "question": "In the video, a yellow triangle enters the scene moving to the right. What happens next?",
    "answer": "The yellow triangle crosses the middle of the frame moving to the right.",
    "partial_answer": "The yellow triangle crosses the middle of the",
    "interruption": "yup",
    "reference_reaction": "frame moving to the right.",
}
CORRECTION = {
    "question": "What happens in the video between 0.0 s and 6.0 s?",
    "answer": "A red circle moves to the right.",
    "partial_answer": "A red",
    "interruption": (
        "hmm different question when in the video does this happen: a green triangle moves to the left"
    ),
    "reference_reaction": "From 1.0 s to 4.4 s.",
}
INSTANCES = {"Cancellation": CANCELLATION, "False Trigger": FALSE_TRIGGER, "Correction": CORRECTION}
# The MCQ form's options: the right reaction at D, then what the other types would have said.
WRONG_OPTIONS = {
    "Cancellation": ["triangle moves to the left.", "A red triangle moves to the left.", "Yes, I'm sure."],
    "False Trigger": ["Got it, no more.", "The yellow triangle crosses the middle of the frame.", "Nope."],
    "Correction": [
        "circle moves to the right.",
        "A red circle moves to the right.",
        "Alright, I'm stopping.",
    ],
}


def v2p_item(form: str | None = None, options: list[str] = OPTIONS, answer: str = "C") -> Sample:
    """A V2P item as the training data hold it; ``form="open"``: the question without its options."""
    question = render_question(STEM, options)
    meta = {"answer": answer, "options": options, "question": question}
    if form == "open":
        meta.update(format="open", question=f"{STEM}\nAnswer in a few words.")
    user = Turn("user", [Part.video("v.mp4", 0.0, 6.0), Part.txt(meta["question"]), Part.image("vp.jpg")])
    turns = [user, Turn("assistant", [Part.txt(answer)], loss=True)]
    return Sample("v2p-0", "v2p", turns, "synthetic", "v", (0.0, 6.0), meta)


def ovi_item(kind: str, form: str = "open", spoken: str | None = None, **fields: str) -> Sample:
    """An OVI item of ``kind`` (the instance above, ``fields`` replaced) as the loader makes it."""
    row = {
        "id": f"ovi-{kind}-{form}",
        "video_path": "videos/v.mp4",
        "duration": 6.0,
        "source": "synthetic",
        "source_id": "v",
        "segment": [0.0, 6.0],
        "question_time": 3.0,
        "interruption_time": 4.0,
        "interruption_type": kind,
        "format": form,
        **INSTANCES[kind],
        **fields,
    }
    if form == "mcq":
        row.update(options=[*WRONG_OPTIONS[kind], row["reference_reaction"]], answer_letter="D")
    item = ovi_row_to_sample(row, "/data")
    if spoken is not None:
        item.meta["spoken"] = spoken
    return item


def items() -> dict[str, Sample]:
    """One item of every kind, by the reward that applies to it (two for V2P multiple choice and OVI MCQ)."""
    return {
        "v2p_choice": v2p_item(),
        "v2p_open": v2p_item("open"),
        "ovi_cancellation": ovi_item("Cancellation"),
        "ovi_false_trigger": ovi_item("False Trigger"),
        "ovi_correction": ovi_item("Correction"),
        "ovi_mcq": ovi_item("Correction", "mcq"),
    }


# The right reply to each item, which must earn full marks and never look like a hack.
RIGHT = {
    "v2p_choice": "C",
    "v2p_open": "1",
    "ovi_cancellation": "Okay, I'll leave it at that.",
    "ovi_false_trigger": "frame moving to the right.",
    "ovi_correction": "From 1.0 s to 4.4 s.",
    "ovi_mcq": "D (Correction)",
}
APPLICABLE = {
    "v2p_choice": ["v2p_letter", "v2p_format"],
    "v2p_open": ["v2p_words"],
    "ovi_cancellation": ["ovi_cancellation"],
    "ovi_false_trigger": ["ovi_false_trigger"],
    "ovi_correction": ["ovi_correction"],
    "ovi_mcq": ["ovi_ma", "ovi_ca"],
}


# Which rewards apply, and the right reply.


@pytest.mark.parametrize("kind", APPLICABLE)
def test_applicable_names_the_rewards_of_each_item_kind(kind):
    assert applicable(items()[kind]) == APPLICABLE[kind]


@pytest.mark.parametrize("kind", APPLICABLE)
def test_a_reward_that_does_not_apply_answers_none(kind):
    item = items()[kind]
    for name, reward in REWARDS.items():
        if name not in APPLICABLE[kind]:
            assert reward(RIGHT[kind], item) is None, name


@pytest.mark.parametrize("kind", APPLICABLE)
def test_the_right_reply_earns_every_applicable_reward_and_is_no_hack(kind):
    item = items()[kind]
    assert hacked(RIGHT[kind], item) is None
    assert {name: REWARDS[name](RIGHT[kind], item) for name in APPLICABLE[kind]} == dict.fromkeys(
        APPLICABLE[kind], 1.0
    )


def test_every_acknowledgement_of_every_bank_is_a_full_cancellation_and_no_hack():
    item = ovi_item("Cancellation")
    for bank in BANKS.values():
        for acknowledgement in bank.acknowledgements:
            assert hacked(acknowledgement, item) is None, acknowledgement
            assert rewards.ovi_cancellation(acknowledgement, item) == 1.0, acknowledgement


# V2P multiple choice.


@pytest.mark.parametrize(
    ("reply", "letter", "format_"),
    [
        ("C", 1.0, 1.0),
        ("C.", 1.0, 1.0),
        (" C \n", 0.0, 1.0),  # the official rule reads the first character: a space
        ("c", 0.0, 0.0),  # no case folding, and a letter is a capital
        ("C because the box marks one circle", 1.0, 0.0),  # the official rule, but not the format
        ("The answer is C", 0.0, 0.0),
        ("A", 0.0, 1.0),  # well formed, wrong
        ("E", 0.0, 0.0),  # not one of the item's letters
        ("CC", 1.0, 0.0),
        ("C..", 1.0, 0.0),
    ],
)
def test_v2p_letter_is_the_official_rule_and_v2p_format_a_lone_letter(reply, letter, format_):
    item = v2p_item()
    assert rewards.v2p_letter(reply, item) == letter
    assert rewards.v2p_format(reply, item) == format_


def test_v2p_format_takes_only_the_letters_of_the_items_options():
    item = v2p_item(options=["before", "at the same time", "after"], answer="B")
    assert rewards.v2p_format("C", item) == 1.0
    assert rewards.v2p_format("D", item) == 0.0


# V2P open form.


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("1", 1.0),
        ("One.", 1.0),  # a number word is its number
        ("The box marks one circle.", 1.0),
        ("2", 0.0),  # another option
        ("11", 0.0),  # whole words only
        ("C", 0.0),  # a letter is no answer in words
        ("none", 0.0),
        ("1 or 2", 0.0),  # names another option too
    ],
)
def test_v2p_words_matches_the_right_options_text_and_no_other(reply, expected):
    assert rewards.v2p_words(reply, v2p_item("open")) == expected


def test_v2p_words_normalises_case_punctuation_and_compound_number_words():
    item = v2p_item("open", options=["It is in sight from the start", "21", "after", "never"], answer="A")
    assert rewards.v2p_words("it is IN sight, from the start!", item) == 1.0
    assert rewards.v2p_words("It is in sight", item) == 0.0  # part of the text is not the text
    item = v2p_item("open", options=["It is in sight from the start", "21", "after", "never"], answer="B")
    assert rewards.v2p_words("twenty-one", item) == 1.0


def test_v2p_words_an_option_inside_a_longer_option_is_not_named():
    options = ["red", "dark red", "blue", "green"]
    assert rewards.v2p_words("dark red", v2p_item("open", options, "B")) == 1.0
    assert rewards.v2p_words("dark red", v2p_item("open", options, "A")) == 0.0
    assert rewards.v2p_words("red", v2p_item("open", options, "A")) == 1.0


# OVI open form: Cancellation.


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Okay, I'll leave it at that.", 1.0),
        ("Sure, stopping now.", 1.0),  # another bank's acknowledgement
        ("Alright, I'll be quiet.", 1.0),  # a short reply that takes up nothing
        ("Okay, I'll stop. Glad I could help.", 0.6),  # four words past the acknowledgement
        ("Okay, I'll stop. " + "Let me know if there is anything else you would like to ask me about.", 0.0),
        ("Okay then, I will stop talking right now and I will not say anything more at all", 0.3),  # 17 words
        ("to the left.", 0.0),  # the rest of the answer
        ("Okay, I'll stop. It moves to the left.", 0.0),  # acknowledges, then continues anyway
        ("A red triangle moves to the left.", 0.0),  # restarts
        ("A red triangle.", 0.0),  # repeats the spoken part
        ("The red triangle, okay.", 0.0),  # two of the answer's content words
        ("Okay, I'll stop describing the triangle.", 1.0),  # one is no repeat
        ("Could you repeat the question?", 0.0),  # a stock non-answer
    ],
)
def test_ovi_cancellation_rewards_an_acknowledgement_and_charges_what_follows(reply, expected):
    assert rewards.ovi_cancellation(reply, ovi_item("Cancellation")) == pytest.approx(expected)


def test_ovi_cancellation_a_bank_acknowledgement_may_hold_the_short_rest():
    item = ovi_item("Cancellation", answer="The circle turns right.", partial_answer="The circle turns")
    assert rewards.ovi_cancellation("Right, I'll stop talking.", item) == 1.0  # a bank's words
    assert rewards.ovi_cancellation("Right.", item) == 0.0  # the rest itself


def test_ovi_cancellation_reads_the_rollouts_own_spoken_words():
    item = ovi_item("Cancellation", spoken="Well, the red one slides over to the")
    assert rewards.ovi_cancellation("Got it, I'll stop.", item) == 1.0
    assert rewards.ovi_cancellation("Sure. It slides over to the left.", item) == 0.0  # its own words again


# OVI open form: False Trigger.


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("frame moving to the right.", 1.0),
        ("Frame, moving to the right", 1.0),
        ("frame.", 2 * (1 / 1) * (1 / 5) / (1 + 1 / 5)),  # all precise, a fifth recalled
        ("frame moving to the right and then it leaves", 2 * (5 / 9) * 1 / (5 / 9 + 1)),
        ("the left side.", 2 * (1 / 3) * (1 / 5) / (1 / 3 + 1 / 5)),  # "the" overlaps
        ("The yellow triangle crosses the middle of the frame moving to the right.", 0.0),  # restarts
        ("Okay, stopping. frame moving to the right.", 0.0),  # stops (a bank acknowledgement)
        ("yup, frame moving to the right.", 0.0),  # echoes the interruption
        ("A green square jumps.", 0.0),  # shares no word
    ],
)
def test_ovi_false_trigger_is_the_overlap_with_the_rest_unless_it_stops_restarts_or_answers(reply, expected):
    assert rewards.ovi_false_trigger(reply, ovi_item("False Trigger")) == pytest.approx(expected)


def test_ovi_false_trigger_does_not_answer_the_interruption():
    item = ovi_item("False Trigger", interruption="Honey, can you turn the music down?")
    assert rewards.ovi_false_trigger("frame moving to the right.", item) == 1.0
    assert rewards.ovi_false_trigger("Sure, I'll turn it down. frame moving to the right.", item) == 0.0


def test_ovi_false_trigger_resumes_after_the_rollouts_own_cut():
    # The model said its own opening; the rest is the answer's words after its last words.
    item = ovi_item("False Trigger", spoken="A yellow triangle goes across the middle of")
    assert rewards.ovi_false_trigger("the frame moving to the right.", item) == 1.0
    assert rewards.ovi_false_trigger("A yellow triangle goes across the middle of the frame.", item) == 0.0
    # A rollout cut with no two of the answer's words in a row: after as many words as it spoke (five).
    item = ovi_item("False Trigger", spoken="Well, it heads over the")
    assert rewards.ovi_false_trigger("middle of the frame moving to the right.", item) == 1.0


def test_ovi_false_trigger_restart_after_a_one_word_cut_is_read_at_the_opening():
    item = ovi_item("False Trigger", partial_answer="The")
    assert (
        rewards.ovi_false_trigger("yellow triangle crosses the middle of the frame moving to the right", item)
        == 1.0
    )
    assert rewards.ovi_false_trigger("The yellow triangle crosses the middle", item) == 0.0


def test_ovi_false_trigger_does_not_apply_when_nothing_of_the_answer_remains():
    item = ovi_item("False Trigger", spoken=FALSE_TRIGGER["answer"])
    assert rewards.ovi_false_trigger("and that is all.", item) is None
    assert applicable(item) == []


# OVI open form: Correction.


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("From 1.0 s to 4.4 s.", 1.0),
        ("from 1 s to 4.4 s", 1.0),  # numbers compared as numbers
        ("It happens from one second on.", 1 / 3),  # "1" of {1, s, 4.4}: "second" is not "s"
        ("Between 1 s and 4.4 s.", 1.0),
        ("From 1.0 s to 4.4 s, while the red circle moves to the right.", 0.0),  # keeps the old answer
        ("A red circle moves to the right.", 0.0),  # the old answer
        ("Okay, I'll stop here.", 0.0),
        ("Right, I'll stop talking. From 1.0 s to 4.4 s.", 0.0),  # stops, whatever follows
        ("From 2.0 s to 3.0 s.", 0.0),  # other numbers
        ("From 1 s, or maybe 2 s, to 4.4 s.", 0.0),  # a hedge: a number the reaction does not hold
        ("It lasts some seconds.", 0.0),
        ("Starting at 1.0 s.", 2 / 3),  # part of the fact
    ],
)
def test_ovi_correction_recalls_the_corrected_fact_and_drops_the_old(reply, expected):
    assert rewards.ovi_correction(reply, ovi_item("Correction")) == pytest.approx(expected)


def test_ovi_correction_of_an_object():
    item = ovi_item(
        "Correction",
        answer="The red circle moves to the right.",
        partial_answer="The red",
        interruption="Sorry, I meant the green triangle.",
        reference_reaction="The green triangle moves to the left.",
    )
    assert rewards.ovi_correction("The green triangle moves to the left.", item) == 1.0
    assert rewards.ovi_correction("The green triangle moves.", item) == pytest.approx(2 / 3)
    assert rewards.ovi_correction("The green triangle moves to the right.", item) == 0.0  # a wrong word kept
    assert rewards.ovi_correction("The green triangle, not the red circle, moves left.", item) == 0.0
    assert rewards.ovi_correction("The green one moves to the left.", item) == pytest.approx(
        2 / 3
    )  # no count


def test_ovi_correction_going_on_with_the_old_answer_earns_nothing_though_its_words_are_the_new_ones():
    item = ovi_item(
        "Correction",
        answer="First, a green square moves to the right; after that, the yellow circle crosses the frame.",
        partial_answer="First, a green square moves to the right; after that, the yellow circle",
        interruption="Sorry, I meant the green square.",
        reference_reaction="The green square crosses the frame.",
    )
    assert rewards.ovi_correction("The green square crosses the frame.", item) == 1.0
    assert rewards.ovi_correction("crosses the frame.", item) == 0.0  # the old answer's rest


def test_ovi_correction_whose_reaction_uses_only_the_old_answers_words_rewards_all_of_them():
    item = ovi_item(
        "Correction",
        answer="First the green triangle moves to the left, then the red circle moves to the right.",
        partial_answer="First the green",
        reference_reaction="The green triangle moves to the left.",
    )
    assert rewards.ovi_correction("The green triangle moves to the left.", item) == 1.0
    assert rewards.ovi_correction("The green triangle.", item) == pytest.approx(2 / 4)
    assert rewards.ovi_correction("First the green triangle moves to the left.", item) == 0.0


# OVI multiple choice.


@pytest.mark.parametrize(
    ("reply", "ma", "ca"),
    [
        ("D (Correction)", 1.0, 1.0),
        ("The answer is D (correction)", 1.0, 1.0),
        ("D (Correction). Correction, as I said.", 1.0, 1.0),  # one type, named twice
        ("<think>A or D? Cancellation, False Trigger or Correction?</think>D (Correction)", 0.0, 0.0),
        ("A (Correction)", 0.0, 1.0),
        ("D (Cancellation)", 1.0, 0.0),
        ("D", 1.0, 0.0),
        ("D (Correction, False Trigger)", 1.0, 0.0),  # the benchmark reads the first: Correction
        ("D (False-Trigger or correction)", 1.0, 0.0),
    ],
)
def test_ovi_ma_is_the_letter_and_ovi_ca_the_one_type_named(reply, ma, ca):
    item = ovi_item("Correction", "mcq")
    assert (rewards.ovi_ma(reply, item), rewards.ovi_ca(reply, item)) == (ma, ca)


def test_ovi_ca_earns_nothing_for_the_reply_that_games_the_benchmark_rule():
    for kind in INSTANCES:
        item = ovi_item(kind, "mcq")
        assert (rewards.ovi_ma(f"D ({kind})", item), rewards.ovi_ca(f"D ({kind})", item)) == (1.0, 1.0)
        for reply in ("D (Cancellation, False Trigger, Correction)", "D (Cancellation / False Trigger)"):
            assert rewards.ovi_ca(reply, item) == 0.0, (kind, reply)


# Hacks: every reward that applies scores each 0.


def hack_replies(item: Sample) -> dict[str, str]:
    """Each hack as a reply to ``item``, with the reason :func:`hacked` gives for it."""
    question = item.meta["question"].splitlines()[0]
    replies = {
        "": "empty reply",
        "  \n\t": "empty reply",
        "...": "empty reply",
        "A: the circle\nB: the square": "echoes the option lines",
        "(A) or (B) or (C)": "echoes the option lines",
        question: "repeats the question",
        " ".join(question.split()[1:]): "repeats the question",  # most of its words
        "A B C D": "names every option letter",
        "A/B/C/D": "names every option letter",
        "ABCD": "names every option letter",
        "D (Cancellation, False Trigger, Correction)": "names every interruption type",
        "cancellation false-trigger correction": "names every interruption type",
    }
    options = item.meta.get("options")
    if options:
        replies["\n".join(f"{chr(65 + i)}: {text}" for i, text in enumerate(options))] = (
            "echoes the option lines"
        )
        replies[" ".join(options[:2])] = "names two or more options' texts"
        replies[f"{options[2]}, or else {options[3]}"] = "names two or more options' texts"
    return replies


@pytest.mark.parametrize("kind", APPLICABLE)
def test_every_hack_earns_nothing_on_every_reward_that_applies(kind):
    item = items()[kind]
    for reply, reason in hack_replies(item).items():
        assert hacked(reply, item) == reason, reply
        for name in APPLICABLE[kind]:
            assert REWARDS[name](reply, item) == 0.0, (name, reply)


def test_the_rest_of_an_answer_that_holds_the_questions_words_does_not_repeat_the_question():
    # The question holds its answer; the rest of it holds fewer than 75% of the question's content words.
    item = ovi_item(
        "False Trigger",
        question="Which happens first: a green triangle enters the scene, or the red circle crosses it?",
        answer="First, a green triangle enters the scene; after that, the red circle crosses the frame.",
        partial_answer="First, a green triangle enters the scene; after that,",
        reference_reaction="the red circle crosses the frame.",
    )
    assert hacked("the red circle crosses the frame.", item) is None
    assert rewards.ovi_false_trigger("the red circle crosses the frame.", item) == 1.0
    assert hacked("Which happens first: a green triangle enters the scene or the red circle?", item) == (
        "repeats the question"
    )


def test_a_v2p_answer_naming_a_letter_in_a_sentence_is_no_hack():
    item = v2p_item()
    assert hacked("C. A single circle.", item) is None
    assert hacked("A or B", v2p_item(options=["yes", "no"], answer="A")) == "names every option letter"


# Every reward's range, the table and the weighted total.


def test_every_reward_scores_in_the_unit_interval():
    replies = [*RIGHT.values(), "B", "Sure. frame moving to the right, and more words", "From 9 s on", "x"]
    for kind, item in items().items():
        for reply in replies:
            for name in APPLICABLE[kind]:
                assert 0.0 <= REWARDS[name](reply, item) <= 1.0, (name, reply)


def test_the_table_holds_every_reward_by_its_name_each_saying_what_it_rewards():
    assert isinstance(REWARDS, dict)
    for name, reward in REWARDS.items():
        assert reward.__name__ == name
        assert inspect.getdoc(reward)


def test_weighted_is_each_value_and_their_weighted_mean():
    item = v2p_item()
    scores = weighted("C because of the box", item, {"v2p_letter": 2.0, "v2p_format": 1.0, "ovi_ma": 5.0})
    assert scores == {"v2p_letter": 1.0, "v2p_format": 0.0, "total": pytest.approx(2 / 3)}
    assert weighted("C", item, {"v2p_letter": 1.0}) == {"v2p_letter": 1.0, "v2p_format": 1.0, "total": 1.0}
    assert weighted("A.", item, {"v2p_format": 1.0})["total"] == 1.0  # an unweighted reward counts 0
    assert weighted("C", item, {"ovi_ma": 1.0})["total"] == 0.0  # nothing that applies weighs anything
    assert weighted("", item, {"v2p_letter": 1.0, "v2p_format": 1.0})["total"] == 0.0


def test_a_weight_that_names_no_reward_is_refused():
    """Checked once, when the run resolves (tests/test_grpo.py), not for every completion."""
    with pytest.raises(ConfigError, match="v2p_leter"):
        check_weights({"v2p_leter": 1.0})
    check_weights(rewards.default_weights())


def test_the_default_weights_are_the_registrys_rewards():
    assert list(rewards.default_weights()) == [*REWARDS, *rewards.OPTIONAL_REWARDS]


def test_the_rewards_import_only_core_data_builders_and_the_ovi_benchmarks_item_predicate():
    """Pure functions of text and items: no model, no torch."""
    modules = set()
    for module in (rewards, rewards.text, rewards.hacks, rewards.v2p, rewards.ovi):
        tree = ast.parse(inspect.getsource(module))
        modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        modules |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    project = {m for m in modules if m.split(".")[0] not in ("__future__", "re", "collections", "decimal")}
    outside = {m for m in project if m.split(".")[0] not in ("core", "data_builders", "train")}
    assert outside == {"eval.benchmarks.ovi"}
    assert {m for m in project if m.startswith("train")} <= {"train", "train.rewards"} | {
        f"train.rewards.{name}" for name in ("text", "hacks", "v2p", "ovi")
    }
