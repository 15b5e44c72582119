"""Scoring a V2P response file without a model: validation, hand-computed tables, the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from core.errors import DataError, DataErrors
from eval.score_responses import load_response_file, render_tables, score_responses, tables

INSTRUCTION = (
    "Select the best option that accurately addresses the question. "
    "Give only your option letter, no other words."
)
FOUR = ["a red cup", "a blue bag", "a green hat", "a black shoe"]
THREE = ["left", "right", "middle"]

# One row per line: (dimension id, duration s, question stem, options, answer, response, source).
# Dimension labels (corrected map): 1 OA, 2 HA, 3 OD, 4 FM, 5 FT, 6 RT, 7 AS, 9 SR, 10 GC, 12 CR, 13 PU,
# 14 CI. Buckets: short < 240 <= medium < 1800 <= long. "off" = official rule, "tol" = tolerant rule.
FIXTURE: list[tuple[int, float, str, list[str], str, str, str]] = [
    # row  dim  bucket  answer  response              off tol
    #  1   OA   short   B       "B"                   1   1
    (1, 100, "What is the object in the red box holding?", FOUR, "B", "B", "NExTVideo"),
    #  2   OA   medium  B       "b"                   0   1
    (1, 600, "What colour is the item pointed to by the arrow?", FOUR, "B", "b", "NExTVideo"),
    #  3   OA   long    C       " C"                  0   1
    (1, 2400, "What is the object marked with a dot made of?", FOUR, "C", " C", "NExTVideo"),
    #  4   SR   short   D       "Answer: D"           0   1
    (9, 100, "Where is the person in the green box standing?", FOUR, "D", "Answer: D", "NExTVideo"),
    #  5   SR   medium  A       "" (3 options)        0   0
    (9, 600, "Which side is the dog pointed to by the arrow on?", THREE, "A", "", "NExTVideo"),
    #  6   SR   long    B       "<think>A</think>B"   0   1
    (9, 2400, "What is next to the object in the circle?", FOUR, "B", "<think>A</think>B", "NExTVideo"),
    #  7   CR   short   A       "A" (2 options)       1   1
    (12, 100, "Why did the man in the red box fall?", ["he slipped", "he jumped"], "A", "A", "NExTVideo"),
    #  8   CR   medium  C       "C. the car" ("A:  x")1   1
    (12, 600, "Why did the car marked with a dot stop?", FOUR, "C", "C. the car", "NExTVideo"),
    #  9   CR   long    D       "A"                   0   0
    (12, 2400, "Why did the person run away?", FOUR, "D", "A", "ActivityNet"),
    # 10   GC   short   A       "A"                   1   1
    (10, 100, "How many times does the object in the box spin?", FOUR, "A", "A", "ActivityNet"),
    # 11   GC   medium  C       "B" (3 options)       0   0
    (10, 600, "How many birds are in the circle?", ["one", "two", "three"], "C", "B", "ActivityNet"),
    # 12   FT   short   B       "B"                   1   1
    (5, 100, "What does the woman pointed to by the arrow do next?", FOUR, "B", "B", "ActivityNet"),
    # 13   FT   long    A       "The answer is A"     0   1
    (5, 2400, "What happens after the ball in the box lands?", FOUR, "A", "The answer is A", "ActivityNet"),
    # 14   AS   medium  D       "D"                   1   1
    (7, 600, "In what order does the chef marked with a dot act?", FOUR, "D", "D", "ActivityNet"),
    # 15   AS   short   C       "c" (3 options)       0   1
    (7, 100, "What does the man in the box do first?", ["sits", "runs", "waves"], "C", "c", "ActivityNet"),
    # 16   PU   long    B       "B"                   1   1
    (13, 2400, "What role does the person in the box play in the story?", FOUR, "B", "B", "Ego4D"),
    # 17   PU   medium  A       "A man walks in."     1   0  (official: first char; tolerant: the article)
    (13, 600, "What happens to the man pointed to by the arrow?", FOUR, "A", "A man walks in.", "Ego4D"),
    # 18   CI   short   C       "D"                   0   0
    (14, 100, "What if the object in the box were removed?", FOUR, "C", "D", "Ego4D"),
    # 19   HA   long    A       "A"                   1   1
    (2, 2400, "What is the person in the circle wearing?", FOUR, "A", "A", "Ego4D"),
    # 20   OD   short (239.9 s) B  "B"                1   1
    (3, 239.9, "Which way is the car pointed to by the arrow moving?", FOUR, "B", "B", "Ego4D"),
    # 21   FM   medium (240 s)  D  "(D)"              0   1
    (4, 240, "Which object in the box matches the sketch?", FOUR, "D", "(D)", "Ego4D"),
    # 22   RT   long (1800 s)   C  "C"                1   1
    (6, 1800, "What happened before the dog in the box barked?", FOUR, "C", "C", "Ego4D"),
]
TWO_SPACE_ROW = 8  # its option lines are written "A:  text"

# Overall, n = 22: official correct rows 1,7,8,10,12,14,16,17,19,20,22 = 11 -> 50.0;
# tolerant wrong rows 5,9,11,17,18 -> 17 correct -> 77.3.
OVERALL = ("22", "50.0", "77.3")
# Per dimension: (n, official, tolerant)
#   OA rows 1,2,3: off 1/3, tol 3/3     HA row 19: 1/1, 1/1      OD row 20: 1/1, 1/1
#   FM row 21: 0/1, 1/1                 FT rows 12,13: 1/2, 2/2  RT row 22: 1/1, 1/1
#   AS rows 14,15: 1/2, 2/2             SR rows 4,5,6: 0/3, 2/3  GC rows 10,11: 1/2, 1/2
#   CR rows 7,8,9: 2/3, 2/3             PU rows 16,17: 2/2, 1/2  CI row 18: 0/1, 0/1
BY_DIMENSION = {
    "OA Object Attribute": ("3", "33.3", "100.0"),
    "HA Human Attribute": ("1", "100.0", "100.0"),
    "OD Object Direction": ("1", "100.0", "100.0"),
    "FM Feature Mapping": ("1", "0.0", "100.0"),
    "FT Forward Temporal": ("2", "50.0", "100.0"),
    "RT Reverse Temporal": ("1", "100.0", "100.0"),
    "AS Action Sequence": ("2", "50.0", "100.0"),
    "SR Spatial Relationship": ("3", "0.0", "66.7"),
    "GC General Counting": ("2", "50.0", "50.0"),
    "CR Causal Relationship": ("3", "66.7", "66.7"),
    "PU Plot Understanding": ("2", "100.0", "50.0"),
    "CI Counterfactual Inference": ("1", "0.0", "0.0"),
}
# Per bucket:
#   short  rows 1,4,7,10,12,15,18,20 (n 8): off 1,7,10,12,20 = 5 -> 62.5; tol all but 18 = 7 -> 87.5
#   medium rows 2,5,8,11,14,17,21   (n 7): off 8,14,17 = 3 -> 42.9;     tol 2,8,14,21 = 4 -> 57.1
#   long   rows 3,6,9,13,16,19,22   (n 7): off 16,19,22 = 3 -> 42.9;    tol all but 9 = 6 -> 85.7
BY_DURATION = {
    "short (< 240 s)": ("8", "62.5", "87.5"),
    "medium (240–1800 s)": ("7", "42.9", "57.1"),
    "long (≥ 1800 s)": ("7", "42.9", "85.7"),
}
# Per task group (the paper's three):
#   basic_perception OA,HA rows 1,2,3,19 (n 4): off 1,19 = 2 -> 50.0; tol 4 -> 100.0
#   temporal_understanding FT,RT,AS,SR,OD,FM,GC (n 12): off 12,22,14,20,10 = 5 -> 41.7; tol 10 -> 83.3
#   high_level_reasoning CR,PU,CI rows 7,8,9,16,17,18 (n 6): off 7,8,16,17 = 4 -> 66.7; tol 3 -> 50.0
BY_TASK_GROUP = {
    "basic_perception": ("4", "50.0", "100.0"),
    "temporal_understanding": ("12", "41.7", "83.3"),
    "high_level_reasoning": ("6", "66.7", "50.0"),
}
# Per source: NExTVideo rows 1-8: off 1,7,8 = 3/8 -> 37.5, tol all but 5 = 7/8 -> 87.5;
# ActivityNet rows 9-15: off 10,12,14 = 3/7 -> 42.9, tol 10,12,13,14,15 = 5/7 -> 71.4;
# Ego4D rows 16-22: off 16,17,19,20,22 = 5/7 -> 71.4, tol all but 17,18 = 5/7 -> 71.4.
BY_SOURCE = {
    "NExTVideo": ("8", "37.5", "87.5"),
    "ActivityNet": ("7", "42.9", "71.4"),
    "Ego4D": ("7", "71.4", "71.4"),
}
# Per shape (from the stems): rectangle rows 1,4,7,10,13,15,16,18,21,22 (n 10);
# arrow 2,5,12,17,20 (n 5); point 3,8,14 (n 3); ellipse 6,11,19 (n 3); unknown 9 (n 1).
SHAPE_COUNTS = {"rectangle": "10", "arrow": "5", "point": "3", "ellipse": "3", "unknown": "1"}


def _question(stem: str, options: list[str], gap: str = " ") -> str:
    letters = [f"{chr(ord('A') + i)}:{gap}{text}" for i, text in enumerate(options)]
    return "\n".join([stem, *letters, INSTRUCTION])


def fixture_rows(model: str = "m1") -> list[dict]:
    """The FIXTURE as release rows plus ``response`` and ``model``."""
    rows = []
    for number, (dimension, duration, stem, options, answer, response, source) in enumerate(FIXTURE, 1):
        gap = "  " if number == TWO_SPACE_ROW else " "
        rows.append(
            {
                "video_id": f"vid{number % 5}",
                "video_path": f"{source}/vid{number % 5}.mp4",
                "duration": duration,
                "question": _question(stem, options, gap),
                "answer": answer,
                "source": source,
                "frame_path": f"{source}/vid{number % 5}_{number}.jpg",
                "dimension": dimension,
                "category": 1 + number % 17,
                "response": response,
                "model": model,
            }
        )
    return rows


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_rows(path: Path, rows: list[dict]) -> Path:
    return write_lines(path, [json.dumps(row) for row in rows])


def table_rows(markdown: str, heading: str) -> dict[str, list[str]]:
    """The body rows of the table under ``## heading``: first cell -> the other cells."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {heading}"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 4 :]:  # heading, blank, header, separator
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture
def response_file(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "responses.jsonl", fixture_rows())


