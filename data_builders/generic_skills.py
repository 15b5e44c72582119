"""Generic video questions for pretraining the stand-in base model: what a real base model already knows.

A real 7-8B base model describes a clip, names colours and shapes, counts, follows motion and order in
time, finishes a sentence it is given, knows which word is a colour and which a direction, reads a
multiple-choice list and answers with its letter, and answers in a sentence. It is weak at
what our tuning teaches: drawn prompts and interruptions. This builder asks the synthetic world's generic
questions only, so a model pretrained on them (``+exp=standin``) is weak in the same places, and the
benchmarks measure what tuning adds.

Nothing here is shared with the benchmark twins: the videos come from worlds of their own seeds, no
frame carries a drawn prompt, no conversation is interrupted, and the wording (questions, answers and the
multiple-choice instruction) is this module's own; ``tests/test_standin.py`` checks all three.

Each video gets one question of every kind that fits it (:data:`KINDS`), half of them open (answered in a
sentence) and half multiple choice (answered with a letter), chosen by the build's seed. Every item's
``meta`` holds its ``kind``, ``format`` (an ``ItemForm``), the phrases a right open answer names
(``expected``) and those it never names (``rivals``), so the held-out split is scored without a judge
(``eval/benchmarks/skills.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from core.sample import Part, Sample, Turn
from core.vocab import ItemForm
from data_builders.outputs import BuildReport, save_build
from data_builders.synthetic_world import (
    COLOURS,
    DIRECTIONS,
    SHAPES,
    ObjectTrack,
    Scene,
    build_world,
)

TASK = "skills"
LETTERS = "ABCD"
# The multiple-choice instruction and option layouts: several, so that reading a lettered list is learnt
# as a skill, not as one string.
MC_INSTRUCTION = "Answer with the letter of the right option."
OPTION_LAYOUTS = ("{letter}: {text}", "{letter}. {text}", "({letter}) {text}")
COUNT_WORDS = ("1", "2", "3", "4")


@dataclass(frozen=True)
class Question:
    """One generic question about a scene.

    Attributes:
        stem: the question.
        sentence: its open answer, in a sentence.
        expected: the phrases a right open answer names, every one.
        rivals: the phrases a right open answer never names (the other values it could have said).
        options: the multiple-choice pool, the right option first.
    """

    stem: str
    sentence: str
    expected: list[str]
    rivals: list[str]
    options: list[str]


def _unique(scene: Scene, attr: str) -> list[ObjectTrack]:
    values = [getattr(o, attr) for o in scene.objects]
    return [o for o in scene.objects if values.count(getattr(o, attr)) == 1]


def _pick(items: list, rng: np.random.Generator):
    return items[rng.integers(len(items))]


def _others(values, value) -> list[str]:
    return [v for v in values if v != value]


def _colour(scene: Scene, rng: np.random.Generator) -> Question | None:
    candidates = _unique(scene, "shape")  # a shape seen twice would not say which object is meant
    if not candidates:
        return None
    obj = _pick(candidates, rng)
    rivals = _others(COLOURS, obj.colour)
    return Question(
        f"Which colour has the {obj.shape}?",
        f"The {obj.shape} is {obj.colour}.",
        [obj.colour],
        rivals,
        [obj.colour, *rivals],
    )


def _shape(scene: Scene, rng: np.random.Generator) -> Question:
    obj = _pick(scene.objects, rng)  # colours are distinct within a scene
    rivals = _others(SHAPES, obj.shape)
    return Question(
        f"Tell me the shape of the {obj.colour} thing.",
        f"It is a {obj.shape}.",
        [obj.shape],
        rivals,
        [obj.shape, *rivals],
    )


def _count(scene: Scene, rng: np.random.Generator) -> Question:
    n = str(len(scene.objects))
    noun = "shape" if n == "1" else "shapes"
    rivals = _others(COUNT_WORDS, n)
    return Question(
        "Count the shapes you can see in this clip.", f"I can see {n} {noun}.", [n], rivals, [n, *rivals]
    )


def _motion(scene: Scene, rng: np.random.Generator) -> Question:
    obj = _pick(scene.objects, rng)
    rivals = _others(DIRECTIONS, obj.direction)
    stem = f"Which way is the {obj.colour} {obj.shape} travelling?"
    return Question(
        stem, f"It is travelling {obj.direction}.", [obj.direction], rivals, [obj.direction, *rivals]
    )


def _order(scene: Scene, rng: np.random.Generator) -> Question | None:
    pairs = [(a, b) for a in scene.objects for b in scene.objects if a.appear_frame < b.appear_frame]
    if not pairs:
        return None
    first, later = _pick(pairs, rng)
    named = [first, later] if rng.random() < 0.5 else [later, first]
    stem = f"Of the {named[0].name} and the {named[1].name}, which came into view earlier?"
    pool = [first.name, later.name, *(o.name for o in scene.objects if o not in (first, later))]
    return Question(stem, f"The {first.name} came first.", [first.name], [later.name], pool)


def _presence(scene: Scene, rng: np.random.Generator) -> Question:
    there = bool(rng.random() < 0.5)
    if there:
        obj = _pick(scene.objects, rng)
        colour, shape = obj.colour, obj.shape
    else:
        present = {(o.colour, o.shape) for o in scene.objects}
        colour, shape = _pick([(c, s) for c in COLOURS for s in SHAPES if (c, s) not in present], rng)
    answer, other = ("yes", "no") if there else ("no", "yes")
    sentence = f"Yes, there is a {colour} {shape}." if there else f"No, I see no {colour} {shape}."
    return Question(
        f"Is there a {colour} {shape} anywhere in this clip?", sentence, [answer], [other], [answer, other]
    )


def _account(obj: ObjectTrack, direction: str) -> str:
    return f"{obj.name} travelling {direction}"


def _describe(scene: Scene, rng: np.random.Generator) -> Question:
    """Open: every object and its motion, in order of appearance. Its options: the true account of one
    object against the same object going the other ways, so choosing means reading whole sentences."""
    accounts = [_account(o, o.direction) for o in scene.objects]
    rivals = [_account(o, d) for o in scene.objects for d in _others(DIRECTIONS, o.direction)]
    sentence = "I see a " + ", then a ".join(accounts) + "."
    obj = _pick(scene.objects, rng)
    pool = [f"There is a {_account(obj, d)}." for d in [obj.direction, *_others(DIRECTIONS, obj.direction)]]
    return Question("Give a short account of this clip.", sentence, accounts, rivals, pool)


def _phrase(text: str) -> str:
    """``text`` as the scorer reads it: lower-case words, punctuation gone."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


