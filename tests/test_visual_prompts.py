"""Visual prompts: each shape marks the target where it should, on a copy of the frame."""

from __future__ import annotations

import numpy as np
import pytest

from core.vocab import PROMPT_NOUNS
from data_builders.visual_prompts import SHAPES, draw_prompt

WHITE = (255, 255, 255)
BOX = (24.0, 24.0, 48.0, 40.0)  # x0, y0, x1, y1
CENTRE = (36, 32)  # x, y


@pytest.fixture
def frame() -> np.ndarray:
    return np.full((80, 96, 3), 48, dtype=np.uint8)


def changed(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """bool[H, W]: pixels the prompt touched."""
    return np.any(before != after, axis=-1)


def is_set(mask: np.ndarray, x: int, y: int) -> bool:
    return bool(mask[y, x])


def test_nouns_cover_every_shape():
    assert set(PROMPT_NOUNS) == set(SHAPES)
    assert PROMPT_NOUNS["rectangle"] == "the box"
    assert PROMPT_NOUNS["som"] == "the number tag"


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_draws_in_the_prompt_colour_on_a_copy(frame, shape):
    original = frame.copy()
    out = draw_prompt(frame, shape, BOX, colour=WHITE, label=2)
    assert np.array_equal(frame, original), "input must be left untouched"
    assert not np.shares_memory(out, frame)
    assert out.shape == frame.shape and out.dtype == np.uint8
    touched = changed(frame, out)
    assert touched.sum() > 5
    assert np.any(np.all(out[touched] == WHITE, axis=-1))


def test_rectangle_marks_the_outline_not_the_centre(frame):
    touched = changed(frame, draw_prompt(frame, "rectangle", BOX, colour=WHITE))
    assert is_set(touched, 24, 32) and is_set(touched, 48, 32)  # left and right edges
    assert is_set(touched, 36, 24) and is_set(touched, 36, 40)  # top and bottom edges
    assert not is_set(touched, *CENTRE)
    assert not touched[:, :20].any(), "nothing far outside the box"


def test_ellipse_marks_the_edges_but_not_the_box_corners(frame):
    touched = changed(frame, draw_prompt(frame, "ellipse", BOX, colour=WHITE))
    assert is_set(touched, 36, 24) and is_set(touched, 24, 32)
    assert not is_set(touched, *CENTRE)
    assert not is_set(touched, 25, 25), "a circle, not a box"


def test_point_marks_the_centre_only(frame):
    touched = changed(frame, draw_prompt(frame, "point", BOX, colour=WHITE))
    assert is_set(touched, *CENTRE)
    assert not is_set(touched, 24, 24) and not is_set(touched, 24, 32)


def test_arrow_starts_outside_and_its_tip_touches_the_box(frame):
    touched = changed(frame, draw_prompt(frame, "arrow", BOX, colour=WHITE))
    ys, xs = np.nonzero(touched)
    x0, y0, x1, y1 = (int(v) for v in BOX)
    inside = (xs > x0) & (xs < x1 - 1) & (ys > y0) & (ys < y1 - 1)
    assert not inside.any(), "the arrow must not cover the target"
    # Distance of each touched pixel to the box: the tip sits right at the edge.
    gap = np.maximum.reduce([x0 - xs, xs - x1, y0 - ys, ys - y1, np.zeros_like(xs)])
    assert gap.min() <= 3
    assert gap.max() >= 10, "the shaft reaches away from the box"


def test_arrow_without_rng_comes_from_the_side_with_room(frame):
    near_left_edge = (1.0, 30.0, 17.0, 46.0)
    touched = changed(frame, draw_prompt(frame, "arrow", near_left_edge, colour=WHITE))
    xs = np.nonzero(touched)[1]
    assert xs.min() >= 16 and xs.max() >= 30, "the arrow points in from the open side"


def test_arrow_direction_follows_the_rng_deterministically(frame):
    def draw(seed: int) -> np.ndarray:
        return draw_prompt(frame, "arrow", BOX, colour=WHITE, rng=np.random.default_rng(seed))

    assert np.array_equal(draw(3), draw(3))
    assert any(not np.array_equal(draw(3), draw(seed)) for seed in range(4, 8))


def test_triangle_encloses_the_box(frame):
    touched = changed(frame, draw_prompt(frame, "triangle", BOX, colour=WHITE))
    assert not is_set(touched, *CENTRE)
    assert touched[: int(BOX[1]) - 4].any(), "the apex rises above the box"
    assert touched[int(BOX[3]) - 1 : int(BOX[3]) + 2, 20:52].all(axis=-1).any(), "a base line under the box"


def test_mask_contour_hugs_the_given_mask(frame):
    mask = np.zeros(frame.shape[:2], dtype=bool)
    mask[28:36, 30:42] = True
    touched = changed(frame, draw_prompt(frame, "mask_contour", BOX, colour=WHITE, mask=mask))
    assert not (touched & mask).any(), "the contour lies outside the object"
    assert touched[27, 35] and touched[36, 35] and touched[32, 29] and touched[32, 42]
    assert not touched[20].any()


def test_mask_contour_defaults_to_the_inscribed_ellipse(frame):
    touched = changed(frame, draw_prompt(frame, "mask_contour", BOX, colour=WHITE))
    assert not is_set(touched, *CENTRE)
    assert touched[20:44, 20:52].sum() > 30


def test_scribble_covers_the_target(frame):
    touched = changed(frame, draw_prompt(frame, "scribble", BOX, colour=WHITE))
    assert touched[24:40, 24:48].sum() > 30
    assert not touched[:, :22].any() and not touched[:, 50:].any()


def test_som_tag_sits_next_to_the_box_with_a_readable_number(frame):
    out = draw_prompt(frame, "som", BOX, colour=WHITE, label=7)
    touched = changed(frame, out)
    assert touched[: int(BOX[1])].any(), "the tag sits just above the box"
    assert not is_set(touched, *CENTRE)
    ys, xs = np.nonzero(touched)
    assert np.any(np.all(out[ys, xs] < 64, axis=-1)), "dark (antialiased) digits on a light tag"


def test_doodle_is_deterministic_and_differs_from_a_clean_stroke(frame):
    def doodle(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return draw_prompt(frame, "rectangle", BOX, colour=WHITE, doodle=True, rng=rng)

    clean = draw_prompt(frame, "rectangle", BOX, colour=WHITE)
    assert np.array_equal(doodle(1), doodle(1))
    assert not np.array_equal(doodle(1), clean)
    assert not np.array_equal(doodle(1), doodle(2))
    assert np.array_equal(
        draw_prompt(frame, "ellipse", BOX, doodle=True), draw_prompt(frame, "ellipse", BOX, doodle=True)
    )
    touched = changed(frame, doodle(1))
    assert not is_set(touched, *CENTRE)
    assert touched[16:48, 16:56].sum() == touched.sum(), "the wobble stays near the outline"


def test_unknown_shape_names_the_allowed_ones(frame):
    with pytest.raises(ValueError, match="rectangle.*som"):
        draw_prompt(frame, "hexagon", BOX)


def test_empty_box_is_rejected(frame):
    with pytest.raises(ValueError, match="x1 > x0"):
        draw_prompt(frame, "rectangle", (10, 10, 10, 20))