# ---------------------------------------------------------------------------------------------------
# Loading


def test_loads_without_media_files(response_file):
    rows = load_response_file(response_file)
    assert len(rows) == len(FIXTURE)
    assert "B:  a blue bag" in rows[TWO_SPACE_ROW - 1]["question"]


def test_bad_rows_are_all_listed_with_line_numbers(tmp_path):
    good = fixture_rows()[0]
    missing_response = {k: v for k, v in good.items() if k != "response"}
    three_options = fixture_rows()[4]  # options A-C
    lines = [
        json.dumps(good),  # 1: fine
        '{"response": "A", ',  # 2: malformed JSON
        json.dumps(missing_response),  # 3
        json.dumps(three_options | {"answer": "D"}),  # 4: D is not an option
        json.dumps(good | {"dimension": 8}),  # 5: unused id
        "",  # 6: blank lines carry no row
        json.dumps({k: v for k, v in good.items() if k not in ("duration", "answer")}),  # 7
        json.dumps(good | {"response": None, "question": "no options here"}),  # 8
    ]
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DataErrors) as caught:
        load_response_file(path)
    problems = caught.value.problems
    # the JSON parser's wording varies between Python versions: only its prefix is fixed
    assert problems[0].startswith("row 2: malformed JSON (")
    assert problems[1:-1] == [
        "row 3, field 'response': missing",
        "row 4, field 'answer': 'D' is not among options A, B, C",
        "row 5, field 'dimension': unknown dimension id 8 (known: 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 14)",
        "row 7, field 'answer': missing",
        "row 7, field 'duration': missing",
        "row 8, field 'response': expected a string, got null",
    ]
    assert problems[-1].startswith("row 8, field 'question': expected 2-4 option lines")
    assert str(path) in str(caught.value)