# Each value word the account names, and the values it could have named instead.
_VALUE_KINDS = {v: values for values in (COLOURS, SHAPES, tuple(DIRECTIONS)) for v in values}


# A word's place in the account sentence "I see a <colour> <shape> travelling <direction>, then a ...":
# from word 3 on, every six words repeat these places.
_ACCOUNT_PLACES = 6


def _finish(scene: Scene, rng: np.random.Generator) -> Question:
    """Open: the rest of an account of the clip given in part, as a reader finishes a sentence. Its
    options: the rest; the rest with one value changed (only the clip tells them apart); the whole sentence
    again; the rest cut at a word of another place in the sentence (which does not follow the given words).
    Choosing reads the given words and the options, the skill a lettered list asks beyond seeing."""
    words = ("I see a " + ", then a ".join(_account(o, o.direction) for o in scene.objects) + ".").split()
    cut = int(rng.integers(3, len(words)))  # at least "I see a" given, at least one word to say
    given, rest = " ".join(words[:cut]), " ".join(words[cut:])
    values = [i for i in range(cut, len(words)) if words[i].strip(",.") in _VALUE_KINDS]
    at = _pick(values, rng)
    word = words[at].strip(",.")
    changed = words[cut:at] + [words[at].replace(word, _pick(_others(_VALUE_KINDS[word], word), rng))]
    changed = " ".join(changed + words[at + 1 :])
    elsewhere = [i for i in range(3, len(words)) if (i - cut) % _ACCOUNT_PLACES]
    pool = [rest, changed, " ".join(words)]
    if elsewhere:
        pool.append(" ".join(words[_pick(elsewhere, rng) :]))
    stem = f'Finish this sentence about the clip: "{given} ..."'
    return Question(stem, rest, [_phrase(rest)], [_phrase(changed)], pool)


# Word classes every base model knows, for reading a list without the clip.
_CLASSES = {"colour": COLOURS, "shape": SHAPES, "direction": tuple(DIRECTIONS), "number": COUNT_WORDS}


def _word_class(scene: Scene, rng: np.random.Generator) -> Question:
    """Which listed word is of a class (a colour among a shape, a direction and a number): answered from
    the words alone, as a base model reads any lettered list before it has seen a clip. Pointing at the
    option that fits is what every multiple-choice skill needs; here it is learnt apart from seeing."""
    names = list(_CLASSES)
    asked = _pick(names, rng)
    word = _pick(list(_CLASSES[asked]), rng)
    rivals = [_pick(list(_CLASSES[name]), rng) for name in names if name != asked]
    listed = [word, *rivals]
    listed = [listed[i] for i in rng.permutation(len(listed))]
    stem = f"Which of these words names a {asked}: {', '.join(listed[:-1])} or {listed[-1]}?"
    return Question(stem, f"{word.capitalize()} names a {asked}.", [word], rivals, [word, *rivals])


