"""The words of OVI interruptions, in three disjoint banks: what the user says and the stock option texts.

A benchmark phrased with the training set's own words measures, in part, whether a model remembers them.
So OVI-Train is phrased from the ``train`` bank and the OVIBench twin from the ``eval`` bank, plus a
share of its items from the ``paraphrased`` bank: casual spoken wording (fillers, hesitations,
self-corrections, lower case, missing punctuation), in the spirit of the paper's human-written
OVI-Human subset. No phrasing appears in two banks, compared :func:`normalised` (lower case,
punctuation and whitespace stripped).

Each bank holds the user's utterances per interruption type (a Correction's template takes the
corrected object's name, the corrected window's start and end, or the corrected question, as ``{}``),
the stop acknowledgements that are the right reaction to a Cancellation, and the stock wrong options
offered when a video supports too few. Acknowledgements and options are the assistant's words, so
every bank writes them plainly; the paraphrased bank's are still its own.

Bump :data:`PHRASINGS_VERSION` whenever a bank changes: builds record it in ``build_info.json``, and
the synthetic build is redone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.choice import Choice
from core.vocab import PHRASINGS

PHRASINGS_VERSION = 2  # 2: no phrasing of one bank inside another bank's ("Go on." in "mmm go on")


class PhraseBank(Choice):
    """The bank a build phrases its interruptions from."""

    train = "train"  # OVI-Train
    eval = "eval"  # the OVIBench twin; a share of its items from the paraphrased bank


@dataclass(frozen=True)
class Phrasings:
    """One bank: utterances per interruption type, stop acknowledgements and stock wrong options.

    ``casual`` banks write a corrected question as spoken: its first word lower-cased, no final mark.
    """

    name: str
    cancellations: tuple[str, ...]
    false_triggers: tuple[str, ...]
    correction_object: tuple[str, ...]  # "{}": the corrected object's name
    correction_time: tuple[str, ...]  # "{}", "{}": the corrected window's start and end in seconds
    correction_question: tuple[str, ...]  # "{}": the corrected question
    acknowledgements: tuple[str, ...]  # the right reaction to a Cancellation
    fallbacks: tuple[str, ...]  # wrong options when the video offers too few
    casual: bool = False

    @property
    def corrections(self) -> tuple[str, ...]:
        """Every Correction template."""
        return self.correction_object + self.correction_time + self.correction_question

    @property
    def utterances(self) -> dict[str, tuple[str, ...]]:
        """The user's utterances (templates for Correction) per interruption type."""
        return {
            "Cancellation": self.cancellations,
            "False Trigger": self.false_triggers,
            "Correction": self.corrections,
        }

    @property
    def phrasings(self) -> tuple[str, ...]:
        """Everything the bank phrases: utterances, templates, acknowledgements and stock options."""
        return (
            self.cancellations
            + self.false_triggers
            + self.corrections
            + self.acknowledgements
            + self.fallbacks
        )

    def question(self, template: str, question: str) -> str:
        """A question correction: ``template`` with the corrected question, as this bank speaks it."""
        return template.format(_spoken(question) if self.casual else question)


def _spoken(question: str) -> str:
    """A question as said aloud in a casual bank: no final mark, a capitalised first word lower-cased."""
    text = question.strip().rstrip("?.!").strip()
    word = text.split(" ", 1)[0]
    if word != "I" and word[:1].isupper() and word[1:].islower():
        return text[0].lower() + text[1:]
    return text


def normalised(text: str) -> str:
    """Lower case, punctuation and whitespace stripped (and a template's ``{}`` slots with them)."""
    return re.sub(r"[\W_]+", "", text.replace("{}", "").lower())


def phrased_by(text: str, phrasing: str) -> bool:
    """Whether ``text`` is ``phrasing`` or what its template makes of some slot texts, compared normalised."""
    pieces = [re.escape(normalised(piece)) for piece in phrasing.split("{}")]
    return re.fullmatch(".+".join(pieces), normalised(text)) is not None


