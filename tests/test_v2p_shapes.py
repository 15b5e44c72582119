"""The shape rule on the wording of V2P-Bench's released questions: each case is a phrase pattern the
release uses (counted over its 1,169 questions; the file is not in this repository)."""

from __future__ import annotations

import pytest

from eval.benchmarks.shapes import prompt_shape

RELEASE_PATTERNS = [
    # rectangle: box 197, "detection frame" 36, "detection box" 33, "bounding box" 19, "bbox", "framed"
    ("What is the man in the box doing?", "rectangle"),
    ("What colour is the object in the red box?", "rectangle"),
    ("What does the person in the detection frame hold?", "rectangle"),
    ("Where is the car in the blue detection box going?", "rectangle"),
    ("What is the person inside the rectangle doing?", "rectangle"),
    ("Why are the two soldiers framed in red boxes running?", "rectangle"),
    ("What is marked in red bbox?", "rectangle"),
    # ellipse: "circled" 91 (87 without a noun), circle 70, ellipse 42, oval 6
    ("What is the circled person holding?", "ellipse"),
    ("What does the man in the yellow ellipse do next?", "ellipse"),
    ("Where does the woman inside the oval sit?", "ellipse"),
    ("How many cups are in the area selected by the blue circle?", "ellipse"),
    # triangle: 78, plus the typo "triagnle"
    ("What is the man marked with the red triangle doing?", "triangle"),
    ("What animal is within the triangular frame?", "triangle"),
    ("Where does the person marked by the green triagnle go?", "triangle"),
    # mask contour: contour 28, "outlined" 13, "mask outline", "mask"
    ("What is the object marked with the yellow contour?", "mask_contour"),
    ("What does the target with red mask outline do?", "mask_contour"),
    ("What is the person enclosed by the mask doing?", "mask_contour"),
    ("What is the outlined object used for?", "mask_contour"),
    # scribble: "graffiti" 48, doodle 36 (and "doodel"), coloured "line" 12, scribble, freehand, sketch
    ("What is the person with the red graffiti holding?", "scribble"),
    ("Which animal is marked with the doodle?", "scribble"),
    ("What is highlighted by the scribble?", "scribble"),
    ("What is the object outlined by the freehand?", "scribble"),
    ("What is indicated with the sketch?", "scribble"),
    ("What does the man marked by the green line do?", "scribble"),
    ("What is the woman marked with the doodel eating?", "scribble"),
    # point: dot 73, "point" as the marker 16, "pinpointed" 4
    ("Where does the car marked with a red dot go?", "point"),
    ("What is the little girl indicated by the point doing?", "point"),
    ("What is pinpointed by the dot?", "point"),
    ("What colour is the object with a blue point on it?", "point"),
    # arrow: 220, "pointed by/to/at" 160, "pointing" 29
    ("What is the object pointed by the yellow arrow?", "arrow"),
    ("What is the person the arrow is pointing to doing?", "arrow"),
    ("What does the man pointed to do next?", "arrow"),
    # Set-of-Mark: "labeled N" 40, "<N>" 20, "number N" 20, bare numbers 24, "No. N", "digit N"
    ("How are the peeler labeled 1 and the knife labeled 2 used?", "som"),
    ("What is the object marked with <1>?", "som"),
    ("What is the distance between person 1 and 2?", "som"),
    ("What does the person marked as No. 2 do?", "som"),
    ("What is highlighted by the digit 1?", "som"),
    ("What do the objects marked with different numbers have in common?", "som"),
    # the marker is named otherwise than the object word in the question
    ("What is the box circled in purple used for?", "ellipse"),
    ("Who wears the circled arrow on the shirt?", "ellipse"),
    ("What is the cup circled in the green box?", "rectangle"),
    ("What is the box pointed to by the arrow?", "arrow"),
    # a tag's bare number as a noun, a coloured frame, a point on the object (the review's 16 unknowns)
    ("What interactions occurred between 1 and 2?", "som"),
    ("What was 2's expression when he heard the speech 1 made?", "som"),
    ("At 14:23, what does 1 do with 2?", "som"),
    ("What talent do 3 have?", "som"),
    ("What does the man marked in red as 1 do after chatting with the woman?", "som"),
    ("Which of the four numbered items was just taken out of the refrigerator?", "som"),
    ("Among the people with numbers, which person is the one standing in the front?", "som"),
    ("What was the reaction of the person in the yellow frame after answering the phone?", "rectangle"),
    ("Which direction does the object with a point on it move in the video?", "point"),
    # numbers that are times, scores and counts are not tags
    ("What are the two men doing at 35:40?", "unknown"),
    ("Why is the crowd so happy when the game score is 1-1?", "unknown"),
    ("How many times did 2 people wave?", "unknown"),
    ("What is the object in the frame doing?", "unknown"),  # the video's frame, not a drawn one
    # no marker named: the unknown bucket (4.1% of the release)
    ("What is the selected person doing?", "unknown"),
    ("What does the small mark show?", "unknown"),
    ("How many points does the team score?", "unknown"),
    ("What is the number of people in the room?", "unknown"),
    ("Who crosses the finish line first?", "unknown"),
]


@pytest.mark.parametrize(("question", "shape"), RELEASE_PATTERNS)
def test_the_shape_rule_reads_the_releases_vocabulary(question, shape):
    options = "\nA: a box\nB: an arrow\nC: a dot\nD: graffiti"  # option lines are never read
    assert prompt_shape(question + options) == shape
