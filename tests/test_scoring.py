"""Scoring rules for V2P-Bench and OVIBench on hand-picked tricky responses."""

from __future__ import annotations

import pytest

from eval.scoring import (
    DIMENSIONS,
    TASK_GROUPS,
    category_keys,
    duration_bucket,
    official_correct,
    parse_ovi_mcq,
    prompt_shape,
    score_ovi,
    score_v2p,
    scored_record,
    tolerant_letter,
)

QUESTION = (
    "What did the person pointed to by the arrow do next?\n"
    "A: opened a box\nB:  sat down\nC: left\nD: waved\n"
    "Select the best option that accurately addresses the question. "
    "Give only your option letter, no other words."
)


@pytest.mark.parametrize(
    ("prediction", "answer", "official", "tolerant"),
    [
        ("B", "B", True, "B"),
        (" B", "B", False, "B"),
        ("b", "B", False, "B"),
        ("Answer: C", "C", False, "C"),
        ("<think>A</think> D", "D", False, "D"),
        ("", "A", False, None),
        ("B. sat down", "B", True, "B"),
        ("The best answer is B.", "B", False, "B"),
        ("(C) left", "C", False, "C"),
        ("**Answer:** A", "A", False, "A"),
        ("</think>C", "C", False, "C"),
        ("I think it is D.", "D", False, "D"),
        # The official rule only looks at the first character, so this odd response counts for B.
        ("Best answer: C", "B", True, "C"),
    ],
)
def test_official_vs_tolerant(prediction: str, answer: str, official: bool, tolerant: str | None) -> None:
    assert official_correct(prediction, answer) is official
    assert tolerant_letter(prediction) == tolerant


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("A man is walking to the door.", None),  # the article, not option A
        ("A man walks away, so the answer is C", "C"),
        ("The answer is A because he waves", "A"),
        ("a", "A"),
        ("a man", None),
        ("<think>unfinished reasoning B", None),
        ("E", None),
    ],
)
def test_tolerant_letter_edge_cases(prediction: str, expected: str | None) -> None:
    assert tolerant_letter(prediction) == expected


def test_tolerant_letter_respects_allowed_letters() -> None:
    assert tolerant_letter("Z", letters="ABCDZ") == "Z"
    assert tolerant_letter("Z", letters="ABCD") is None


def test_dimension_map_is_the_corrected_one() -> None:
    assert set(DIMENSIONS) == {1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 14}
    assert DIMENSIONS[1] == ("OA", "Object Attribute")
    assert DIMENSIONS[9] == ("SR", "Spatial Relationship")
    assert DIMENSIONS[10] == ("GC", "General Counting")
    assert DIMENSIONS[14] == ("CI", "Counterfactual Inference")


def test_task_groups_partition_the_dimensions() -> None:
    grouped = [label for labels in TASK_GROUPS.values() for label in labels]
    assert sorted(grouped) == sorted(label for label, _ in DIMENSIONS.values())


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [(0, "short"), (239.9, "short"), (240, "medium"), (1799.5, "medium"), (1800, "long"), (7186, "long")],
)
def test_duration_bucket_boundaries(seconds: float, bucket: str) -> None:
    assert duration_bucket(seconds) == bucket


@pytest.mark.parametrize(
    ("question", "shape"),
    [
        (QUESTION, "arrow"),  # "box" in an option line is not read
        ("What is the person in the red box doing?", "rectangle"),
        ("How many triangles are on the sign marked by the green circle?", "ellipse"),
        ("What does the person in the triangle drawn hold?", "triangle"),
        ("What happened to the object outlined by the contour?", "mask_contour"),
        ("Who is the person indicated by the scribble?", "scribble"),
        ("Where does the car marked with the dot go?", "point"),
        ("Where does the car marked by the point go?", "point"),
        ("What is the object labeled 2 used for?", "som"),
        ("What does the man with number tag 3 do?", "som"),
        ("What colour is the ellipse?", "ellipse"),  # fallback: plain keyword
        ("At which point does the man wearing a mask sit down?", "unknown"),
        ("What is the number of people in the room?", "unknown"),
    ],
)
def test_prompt_shape(question: str, shape: str) -> None:
    assert prompt_shape(question) == shape


@pytest.mark.parametrize(
    ("prediction", "parsed"),
    [
        ("B (Correction)", ("B", "Correction")),
        ("c (false-trigger)", ("C", "False Trigger")),
        ("A (False Trigger)", ("A", "False Trigger")),
        ("D (cancellation)", ("D", "Cancellation")),
        ("<think>A (Correction)</think>B (Cancellation)", ("B", "Cancellation")),
        ("Correction", (None, "Correction")),
        ("", (None, None)),
    ],
)
def test_parse_ovi_mcq(prediction: str, parsed: tuple[str | None, str | None]) -> None:
    assert parse_ovi_mcq(prediction) == parsed


def _v2p_record(prediction: str) -> dict:
    meta = {
        "answer": "B",
        "options": ["opened a box", "sat down", "left", "waved"],
        "dimension": 5,
        "duration": 600,
        "source": "NExTVideo",
        "question": QUESTION,
    }
    return {"id": "v2p-1", "task": "v2p", "prediction": prediction, "meta": meta}


def _ovi_record(prediction: str, fmt: str = "mcq") -> dict:
    meta = {"format": fmt, "interruption_type": "Correction"}
    if fmt == "mcq":
        meta["answer_letter"] = "B"
    return {"id": "ovi-1", "task": "ovi", "prediction": prediction, "meta": meta}


def test_score_v2p_reports_both_rules() -> None:
    assert score_v2p(_v2p_record("B")) == {"correct": 1.0, "correct_tolerant": 1.0}
    assert score_v2p(_v2p_record("Answer: B")) == {"correct": 0.0, "correct_tolerant": 1.0}
    assert score_v2p(_v2p_record("")) == {"correct": 0.0, "correct_tolerant": 0.0}


def test_score_ovi_mcq_and_open() -> None:
    assert score_ovi(_ovi_record("B (Correction)")) == {"ma": 1.0, "ca": 1.0}
    assert score_ovi(_ovi_record("B (Cancellation)")) == {"ma": 1.0, "ca": 0.0}
    assert score_ovi(_ovi_record("A (Correction)")) == {"ma": 0.0, "ca": 1.0}
    # Open-ended items wait for the judge: no scores, never zeros.
    assert score_ovi(_ovi_record("I stop here.", fmt="open")) == {}


def test_category_keys() -> None:
    assert category_keys(_v2p_record("B")) == {
        "dimension": "FT",
        "duration": "medium",
        "task_group": "temporal",
        "source": "NExTVideo",
        "shape": "arrow",
    }
    assert category_keys(_ovi_record("B", fmt="open")) == {"type": "Correction", "format": "open"}


def test_scored_record_shape() -> None:
    row = scored_record(_v2p_record("B"))
    assert row["id"] == "v2p-1" and row["task"] == "v2p"
    assert row["scores"] == {"correct": 1.0, "correct_tolerant": 1.0}
    assert row["categories"]["dimension"] == "FT"


def test_unknown_task_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        scored_record({"id": "x", "task": "nope", "prediction": "", "meta": {}})