TRAIN = Phrasings(
    name="train",
    cancellations=(
        "Stop, never mind.",
        "Okay, that's enough.",
        "Never mind, you can stop.",
        "That's enough, thanks.",
        "Stop please, I don't need the rest.",
        "You can stop there.",
        "Forget it, stop talking.",
        "Stop, I've heard enough.",
        "No need to go on.",
        "Alright, stop there please.",
        "Cancel that, please.",
        "Please stop, that's all I needed.",
        "Let's leave it there.",
        "Hold it, no more, thanks.",
        "Stop answering, please.",
        "Enough, thank you.",
        "Never mind the rest.",
        "Okay, stop, I get it.",
        "That will do, stop here.",
        "Please don't continue.",
        "Quit it, I'm done with this question.",
        "Just stop, please.",
    ),
    false_triggers=(
        "Aha.",
        "Mm-hmm.",
        "Hold on honey, I'm on a call.",
        "Yeah, I'll be right there!",
        "Sorry, that was the TV.",
        "Gotcha.",
        "Alrighty.",
        "I see.",
        "Carry on.",
        "Yes, yes.",
        "One sec, Mom, I'm listening to this.",
        "Can someone get the door?",
        "Oh, the kettle's boiling.",
        "Hm, hm.",
        "Interesting.",
        "Put it on the table, thanks.",
        "Sorry, the dog is barking.",
        "Bless you.",
        "Oops, I dropped my pen.",
        "Yes, I'm coming in a minute!",
        "Sure, go ahead.",
        "Ha, nice.",
    ),
    correction_object=(
        "Sorry, I meant the {}.",
        "Wait, I meant the {}, not that one.",
        "No, I was asking about the {}.",
        "Actually, tell me about the {} instead.",
        "Oops, I meant to ask about the {}.",
        "The other one, the {}.",
        "Hang on, I'm asking about the {}.",
        "Let me rephrase: what about the {}?",
    ),
    correction_time=(
        "Sorry, I meant between {} s and {} s.",
        "Wait, I meant the part from {} s to {} s.",
        "Actually, I'm asking about {} s to {} s.",
        "No, I meant the moment between {} s and {} s.",
        "Correction: the window from {} s to {} s.",
        "I meant the stretch from {} s until {} s.",
        "Sorry, the segment I care about is {} s to {} s.",
        "Wrong part, I meant {} s to {} s.",
    ),
    correction_question=(
        "Sorry, I meant to ask: {}",
        "Wait, my question is actually: {}",
        "Let me ask something else instead: {}",
        "Scratch that, my question is: {}",
        "Actually, a different question: {}",
        "No, what I want to know is this: {}",
        "Change of question: {}",
        "Sorry, wrong question, I meant: {}",
    ),
    acknowledgements=(
        "Okay, I'll stop here.",
        "Sure, stopping now.",
        "Alright, I'll stop.",
        "Okay, stopping.",
        "Got it, I'll stop.",
        "Sure thing, stopping here.",
        "No problem, I'll leave it there.",
        "Understood, stopping now.",
        "Okay, I'll end it there.",
        "Alright, stopping here.",
        "Fine, I'll stop now.",
        "Of course, I'll stop.",
    ),
    fallbacks=(
        "I can't tell from the video.",
        "Could you repeat the question?",
        "I'm not sure what you mean.",
    ),
)

EVAL = Phrasings(
    name="eval",
    cancellations=(
        "Please stop, I've got what I need.",
        "Halt, that's plenty.",
        "No more, thank you.",
        "I'd like you to stop now.",
        "Drop it, please.",
        "Skip the rest, thanks.",
        "OK, you can end it there.",
        "Let's stop here.",
        "Don't bother finishing.",
        "Cut it short, please, I'm done.",
        "Thanks, that's all I wanted.",
        "Stop right there.",
        "I don't need any more, stop.",
        "We can leave it at that.",
        "Please end your answer here.",
        "That's plenty, you can quit.",
        "Forget the question, stop.",
        "Enough said, stop please.",
        "Stop talking about it, thanks.",
        "I've changed my mind, no answer needed.",
        "Thank you, no further answer needed.",
    ),
    false_triggers=(
        "Uh-hm.",
        "Uh, okay.",
        "Yep.",
        "Oh, sorry, I was talking to my friend.",
        "Honey, can you turn the music down?",
        "Sorry, that was my phone.",
        "Ah, got it.",
        "Groovy.",
        "Neat.",
        "Keep going.",
        "Yeah, I'm listening.",
        "Not now, Sam, I'm busy.",
        "Who left the lights on?",
        "Whoa, it's raining outside.",
        "Oh wow.",
        "Ahem.",
        "Just a sec, Alex, I'll call you back.",
        "Sorry, my neighbour is drilling.",
        "Thanks, dear, leave it on the counter.",
        "Really?",
        "Sounds good.",
        "Achoo!",
    ),
    correction_object=(
        "Sorry, wrong one, I'm interested in the {}.",
        "Oh wait, I wanted to know about the {}.",
        "No no, the {} is what I'm asking about.",
        "Let me correct myself: the {}.",
        "I should have said the {}.",
        "Switch to the {}, please.",
        "My mistake, I'm curious about the {}.",
        "Rather the {}, please.",
    ),
    correction_time=(
        "Oh, I'm asking about {} s through {} s.",
        "My mistake, the interval {} s to {} s.",
        "I should have said from {} s to {} s.",
        "Let me correct that: {} s to {} s.",
        "No, look at {} s to {} s instead.",
        "The time I mean is {} s to {} s.",
        "Rather the span between {} s and {} s.",
        "Sorry, I wanted {} s to {} s.",
    ),
    correction_question=(
        "Oh, I asked the wrong thing. {}",
        "Let me ask this instead: {}",
        "New question: {}",
        "Ignore my last question. {}",
        "The real question is: {}",
        "I misspoke, I meant: {}",
        "Please answer this one instead: {}",
        "Correcting my question: {}",
    ),
    acknowledgements=(
        "Understood, I'll end here.",
        "Alright, I'm stopping.",
        "Okay, I'll leave it at that.",
        "Sure, I'll cut it there.",
        "No worries, stopping.",
        "Okay, ending my answer now.",
        "Got it, no more.",
        "Right, I'll stop talking.",
        "Sure, I'll drop it.",
        "Okay, I'll be quiet now.",
        "Noted, I'll stop there.",
        "Fair enough, stopping here.",
    ),
    fallbacks=(
        "The video doesn't show that.",
        "Sorry, could you say that again?",
        "I'm unable to answer that.",
    ),
)

