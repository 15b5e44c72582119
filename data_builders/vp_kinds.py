"""The visual-prompt question kinds: one row of :data:`VP_KINDS` each, the one place a kind is defined.

A row says what the kind is called (``builder.kinds`` lists these names, :class:`QuestionKind
<data_builders.cli_config.QuestionKind>` is made from them), whether a track's annotations can answer it
about a target at all (``supports``), how a question of it is made (``make``: an item, or None when this
target, frame or draw does not give a clear question), and its ``category``: the code rows carry (our own;
the V2P-Bench release leaves the field undocumented). Dimension ids are those of
:data:`core.formats.v2p.DIMENSIONS`. Adding a kind is adding a row.

==========  ==========  ========  ====================================  ================================
kind        dimension   category  options                               needs
==========  ==========  ========  ====================================  ================================
colour      1 OA        1         colours                               a ``colour`` attribute
shape       1 OA        2         shapes                                a ``shape`` attribute
direction   3 OD        3         left / right / up / down              clear single-axis motion
count       10 GC       4         numbers                               an exhaustive track (all objects)
order       5 FT, 6 RT  5         before / after / at the same time     another object nameable in words
visibility  5 FT, 6 RT  6         stays / comes back / not seen again   nothing (asked when unambiguous)
class       1 OA        7         object categories                     a ``class`` attribute
==========  ==========  ========  ====================================  ================================

``visibility`` asks whether the target goes out of sight after (FT) or before (RT) the moment of the
prompt frame, from the frames where it has no box (GOT-10k's absence labels, LaSOT's occlusion and
out-of-view flags, or the frames the synthetic world leaves it out of). A one-object GOT-10k /
LaSOT track therefore gets direction, visibility and class questions; colour and shape questions
need an attribute those datasets do not have, so they are skipped, as are count and order.

Every random choice is drawn from the build's ``rng``, in a fixed order, so a seed gives the same rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from data_builders.sources.tracks import frames_visible

_DIRECTIONS = ("left", "right", "up", "down")
_ORDER = ("before", "after", "at the same time")
_AFTER = (
    "It stays in sight until the end of the video",
    "It goes out of sight and comes back later",
    "It goes out of sight and is not seen again",
)
_BEFORE = (
    "It is in sight from the start of the video",
    "It comes into sight after the video starts",
    "It goes out of sight for a while and comes back",
)
_MIN_GAP_S = 0.5  # shorter absences (or returns) are too brief to tell apart by eye: no question


@dataclass(frozen=True)
class Asked:
    """What a question is about: ``target``, an object of ``track``, marked by ``noun`` ("the box") on frame
    ``keyframe``; ``vocab`` holds the option pools of the attribute kinds (``{"colour": [...], ...}``)."""

    target: dict[str, Any]
    track: dict[str, Any]
    noun: str
    keyframe: int
    vocab: dict[str, list[str]]

    @property
    def marked(self) -> str:
        """How every question names the target: by its prompt only, never by its attributes."""
        return f"the object marked by {self.noun}"


# A kind's item: the stem, the options (shuffled), the answer's index and text, the V2P dimension.
Item = dict[str, Any]


@dataclass(frozen=True)
class VpKind:
    """One question kind: its name, whether a track can answer it about a target (``supports(target,
    track)``), how an item is made (``make(asked, rng)``, None when no clear question), its row code."""

    name: str
    supports: Callable[[dict[str, Any], dict[str, Any]], bool]
    make: Callable[[Asked, np.random.Generator], Item | None]
    category: int


def word_set(text: str) -> set[str]:
    """The lower-case words of ``text`` (to keep a target's attributes out of what names it)."""
    return set(re.findall(r"[a-z]+", text.lower()))


def _item(stem: str, answer: str, distractors: list[str], dimension: int, rng: np.random.Generator) -> Item:
    options = [answer, *map(str, distractors)]
    order = rng.permutation(len(options))
    options = [options[i] for i in order]
    return {
        "stem": stem,
        "options": options,
        "answer": options.index(answer),
        "answer_text": answer,
        "dimension": dimension,
    }


# --- what a track supports -------------------------------------------------------------------------


def _has_attribute(key: str, target: dict[str, Any], track: dict[str, Any]) -> bool:
    return key in target.get("attributes", {})


def _always(target: dict[str, Any], track: dict[str, Any]) -> bool:
    return True


def _exhaustive(target: dict[str, Any], track: dict[str, Any]) -> bool:
    """Every object of the video is annotated (counting needs all of them)."""
    return bool(track.get("exhaustive", True))


def _several_objects(target: dict[str, Any], track: dict[str, Any]) -> bool:
    return len(track["objects"]) > 1


# --- the items --------------------------------------------------------------------------------------


def _attribute_item(key: str, asked: Asked, rng: np.random.Generator) -> Item | None:
    """ "What colour is <marked>?" ("What is <marked>?" for the class), other values of the pool as
    distractors; None when the pool has no other value."""
    answer = asked.target["attributes"][key]
    pool = [v for v in asked.vocab.get(key, []) if v != answer]
    if not pool:
        return None
    stem = f"What is {asked.marked}?" if key == "class" else f"What {key} is {asked.marked}?"
    return _item(stem, answer, list(rng.permutation(pool)[:3]), 1, rng)


def _direction_item(asked: Asked, rng: np.random.Generator) -> Item | None:
    direction = _direction(asked.target, asked.track)
    if direction is None:
        return None
    others = [d for d in _DIRECTIONS if d != direction]
    return _item(f"In which direction does {asked.marked} move?", direction, others, 3, rng)


def _direction(target: dict[str, Any], track: dict[str, Any]) -> str | None:
    """The dominant direction of on-screen motion, or None when it is small, diagonal or back-and-forth."""
    frames = sorted(target["boxes"], key=int)
    # Centres about every half second: box jitter on real tracks would otherwise inflate the path.
    step = max(1, round(float(track["fps"]) / 2))
    centres = np.array([_centre(target["boxes"][f]) for f in frames[::step] + frames[-1:]])
    dx, dy = centres[-1] - centres[0]
    along, across = max(abs(dx), abs(dy)), min(abs(dx), abs(dy))
    # Ask only about clearly visible, clearly single-axis motion (>= 8% of the frame's short side) ...
    if along < 0.08 * min(track["width"], track["height"]) or across * 2 > along:
        return None
    axis = 0 if abs(dx) > abs(dy) else 1
    # ... that mostly keeps going one way (the path along the axis at most 1.5 times the net move).
    if np.abs(np.diff(centres[:, axis])).sum() > 1.5 * along:
        return None
    if axis == 0:
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


def _centre(box: list[float]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _count_item(asked: Asked, rng: np.random.Generator) -> Item:
    objects, target, marked = asked.track["objects"], asked.target, asked.marked
    same_shape = all("shape" in o.get("attributes", {}) for o in objects)
    if same_shape and rng.random() >= 0.5:
        stem = f"How many objects in the video have the same shape as {marked}, counting it too?"
        answer = sum(o["attributes"]["shape"] == target["attributes"]["shape"] for o in objects)
    else:
        stem = f"How many objects appear in the video in total, including {marked}?"
        answer = len(objects)
    low = int(rng.integers(max(1, answer - 3), answer + 1))
    distractors = [n for n in range(low, low + 4) if n != answer]
    return _item(stem, str(answer), distractors, 10, rng)


def _order_item(asked: Asked, rng: np.random.Generator) -> Item | None:
    """Did the target first appear before/after another object, which is named in words?"""
    target, track, marked = asked.target, asked.track, asked.marked
    banned = word_set(" ".join(target.get("attributes", {}).values())) | word_set(asked.noun)
    names = Counter(_name(o) for o in track["objects"])
    others = [
        o
        for o in track["objects"]
        if o is not target and _name(o) and names[_name(o)] == 1 and not word_set(_name(o)) & banned
    ]
    if not others:
        return None
    other = others[int(rng.integers(len(others)))]
    gap = (_first_frame(target) - _first_frame(other)) / float(track["fps"])
    if 0 < abs(gap) < 0.5:  # too close to tell apart by eye
        return None
    ask = "Did {} first appear before, after or at the same time as {}?"
    if rng.random() < 0.5:  # forward: the target relative to the other
        stem, dimension, sign = ask.format(marked, f"the {_name(other)}"), 5, 1
    else:  # reverse: the other relative to the target
        stem, dimension, sign = ask.format(f"the {_name(other)}", marked), 6, -1
    answer = _ORDER[2] if gap == 0 else _ORDER[0] if sign * gap < 0 else _ORDER[1]
    return _item(stem, answer, [o for o in _ORDER if o != answer], dimension, rng)


def _name(obj: dict[str, Any]) -> str | None:
    """How an object is named in words: "red circle", else its class, else None (not nameable)."""
    attrs = obj.get("attributes", {})
    if "colour" in attrs and "shape" in attrs:
        return f"{attrs['colour']} {attrs['shape']}"
    return attrs.get("class")


def _first_frame(obj: dict[str, Any]) -> int:
    return min(map(int, obj["boxes"]))


def _visibility_item(asked: Asked, rng: np.random.Generator) -> Item | None:
    """Does the target go out of sight after (FT) or before (RT) the prompt frame? None if unclear."""
    track, keyframe, marked = asked.track, asked.keyframe, asked.marked
    visible = frames_visible(track, asked.target)
    min_run = max(2, round(_MIN_GAP_S * float(track["fps"])))
    if rng.random() < 0.5:
        pattern = _run_pattern(visible[keyframe:], min_run)
        answers = {(True,): 0, (True, False, True): 1, (True, False): 2}
        stem, options, dimension = (
            f"After the moment of the marked frame, what happens to {marked}?",
            _AFTER,
            5,
        )
    else:
        pattern = _run_pattern(visible[: keyframe + 1][::-1], min_run)  # read backwards from the keyframe
        answers = {(True,): 0, (True, False): 1, (True, False, True): 2}
        stem, options, dimension = (
            f"Before the moment of the marked frame, was {marked} always in sight?",
            _BEFORE,
            6,
        )
    if pattern not in answers:
        return None
    answer = options[answers[pattern]]
    return _item(stem, answer, [o for o in options if o != answer], dimension, rng)


def _run_pattern(visible: np.ndarray, min_run: int) -> tuple[bool, ...] | None:
    """Visible/absent runs from the keyframe on, e.g. ``(True, False, True)``; None if a run after the
    first is shorter than ``min_run`` frames, or more than one absence (too ambiguous to ask)."""
    edges = np.flatnonzero(np.diff(visible.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(visible)]
    runs = [(bool(visible[a]), b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if any(length < min_run for _, length in runs[1:]) or len(runs) > 3:
        return None
    return tuple(value for value, _ in runs)


# The kinds, in the order builder.kinds lists them by default: a build draws a kind by its position among
# those a target supports, so this order is part of what a seed produces.
VP_KINDS: dict[str, VpKind] = {
    kind.name: kind
    for kind in (
        VpKind("colour", partial(_has_attribute, "colour"), partial(_attribute_item, "colour"), category=1),
        VpKind("shape", partial(_has_attribute, "shape"), partial(_attribute_item, "shape"), category=2),
        VpKind("direction", _always, _direction_item, category=3),
        VpKind("count", _exhaustive, _count_item, category=4),
        VpKind("order", _several_objects, _order_item, category=5),
        VpKind("visibility", _always, _visibility_item, category=6),
        VpKind("class", partial(_has_attribute, "class"), partial(_attribute_item, "class"), category=7),
    )
}