def test_missing_or_empty_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_response_file(tmp_path / "absent.jsonl")
    with pytest.raises(DataError, match="no rows"):
        load_response_file(write_lines(tmp_path / "empty.jsonl", [""]))


# ---------------------------------------------------------------------------------------------------
# Scores and tables


def test_records_have_the_summary_shape(response_file):
    records = score_responses(load_response_file(response_file))
    first = records[0]
    assert set(first) >= {"id", "task", "prediction", "meta", "scores", "categories"}
    assert first["task"] == "v2p" and first["prediction"] == "B"
    assert first["scores"] == {"accuracy": 1.0, "accuracy_tolerant": 1.0}
    assert first["categories"]["dimension"] == "OA" and first["categories"]["duration"] == "short"
    # corrected labels: id 9 is SR, id 12 is CR
    assert records[3]["categories"]["dimension"] == "SR"
    assert records[6]["categories"]["dimension"] == "CR"
    assert len({record["id"] for record in records}) == len(records)


def test_tables_match_hand_counts(response_file):
    metrics = tables(score_responses(load_response_file(response_file)))["m1"]
    assert metrics["accuracy"] == {"value": 11 / 22, "n": 22}
    assert metrics["accuracy_tolerant"] == {"value": 17 / 22, "n": 22}
    assert metrics["accuracy/dimension/SR"] == {"value": 0.0, "n": 3}
    assert metrics["accuracy/duration/short"] == {"value": 5 / 8, "n": 8}


