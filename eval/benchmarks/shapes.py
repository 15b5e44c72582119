"""Which visual-prompt shape a V2P-Bench question refers to, read from its wording.

The release has no shape field, so per-shape scores need a rule over the question text, with an
``unknown`` bucket for questions that name no marker.
"""

from __future__ import annotations

import re

UNKNOWN = "unknown"
SHAPES = ("rectangle", "ellipse", "triangle", "mask_contour", "scribble", "point", "arrow", "som")

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