PARAPHRASED = Phrasings(
    name="paraphrased",
    cancellations=(
        "uh ok ok you can stop",
        "nah thats fine stop",
        "um actually never mind just stop",
        "ok ok i get it thats enough",
        "stop stop stop",
        "hmm no forget it",
        "yeah no dont worry about it",
        "ok thats enough lol",
        "wait no just stop there",
        "eh i dont need the rest",
        "mm nah skip it",
        "um you know what forget it",
        "alright alright stop",
        "ugh never mind",
        "ok cool im good stop there",
        "keep g- no actually just stop",
        "eh thats enough for me",
        "ok um stop please",
        "nah nah forget it",
        "hmm you can stop i think i got it",
        "oh uh dont finish that",
        "yeah ok no more thanks",
    ),
    false_triggers=(
        "mhm mhm",
        "uh huh yeah",
        "oh hey babe one sec im watching something",
        "lol",
        "ugh whats that noise outside",
        "yeah yeah go on",
        "haha ok",
        "sorry sorry that was the radio",
        "hmmm ok",
        "ok ok",
        "oh nice",
        "kids can you keep it down",
        "um yeah im still here",
        "oh thats cool",
        "gimme a sec mike im on the phone",
        "oops knocked my cup over",
        "yup",
        "right right",
        "mmm go on",
        "sorry the baby's crying",
        "whoa ok",
        "yeah ill be down in a minute",
    ),
    correction_object=(
        "wait no i meant the {}",
        "uh sorry the {} i mean",
        "no no not that one the {}",
        "um actually can you do the {}",
        "oh wait i meant like the {}",
        "hmm i was asking about the- the {}",
        "sorry i mixed it up its the {} i want",
        "er the {} actually",
    ),
    correction_time=(
        "wait sorry i meant like {} to {} seconds",
        "no uh between {} and {} seconds",
        "um the part around {} s to {} s i mean",
        "oh i meant {} to {} not that part",
        "sorry from {} s up to {} s actually",
        "er i mean the bit from {} to {} seconds",
        "no wait {} s to {} s",
        "hmm actually can you do {} to {} seconds",
    ),
    correction_question=(
        "oh wait actually {}",
        "no sorry what i wanna know is {}",
        "um scratch that uh {}",
        "hmm different question {}",
        "wait i asked wrong {}",
        "sorry i meant to say {}",
        "er no hold on {}",
        "ok forget that one {}",
    ),
    acknowledgements=(
        "Sure, I'll hold off on the rest.",
        "Okay, I won't continue.",
        "Alright, I'll leave the rest out.",
        "No problem, I'll say no more.",
        "Okay, that's where I'll stop.",
        "Sure, I'll skip the rest.",
        "Understood, I won't go on.",
        "All right, ending here.",
        "Okay, I'll cut my answer short.",
        "Certainly, I'll stop.",
        "Sure, no more from me.",
    ),
    fallbacks=("Hard to say from what I saw.", "Can you ask that again?", "I don't have enough to go on."),
    casual=True,
)

# Keyed by the names rows record (core.vocab.Phrasing), which the release format checks without the banks.
BANKS: dict[str, Phrasings] = {bank.name: bank for bank in (TRAIN, EVAL, PARAPHRASED)}
assert tuple(BANKS) == PHRASINGS, f"the banks {tuple(BANKS)} are not core.vocab.Phrasing's {PHRASINGS}"
