"""Drawing a visual prompt on a keyframe, the way users mark objects on V2P-Bench.

Every outline shape is built as a polyline so that ``doodle=True`` can jitter any of them the
same way: resample densely, add smooth random offsets, and leave closed shapes slightly open.
(``point``, ``som`` and ``mask_contour`` are drawn clean even when doodled: a filled dot, a label
box and a pixel ring have no stroke to shake.)

:func:`sample_style` draws a prompt's look (colour, line width, doodle) from a seeded generator,
so a build varies its prompts the way different users would while staying reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from core.vocab import PROMPT_SHAPES, PromptShape

Box = tuple[float, float, float, float]
Points = list[tuple[float, float]]


SHAPES = PROMPT_SHAPES
# The shapes a build draws unless told otherwise: all 8, as V2P-Bench's prompts take.
DEFAULT_SHAPES = tuple(PromptShape)

# Stroke colours a prompt may take, by name (the name lets a builder avoid a colour that matches
# what the question asks about, e.g. a red box around a red object in a colour question).
PROMPT_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 30, 30),
    "green": (30, 230, 60),
    "blue": (40, 110, 255),
    "yellow": (255, 230, 0),
    "white": (255, 255, 255),
    "magenta": (255, 0, 220),
    "cyan": (0, 235, 255),
    "orange": (255, 140, 0),
}


# Closer than this (Euclidean RGB distance) a stroke hardly stands out: orange on a red object is 109.
_ALIKE_RGB = 120.0


def colours_alike(rgb: Sequence[float]) -> list[str]:
    """The prompt colours too close to ``rgb`` to stand out on it (to avoid for a target of that colour)."""
    return [name for name, value in PROMPT_COLOURS.items() if math.dist(value, rgb) < _ALIKE_RGB]


@dataclass(frozen=True)
class PromptStyle:
    """How one prompt looks: stroke colour (a key of :data:`PROMPT_COLOURS`), width, doodle, SoM label."""

    colour: str = "red"
    width: int = 2
    doodle: bool = False
    label: int = 1

    @property
    def rgb(self) -> tuple[int, int, int]:
        return PROMPT_COLOURS[self.colour]


def sample_style(
    rng: np.random.Generator,
    *,
    colours: Sequence[str],
    widths: Sequence[int],
    doodle_share: float,
    avoid: Sequence[str] = (),
) -> PromptStyle:
    """Draw a prompt style: a colour not in ``avoid`` (unless all are), a width, doodle or not, a label 1-9.

    Raises:
        ValueError: an unknown colour name, an empty list, a width below 1 or a share outside [0, 1].
    """
    unknown = sorted(set(colours) - set(PROMPT_COLOURS))
    if unknown or not colours:
        names = sorted(PROMPT_COLOURS)
        raise ValueError(f"colours must be a non-empty subset of {names}, got {list(colours)}")
    if not widths or min(widths) < 1:
        raise ValueError(f"widths must be a non-empty list of positive pixel widths, got {list(widths)}")
    if not 0.0 <= doodle_share <= 1.0:
        raise ValueError(f"doodle_share must be in [0, 1], got {doodle_share}")
    allowed = [c for c in colours if c not in set(avoid)] or list(colours)
    return PromptStyle(
        colour=str(allowed[int(rng.integers(len(allowed)))]),
        width=int(widths[int(rng.integers(len(widths)))]),
        doodle=bool(rng.random() < doodle_share),
        label=int(rng.integers(1, 10)),
    )


def scaled_width(width: int, height: int, img_width: int) -> int:
    """A stroke width for this frame size: as given up to a 256-px short side, then proportionally thicker.

    Widths are specified for small frames; the same 2 px would vanish on a 1080p keyframe.
    """
    return width * max(1, min(height, img_width) // 256)


def polygon_mask(polygons: Sequence[Sequence[Sequence[float]]], height: int, width: int) -> np.ndarray:
    """Rasterise object polygons (each a list of ``[x, y]`` points) to a ``bool[H, W]`` mask."""
    canvas = Image.new("1", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    for polygon in polygons:
        draw.polygon([(float(x), float(y)) for x, y in polygon], fill=1)
    return np.asarray(canvas, dtype=bool)


def draw_prompt(
    image: np.ndarray,
    shape: str,
    box: Box,
    *,
    colour: tuple[int, int, int] = (255, 0, 0),
    width: int = 2,
    rng: np.random.Generator | None = None,
    doodle: bool = False,
    label: int = 1,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Draw one visual prompt marking ``box`` on a copy of ``image``.

    Args:
        image: ``uint8[H, W, 3]`` RGB keyframe; left untouched.
        shape: One of ``SHAPES``.
        box: Target ``(x0, y0, x1, y1)`` in pixels.
        colour: Stroke RGB.
        width: Stroke width in pixels.
        rng: Randomness for the arrow's direction and for doodle jitter; with ``None`` the
            drawing is still deterministic (fixed direction rule, fixed jitter seed).
        doodle: Jitter strokes for a hand-drawn look.
        label: The number a ``"som"`` (Set-of-Mark) tag shows.
        mask: Optional ``bool[H, W]`` object mask for ``"mask_contour"``; the box's inscribed
            ellipse stands in when omitted.

    Returns:
        A new ``uint8[H, W, 3]`` array with the prompt drawn.

    Raises:
        ValueError: On an unknown shape or an empty box.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown prompt shape {shape!r}; allowed: {', '.join(SHAPES)}")
    x0, y0, x1, y1 = (float(v) for v in box)
    if not (x1 > x0 and y1 > y0):
        raise ValueError(f"box must have x1 > x0 and y1 > y0, got {box}")
    box = (x0, y0, x1, y1)
    jitter_rng = (rng if rng is not None else np.random.default_rng(0)) if doodle else None

    if shape == "mask_contour":
        return _draw_mask_contour(image, box, mask, colour, width)
    canvas = Image.fromarray(np.asarray(image, dtype=np.uint8).copy())
    draw = ImageDraw.Draw(canvas)
    if shape == "point":
        radius = max(3.0, 1.5 * width)
        cx, cy = _centre(box)
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=colour)
    elif shape == "arrow":
        _draw_arrow(draw, box, canvas.size, colour, width, rng, jitter_rng)
    elif shape == "som":
        _draw_som_tag(draw, box, canvas.size, colour, label)
    else:
        points, closed = _OUTLINES[shape](box)
        _stroke(draw, points, closed, colour, width, jitter_rng)
    return np.asarray(canvas).copy()


def _centre(box: Box) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _rectangle(box: Box) -> tuple[Points, bool]:
    x0, y0, x1, y1 = box
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)], True


def _ellipse(box: Box) -> tuple[Points, bool]:
    cx, cy = _centre(box)
    rx, ry = (box[2] - box[0]) / 2, (box[3] - box[1]) / 2
    angles = np.linspace(0, 2 * math.pi, 96, endpoint=False)
    return [(cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in angles], True


def _triangle(box: Box) -> tuple[Points, bool]:
    # The smallest upright isosceles triangle with this base line whose sides pass through the
    # box's top corners: apex one box-height above the box, base twice the box's width.
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    return [((x0 + x1) / 2, y0 - h), (x1 + w / 2, y1), (x0 - w / 2, y1)], True


def _scribble(box: Box) -> tuple[Points, bool]:
    # A zigzag over the inner 80% of the box, like a highlighter pass over the object.
    x0, y0, x1, y1 = box
    mx, my = 0.1 * (x1 - x0), 0.1 * (y1 - y0)
    rows = np.linspace(y0 + my, y1 - my, 5)
    return [(x0 + mx if i % 2 == 0 else x1 - mx, y) for i, y in enumerate(rows)], False


_OUTLINES = {"rectangle": _rectangle, "ellipse": _ellipse, "triangle": _triangle, "scribble": _scribble}


def _stroke(
    draw: ImageDraw.ImageDraw,
    points: Points,
    closed: bool,
    colour: tuple[int, int, int],
    width: int,
    jitter_rng: np.random.Generator | None,
) -> None:
    if closed:
        points = points + [points[0]]
    if jitter_rng is not None:
        points = _doodle(points, closed, jitter_rng)
    draw.line(points, fill=colour, width=width, joint="curve")


def _doodle(points: Points, closed: bool, rng: np.random.Generator) -> Points:
    """Resample a polyline every ~3 px and add smooth random offsets (a shaky hand)."""
    xy = np.asarray(points, dtype=float)
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
    s = np.linspace(0, arc[-1], max(8, int(arc[-1] / 3)))
    dense = np.stack([np.interp(s, arc, xy[:, 0]), np.interp(s, arc, xy[:, 1])], axis=1)
    if closed:  # run a little past the start, as a hand closing a loop does
        dense = np.concatenate([dense, dense[1 : 2 + len(dense) // 12]])
    amplitude = max(1.0, 0.01 * arc[-1])
    # A moving average over white noise keeps the wobble low-frequency rather than spiky.
    noise = rng.normal(0, amplitude, size=(len(dense) + 6, 2))
    kernel = np.ones(7) / 7
    wobble = np.stack([np.convolve(noise[:, k], kernel, mode="valid") for k in range(2)], axis=1)
    return [tuple(p) for p in (dense + 2.0 * wobble).tolist()]


def _draw_arrow(
    draw: ImageDraw.ImageDraw,
    box: Box,
    size: tuple[int, int],
    colour: tuple[int, int, int],
    width: int,
    rng: np.random.Generator | None,
    jitter_rng: np.random.Generator | None,
) -> None:
    """An arrow from outside the box whose tip touches the box edge, aimed at its centre."""
    cx, cy = _centre(box)
    length = max(12.0, 0.2 * min(size))
    candidates = np.linspace(0, 2 * math.pi, 8, endpoint=False)
    # Come from the side with the most room so the tail stays in the image; with an rng, from a
    # random direction that still leaves room for the whole arrow (a few tries, then the roomiest).
    angle = max(candidates, key=lambda a: _room(cx, cy, a, size))
    if rng is not None:
        for random_angle in rng.uniform(0, 2 * math.pi, size=8):
            if _room(cx, cy, random_angle, size) >= _to_edge(box, random_angle) + 1 + length:
                angle = float(random_angle)
                break
    dx, dy = math.cos(angle), math.sin(angle)
    # Distance from the centre to the box edge along (dx, dy), plus a gap so the tip is visible.
    to_edge = _to_edge(box, angle)
    tip = (cx + dx * (to_edge + 1), cy + dy * (to_edge + 1))
    tail = (tip[0] + dx * length, tip[1] + dy * length)
    _stroke(draw, [tail, tip], False, colour, width, jitter_rng)
    head = max(5.0, 2.5 * width)
    left = (tip[0] + head * (dx * 1.6 - dy), tip[1] + head * (dy * 1.6 + dx))
    right = (tip[0] + head * (dx * 1.6 + dy), tip[1] + head * (dy * 1.6 - dx))
    draw.polygon([tip, left, right], fill=colour)


def _to_edge(box: Box, angle: float) -> float:
    """Distance from the box centre to its edge in the direction ``angle``."""
    half_w, half_h = (box[2] - box[0]) / 2, (box[3] - box[1]) / 2
    return min(half_w / max(abs(math.cos(angle)), 1e-9), half_h / max(abs(math.sin(angle)), 1e-9))


def _room(x: float, y: float, angle: float, size: tuple[int, int]) -> float:
    """How far one can go from (x, y) towards ``angle`` before leaving the image."""
    dx, dy = math.cos(angle), math.sin(angle)
    limits = []
    if abs(dx) > 1e-9:
        limits.append(((size[0] if dx > 0 else 0) - x) / dx)
    if abs(dy) > 1e-9:
        limits.append(((size[1] if dy > 0 else 0) - y) / dy)
    return min(limits)


def _draw_som_tag(
    draw: ImageDraw.ImageDraw,
    box: Box,
    size: tuple[int, int],
    colour: tuple[int, int, int],
    label: int,
) -> None:
    """A Set-of-Mark tag: a filled label box with a number, just above the target's top-left."""
    font = _font(max(9, min(size) // 10))
    text = str(label)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    tag_w, tag_h = right - left + 4, bottom - top + 4
    x = min(max(box[0], 0), size[0] - tag_w)
    y = box[1] - tag_h - 1 if box[1] - tag_h - 1 >= 0 else min(box[3] + 1, size[1] - tag_h)
    draw.rectangle((x, y, x + tag_w - 1, y + tag_h - 1), fill=colour)
    luminance = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]
    ink = (0, 0, 0) if luminance > 128 else (255, 255, 255)
    draw.text((x + 2 - left, y + 2 - top), text, fill=ink, font=font)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType has only the fixed bitmap font
        return ImageFont.load_default()


def _draw_mask_contour(
    image: np.ndarray, box: Box, mask: np.ndarray | None, colour: tuple[int, int, int], width: int
) -> np.ndarray:
    """Outline the mask's boundary just outside the object, ``width`` pixels thick."""
    height, img_w = image.shape[:2]
    if mask is None:
        cx, cy = _centre(box)
        rx, ry = (box[2] - box[0]) / 2, (box[3] - box[1]) / 2
        ys, xs = np.mgrid[0:height, 0:img_w] + 0.5
        mask = ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1.0
    mask = np.asarray(mask, dtype=bool)
    grown = mask
    for _ in range(max(1, width)):
        grown = _dilate(grown)
    out = np.asarray(image, dtype=np.uint8).copy()
    out[grown & ~mask] = colour
    return out


def _dilate(mask: np.ndarray) -> np.ndarray:
    """One step of 8-neighbour binary dilation."""
    padded = np.pad(mask, 1)
    h, w = mask.shape
    grown = np.zeros_like(mask)
    for dy in range(3):
        for dx in range(3):
            grown |= padded[dy : dy + h, dx : dx + w]
    return grown
