"""Scoring rules for V2P-Bench and OVIBench on hand-picked tricky responses, and benchmarks as objects."""

from __future__ import annotations

import json

import pytest

from core.answers import official_correct, parse_ovi_mcq, tolerant_letter
from core.formats.v2p import DIMENSIONS
from eval.benchmarks import BENCHMARKS
from eval.benchmarks.ovi import OVI
from eval.benchmarks.shapes import prompt_shape
from eval.benchmarks.v2p import TASK_GROUPS, V2P, duration_bucket
from eval.scored import scored_record

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
        # echoing the instruction's list of types names none (the first named made it Cancellation)
        ("A (Cancellation, False Trigger or Correction)", ("A", None)),
        ("B (cancellation / false trigger / correction)", ("B", None)),
        ("B (Correction). A correction, as said.", ("B", "Correction")),  # one type, named twice
    ],
)
def test_parse_ovi_mcq(prediction: str, parsed: tuple[str | None, str | None]) -> None:
    assert parse_ovi_mcq(prediction) == parsed


V2P_META = {
    "answer": "B",
    "options": ["opened a box", "sat down", "left", "waved"],
    "dimension": 5,
    "duration": 600,
    "source": "NExTVideo",
    "question": QUESTION,
}


def _ovi_meta(fmt: str = "mcq") -> dict:
    meta = {"format": fmt, "interruption_type": "Correction"}
    if fmt == "mcq":
        meta["answer_letter"] = "B"
    return meta


def test_v2p_scores_by_both_rules() -> None:
    assert V2P.score("B", V2P_META) == {"accuracy": 1.0, "accuracy_tolerant": 1.0}
    assert V2P.score("Answer: B", V2P_META) == {"accuracy": 0.0, "accuracy_tolerant": 1.0}
    assert V2P.score("", V2P_META) == {"accuracy": 0.0, "accuracy_tolerant": 0.0}


def test_ovi_scores_mcq_by_rule_and_leaves_open_items_to_the_judge() -> None:
    assert OVI.score("B (Correction)", _ovi_meta()) == {"ma": 1.0, "ca": 1.0}
    assert OVI.score("B (Cancellation)", _ovi_meta()) == {"ma": 1.0, "ca": 0.0}
    assert OVI.score("A (Correction)", _ovi_meta()) == {"ma": 0.0, "ca": 1.0}
    # Open-ended items wait for the judge: no scores, never zeros.
    assert OVI.score("I stop here.", _ovi_meta("open")) == {}
    assert OVI.judged_metrics(_ovi_meta("open")) == ["iac", "tfs", "ves", "ifa", "cfs", "ccs", "ca_open"]
    assert OVI.judged_metrics(_ovi_meta()) == []


def test_categories() -> None:
    assert V2P.categories(V2P_META) == {
        "dimension": "FT",
        "duration": "medium",
        "task_group": "temporal_understanding",
        "source": "NExTVideo",
        "shape": "arrow",
    }
    assert OVI.categories(_ovi_meta("open")) == {"type": "Correction", "format": "open"}
    paraphrased = {**_ovi_meta("open"), "phrasing": "paraphrased"}
    assert OVI.categories(paraphrased) == {"type": "Correction", "format": "open", "phrasing": "paraphrased"}


def test_the_ovi_entry_records_the_phrase_banks_its_set_was_built_with(tmp_path) -> None:
    from eval.benchmarks.ovi import OviSettings

    cfg = OviSettings(root=str(tmp_path))
    assert "phrasings" not in OVI.notes(cfg)  # a release: no build_info.json
    settings = {"phrasings": {"version": 1, "bank": "eval", "paraphrased_share": 0.25}}
    build_info = {"settings": settings, "by_phrasing": {"eval": 9, "paraphrased": 3}}
    (tmp_path / "build_info.json").write_text(json.dumps(build_info))
    assert OVI.notes(cfg)["phrasings"] == {
        "version": 1,
        "bank": "eval",
        "paraphrased_share": 0.25,
        "rows": {"eval": 9, "paraphrased": 3},
    }


def test_a_scored_record_is_computed_from_the_stored_prediction() -> None:
    record = {"id": "v2p-1", "prediction": "B", "meta": V2P_META}
    row = scored_record(V2P, record, judged_by=None)
    assert row == {
        "id": "v2p-1",
        "scores": {"accuracy": 1.0, "accuracy_tolerant": 1.0},
        "categories": V2P.categories(V2P_META),
        "n_unjudged_metrics": 0,
        "n_zero_metrics": 0,
    }


def test_judged_metrics_count_only_by_the_judge_in_use_and_the_current_rubric() -> None:
    from eval.rubrics import RUBRIC_VERSION

    def judgement(judge: str, score: float | None, rubric: str = RUBRIC_VERSION, status: str = "ok") -> dict:
        return {"judge": judge, "score": score, "rubric_version": rubric, "status": status}

    record = {
        "id": "o1",
        "prediction": "Okay, I stop.",
        "meta": _ovi_meta("open"),
        "judgements": {
            "iac": judgement("judge-a", 1.0),
            "tfs": judgement("judge-b", 7.0),  # another judge's score
            "ves": judgement("judge-a", None, status="unjudged"),  # the request got no reply
            "ifa": judgement("judge-a", 1.0, rubric="ovi-0"),  # an older rubric
            "cfs": judgement("judge-a", 4.0),
            "ccs": judgement("judge-a", None, status="unparseable"),  # a reply without a score: 0
        },
    }
    row = scored_record(OVI, record, judged_by="judge-a")
    assert row["scores"] == {"iac": 1.0, "cfs": 4.0, "ccs": 0.0} and row["n_unjudged_metrics"] == 4
    assert row["n_zero_metrics"] == 1
    assert scored_record(OVI, record, judged_by=None)["n_unjudged_metrics"] == 7  # no judge: all unjudged
    narrowed = scored_record(OVI, record, judged_by="judge-a", wanted=["iac", "tfs"])
    assert narrowed["scores"] == {"iac": 1.0} and narrowed["n_unjudged_metrics"] == 1


def test_every_benchmark_is_one_entry_whose_name_is_its_key() -> None:
    assert {"v2p", "ovi"} <= BENCHMARKS.keys()
    for name, bench in BENCHMARKS.items():
        assert bench.name == name and bench.version >= 1
        assert (bench.source is None) == (bench.load is not None)
        assert bench.source is None or bench.source in BENCHMARKS