KINDS: dict[str, Callable[[Scene, np.random.Generator], Question | None]] = {
    "colour": _colour,
    "shape": _shape,
    "count": _count,
    "motion": _motion,
    "order": _order,
    "presence": _presence,
    "describe": _describe,
    "finish": _finish,
    "word_class": _word_class,
}


def _options(pool: list[str], rng: np.random.Generator) -> tuple[list[str], int]:
    """Up to four options: the pool's first (the right one) and distractors from the rest, shuffled; and
    the right one's index."""
    chosen = [pool[0], *rng.permutation(pool[1:])[: len(LETTERS) - 1].tolist()]
    options = [chosen[i] for i in rng.permutation(len(chosen))]
    return options, options.index(pool[0])


def _item(
    scene: Scene, video: str, kind: str, question: Question, mc: bool, rng: np.random.Generator
) -> Sample:
    meta = {
        "kind": kind,
        "format": str(ItemForm.mcq if mc else ItemForm.open),
        "expected": question.expected,
        "rivals": question.rivals,
    }
    if mc:
        options, index = _options(question.options, rng)
        layout = _pick(list(OPTION_LAYOUTS), rng)
        listed = "\n".join(layout.format(letter=LETTERS[i], text=o) for i, o in enumerate(options))
        prompt, reply = f"{question.stem}\n{listed}\n{MC_INSTRUCTION}", LETTERS[index]
        meta |= {"options": options, "answer_letter": reply}
    else:
        prompt, reply = question.stem, question.sentence
    turns = [
        Turn("user", [Part.video(video, 0.0, scene.duration), Part.txt(prompt)]),
        Turn("assistant", [Part.txt(reply)], loss=True),
    ]
    return Sample(
        f"{scene.video_id}-{kind}", TASK, turns, "synthetic", scene.video_id, (0.0, scene.duration), meta
    )


# Items of a kind per clip, where not one: pointing at an option's letter takes thousands of lettered
# items (in short bare text 1,000-2,000 steps of 16 of them alone; in the chat format, not found from
# scratch in 3,500: docs/results/2026-12-07-standin.md); at one per clip the lettered word classes are a
# sixteenth of the set.
_ITEMS_PER_CLIP = {"word_class": 4}
# Kinds asked by lettered options only: the word classes are there to teach reading a lettered list.
_LETTERED_ONLY = {"word_class"}


def scene_items(scene: Scene, video: str, rng: np.random.Generator) -> list[Sample]:
    """The items of every kind that fits ``scene`` (one, or ``_ITEMS_PER_CLIP``), each open or multiple
    choice at random (``_LETTERED_ONLY``: multiple choice)."""
    items = []
    for kind, ask in KINDS.items():
        for n in range(_ITEMS_PER_CLIP.get(kind, 1)):
            question = ask(scene, rng)
            if question is not None:
                lettered = kind in _LETTERED_ONLY or bool(rng.random() < 0.5)
                item = _item(scene, video, kind, question, lettered, rng)
                items.append(replace(item, id=f"{item.id}{n or ''}"))  # ids stay unique
    return items


def build_generic_skills(out: str | Path, n_videos: int, seed: int) -> Path:
    """Render a world of ``n_videos`` (seed ``seed``) under ``out/world`` and write its generic questions
    as the training set ``out/hf`` with ``stats.md`` and ``build_info.json``. Returns ``out``.

    The items name their videos by absolute path: a set built under a relative root is read from any
    directory."""
    out = Path(out).resolve()
    scenes = build_world(out / "world", n_videos, seed=seed)
    rng = np.random.default_rng([seed, 1])
    samples = []
    for scene in scenes:
        samples += scene_items(scene, str(out / "world" / "videos" / f"{scene.video_id}.mp4"), rng)
    return save_build(out, samples, _report(samples, seed, n_videos))


def _report(samples: list[Sample], seed: int, n_videos: int) -> BuildReport:
    counts: dict[str, dict[str, int]] = {}
    for s in samples:
        by_form = counts.setdefault(s.meta["kind"], {str(f): 0 for f in ItemForm})
        by_form[s.meta["format"]] += 1
    rows = [f"| {kind} | {c['open']} | {c['mcq']} |" for kind, c in counts.items()]
    stats = "\n".join(
        [
            f"# Generic skills: {len(samples)} items over {n_videos} videos (seed {seed})",
            "",
            "| kind | open | multiple choice |",
            "|---|---:|---:|",
            *rows,
            "",
        ]
    )
    return BuildReport(stats, {"seed": seed, "videos": n_videos, "items": len(samples), "by_kind": counts})
