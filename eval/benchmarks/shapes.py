"""Which visual-prompt shape a V2P-Bench question refers to, read from its wording.

The release has no shape field, so per-shape scores need a rule over the question text, with an
``unknown`` bucket for questions that name no marker ("the selected person", "the small mark"). The
vocabulary is the release's own: besides box / circle / arrow / dot, its questions say "detection frame"
or "bbox" for rectangles, "circled" alone for ellipses, "graffiti", "doodle", "freehand", "sketch" or a
coloured "line" for scribbles, "outlined" or "mask outline" for contours, "pinpointed" or "a blue point"
for points, "pointed by" for arrows, and "labeled 2", "<1>", "No. 2", "digit 1" or "person 1 and 2" for
Set-of-Mark tags, and a tag's bare number as a noun ("between 1 and 2", "what does 1 do"). Counted over
the 1,169 questions of the release's response file, 48 (4.1%) are left unknown: 42 name no marker at all
("the selected person", "Who won the second game?") and 6 a mark of no stated shape ("a blue mark").
"""

from __future__ import annotations

import re

from core.vocab import PROMPT_SHAPES

UNKNOWN = "unknown"
SHAPES = PROMPT_SHAPES

# Marker nouns as questions write them (plurals and the release's misspellings spelled out).
_SHAPE_NOUNS: dict[str, tuple[str, ...]] = {
    "rectangle": (
        "bounding box",
        "bounding boxes",
        "detection frame",
        "detection frames",
        "detection box",
        "detection boxes",
        "bbox",
        "bboxes",
        "box",
        "boxes",
        "rectangle",
        "rectangles",
        "wireframe",
    ),
    "ellipse": ("circle", "circles", "ellipse", "ellipses", "oval", "ovals"),
    "triangle": ("triangle", "triangles", "triagnle"),
    "mask_contour": ("mask outline", "contour", "contours", "outline", "outlines", "mask", "masks"),
    "scribble": (
        "scribble",
        "scribbles",
        "doodle",
        "doodles",
        "doodel",
        "graffiti",
        "freehand",
        "sketch",
        "drawn mark",
        "line",
        "lines",
    ),
    "point": ("dot", "dots", "dotted mark", "point", "points"),
    "arrow": ("arrow", "arrows"),
    "som": ("number tag", "number tags", "numeric tag", "numeric tags", "tag", "tags", "label", "labels"),
}
_NOUN_TO_SHAPE = {noun: shape for shape, nouns in _SHAPE_NOUNS.items() for noun in nouns}
# A shape adjective names the shape of whatever it qualifies ("the triangular frame").
_ADJECTIVE_TO_SHAPE = {
    "rectangular": "rectangle",
    "circular": "ellipse",
    "oval": "ellipse",
    "triangular": "triangle",
}
# Verbs that name the marker's shape themselves ("the circled person", "pointed by ...").
_VERB_TO_SHAPE = {
    "circled": "ellipse",
    "encircled": "ellipse",
    "boxed": "rectangle",
    "framed": "rectangle",
    "outlined": "mask_contour",
    "scribbled": "scribble",
    "doodled": "scribble",
    "pinpointed": "point",
    "pointed": "arrow",
    "pointing": "arrow",
}
_COLOURS = (
    r"red|blue|yellow|green|purple|orange|pink|black|white|cyan|magenta|grey|gray|light\s+\w+|dark\s+\w+"
)


def _alternatives(words) -> str:
    return "|".join(sorted((re.escape(word) for word in words), key=len, reverse=True))