def test_rendered_tables_match_hand_counts(response_file):
    markdown = render_tables(score_responses(load_response_file(response_file)))
    assert "- Overall m1: official 50.0, tolerant 77.3 (n=22)" in markdown
    assert table_rows(markdown, "Overall") == {"all": list(OVERALL)}
    assert {k: tuple(v) for k, v in table_rows(markdown, "By dimension").items()} == BY_DIMENSION
    assert list(table_rows(markdown, "By dimension"))[:3] == list(BY_DIMENSION)[:3]  # ordered by id
    assert {k: tuple(v) for k, v in table_rows(markdown, "By duration").items()} == BY_DURATION
    assert {k: tuple(v) for k, v in table_rows(markdown, "By task group").items()} == BY_TASK_GROUP
    assert {k: tuple(v) for k, v in table_rows(markdown, "By source").items()} == BY_SOURCE
    shapes = table_rows(markdown, "By prompt shape")
    assert {shape: cells[0] for shape, cells in shapes.items()} == SHAPE_COUNTS


def test_several_models_get_one_column_each(tmp_path):
    # m2 answers the first three fixture rows perfectly: 3/3 official and tolerant.
    m2 = [row | {"model": "m2", "response": row["answer"]} for row in fixture_rows()[:3]]
    path = write_rows(tmp_path / "two.jsonl", fixture_rows() + m2)
    records = score_responses(load_response_file(path))
    assert list(tables(records)) == ["m1", "m2"]
    markdown = render_tables(records)
    assert "| all | 22 / 3 | 50.0 | 77.3 | 100.0 | 100.0 |" in markdown
    assert "m1 official | m1 tolerant | m2 official | m2 tolerant" in markdown
    assert "- Overall m2: official 100.0, tolerant 100.0 (n=3)" in markdown
    # OA: m1 rows 1-3 (33.3 / 100.0), m2 the same three rows (100.0 / 100.0); SR: m2 has none
    dimension = table_rows(markdown, "By dimension")
    assert dimension["OA Object Attribute"] == ["3", "33.3", "100.0", "100.0", "100.0"]
    assert dimension["SR Spatial Relationship"] == ["3 / 0", "0.0", "66.7", "–", "–"]


def test_rows_without_model_share_one_column(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "model"} for row in fixture_rows()]
    records = score_responses(load_response_file(write_rows(tmp_path / "plain.jsonl", rows)))
    assert list(tables(records)) == ["model"]


def test_percentages_round_half_up(tmp_path):
    # 1 correct of 16 is 6.25 %: "6.3" by hand, although f"{6.25:.1f}" gives "6.2".
    rows = fixture_rows()[:1] * 16
    rows = [rows[0]] + [row | {"response": "D"} for row in rows[1:]]
    markdown = render_tables(score_responses(load_response_file(write_rows(tmp_path / "r.jsonl", rows))))
    assert "- Overall m1: official 6.3, tolerant 6.3 (n=16)" in markdown


# ---------------------------------------------------------------------------------------------------
# Command line


def _cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "eval.score_responses", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_prints_tables_and_writes_json(response_file, tmp_path):
    out = tmp_path / "out" / "tables.json"
    result = _cli(str(response_file), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "- Overall m1: official 50.0, tolerant 77.3 (n=22)" in result.stdout
    assert "| SR Spatial Relationship | 3 | 0.0 | 66.7 |" in result.stdout
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["m1"]["accuracy"] == {"value": 0.5, "n": 22}


def test_cli_reports_bad_rows_and_exits_2(tmp_path):
    path = write_lines(tmp_path / "bad.jsonl", [json.dumps(fixture_rows()[0] | {"dimension": 11})])
    result = _cli(str(path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert "row 1, field 'dimension': unknown dimension id 11" in result.stderr
    assert result.stdout == ""