_ANY_NOUN = _alternatives(_NOUN_TO_SHAPE)
_MODIFIERS = r"(?:[a-z-]+\s+){0,2}?"  # up to two words such as "red", "big yellow"
_MARKER_VERBS = (
    r"marked|indicated|highlighted|enclosed|surrounded|circled|encircled|framed|outlined|labell?ed|tagged"
    r"|annotated|pointed\s+(?:to|at)|pointed|selected|specified|denoted|shown|drawn|identified|pinpointed"
)
# Stage 1: a marker noun in a phrase that makes it the drawn marker. Each captures the noun as "noun".
_MARKER_PHRASES = [
    re.compile(p, re.IGNORECASE)
    for p in (
        # "marked by the red box", "pointed to by the arrow", "circled in the green box"
        rf"\b(?:{_MARKER_VERBS})\s+(?:by|with|in|using|within)\s+(?:the\s+|an?\s+)?{_MODIFIERS}"
        rf"(?P<noun>{_ANY_NOUN})\b",
        # "the box drawn", "the green arrow shown in the frame"
        rf"\b(?:the|an?)\s+{_MODIFIERS}(?P<noun>{_ANY_NOUN})\s+(?:drawn|shown|marked|annotated|in\s+the"
        rf"\s+(?:image|frame|picture|figure))\b",
        # "the person in the red box", "inside the oval", "within the contour"
        rf"\b(?:in|inside|within|enclosed\s+by)\s+(?:the|an?)\s+{_MODIFIERS}(?P<noun>{_ANY_NOUN})\b",
        # "the red graffiti", "a blue point on it", "the yellow lines": a colour makes a noun a marker
        rf"\b(?:{_COLOURS})(?:\s+|-)(?P<noun>{_ANY_NOUN})\b",
    )
]
_ADJECTIVE_PHRASE = re.compile(rf"\b(?P<adjective>{_alternatives(_ADJECTIVE_TO_SHAPE)})\b", re.IGNORECASE)
# Set-of-Mark numbers: "labeled 2", "marked as No. 2", "<1>", "number 3", "digit 1", "person 1 and 2".
_SOM_PHRASES = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?:labell?ed|marked|tagged|numbered)\s+(?:as\s+|with\s+)?(?:the\s+)?(?:number\s+|no\.\s*|#\s*)?\d+\b",
        r"\b(?:number|numeric|tag|label|mark|marker|digit)\s*#?\s*\d+\b",
        r"\bno\.\s*\d+\b",
        r"<\d+>",
        r"\bnumbered\s+(?:tags?|labels?|marks?|objects?|persons?|people)\b",
        r"\bmarked\s+with\s+(?:a\s+|different\s+)?numbers?\b",
        r"\b(?:person|people|man|men|woman|women|object|objects|player|players|item|items|child|boy|girl|car"
        r"|animal|individual|character)\s+\d+\b(?!\s*(?:s|seconds?|minutes?|meters?|m|years?|%))",
        # a tag's number as the sentence's noun: "between 1 and 2", "2's expression", "what does 1 do",
        # "the speech 1 made", "what talent do 3 have" (a time "14:23", a score "1-1", a count "2 people"
        # are not)
        r"(?<![\d:.-])\b[1-9]\b(?![:.-]\d)(?=\s*(?:'s\b|(?:and|or|do|does|did|is|are|was|were|has|have|had"
        r"|made|meet|meets|play|plays|playing|sing|sings|collide|collides)\b|[?,]))",
        r"\bmarked\s+(?:in\s+\w+\s+)?as\s+\d+\b",  # "the man marked in red as 1"
        r"\bnumbered\s+[a-z]+",  # "the numbered bottles", "the four numbered items"
        r"\bwith\s+numbers\b",  # "the people with numbers"
    )
]
# "the object that has a point on it": a point drawn on the object, not "at which point"
_POINT_ON = re.compile(r"\b(?:has|with)\s+a\s+point\s+on\s+(?:it|him|her|them)\b", re.IGNORECASE)
# A coloured "frame" is a drawn box ("the person in the yellow frame"); a plain "frame" is the video's.
_COLOURED_FRAME = re.compile(rf"\b(?:{_COLOURS})\s+frames?\b", re.IGNORECASE)
# Stage 3: plain keywords. "point", "number", "label", "mask" and "line" are left out here because they
# are common in ordinary questions ("at which point", "the number of", "wearing a mask", "the finish
# line"); the phrases of stage 1 still catch them as markers.
_FALLBACK_KEYWORD = re.compile(
    r"\b(?P<noun>bounding box(?:es)?|detection (?:frame|box)(?:es|s)?|bbox(?:es)?|box(?:es)?|rectangles?"
    r"|circles?|ellipses?|ovals?|triangles?|triagnle|contours?|outlines?|scribbles?|doodles?|doodel"
    r"|graffiti|freehand|sketch|dots?|arrows?|number tags?)\b",
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
    tags), or ``"unknown"``. Only the question stem is read, not the option lines. Three stages, so that a
    shape word naming an *object* ("the box circled in purple", "the circled arrow") is not taken for the
    marker when the question names the marker otherwise:

    1. marker phrases, the earliest in the text winning: a marker noun after a marking verb ("marked by
       the red box", "circled in the green box"), in an enclosing phrase ("the man in the box"), after a
       colour ("the red graffiti", "a blue point"), a shape adjective ("the triangular frame"), or a
       Set-of-Mark number ("labeled 2", "<1>", "person 1 and 2");
    2. a verb that names the shape by itself: "circled", "pointed by", "pinpointed", "outlined" …;
    3. the first plain shape keyword (box, circle, graffiti, dot, arrow …; not the everyday words
       point/number/label/mask/line).
    """
    stem = question_stem(question)
    found: list[tuple[int, str]] = []
    for pattern in _MARKER_PHRASES:
        for match in pattern.finditer(stem):
            found.append((match.start(), _NOUN_TO_SHAPE[_normalise(match.group("noun"))]))
    for match in _ADJECTIVE_PHRASE.finditer(stem):
        found.append((match.start(), _ADJECTIVE_TO_SHAPE[_normalise(match.group("adjective"))]))
    for pattern in _SOM_PHRASES:
        found.extend((match.start(), "som") for match in pattern.finditer(stem))
    found.extend((match.start(), "rectangle") for match in _COLOURED_FRAME.finditer(stem))
    found.extend((match.start(), "point") for match in _POINT_ON.finditer(stem))
    if found:
        return min(found)[1]
    verbs = re.search(rf"\b(?P<verb>{_alternatives(_VERB_TO_SHAPE)})\b", stem, re.IGNORECASE)
    if verbs:
        return _VERB_TO_SHAPE[verbs.group("verb").lower()]
    keyword = _FALLBACK_KEYWORD.search(stem)
    return (
        _NOUN_TO_SHAPE.get(_normalise(keyword.group("noun")), _keyword_shape(keyword.group("noun")))
        if keyword
        else UNKNOWN
    )


def _keyword_shape(noun: str) -> str:
    """The shape of a fallback keyword the noun table lacks in that exact form ("detection frames")."""
    folded = _normalise(noun)
    return next(shape for shape, nouns in _SHAPE_NOUNS.items() if any(folded.startswith(n) for n in nouns))


def _normalise(noun: str) -> str:
    return re.sub(r"\s+", " ", noun.lower())
