"""The V2P-Bench release loader: option parsing, paths, validation and the sample it makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_rows import v2p_question as _question
from release_rows import v2p_row as _row
from release_rows import write_v2p_rows as _write

from core.errors import DataErrors
from core.formats.v2p import (
    INSTRUCTION,
    load_v2p_release,
    parse_options,
    render_question,
    write_v2p_release,
)
from core.sample import Sample


def test_parse_options_accepts_one_or_two_spaces():
    assert parse_options(_question("Q?", ["x", "y", "z"], gap=" ")) == ("Q?", ["x", "y", "z"])
    assert parse_options(_question("Q?", ["x", "y"], gap="  ")) == ("Q?", ["x", "y"])


def test_parse_options_rejects_too_few_or_out_of_order():
    with pytest.raises(ValueError, match="2-4"):
        parse_options("Q?\nA: only one\n" + INSTRUCTION)
    with pytest.raises(ValueError, match="out of order"):
        parse_options("Q?\nA: x\nC: y\n" + INSTRUCTION)


def test_render_question_round_trips_through_parse():
    text = render_question("Where?", ["left", "right", "up"])
    assert text.endswith(INSTRUCTION)
    assert parse_options(text) == ("Where?", ["left", "right", "up"])


def test_official_order_and_meta(v2p_release: Path):
    row = _row(question=_question("What is it doing?", ["running", "sitting", "eating"], gap="  "))
    _write(v2p_release, [row])
    (sample,) = load_v2p_release(v2p_release)
    user, assistant = sample.turns
    assert [p.type for p in user.parts] == ["video", "text", "image"]
    video, text, image = user.parts
    assert (video.path, video.start, video.end) == (str(v2p_release / "videos/NExTVideo/vid1.mp4"), 0.0, 12.0)
    assert text.text == row["question"]  # verbatim
    assert image.path == str(v2p_release / "frames/NExTVideo/vid1_0.jpg")
    assert assistant.text == "B" and assistant.loss
    assert sample.id == "000001" and sample.task == "v2p"
    assert (sample.source, sample.source_id, sample.segment) == ("NExT-QA", "vid1", (0.0, 12.0))
    assert sample.meta["options"] == ["running", "sitting", "eating"]
    assert {k: sample.meta[k] for k in ("answer", "dimension", "category", "duration", "video_id")} == {
        "answer": "B",
        "dimension": 1,
        "category": 7,
        "duration": 12.0,
        "video_id": "vid1",
    }


def test_vp_first_order_and_frame_path_list(v2p_release: Path):
    _write(v2p_release, [_row(frame_path=["NExTVideo/vid1_0.jpg", "NExTVideo/vid1_1.jpg"], id="q-7")])
    (sample,) = load_v2p_release(v2p_release, input_order="vp_first")
    assert [p.type for p in sample.turns[0].parts] == ["video", "image", "image", "text"]
    assert sample.turns[0].parts[2].path.endswith("vid1_1.jpg")
    assert sample.id == "q-7"


def test_case_mismatched_folder_is_resolved_with_a_warning(v2p_release: Path):
    _write(v2p_release, [_row(frame_path="NEXTVideo/vid1_0.jpg"), _row(frame_path="NEXTVideo/vid1_1.jpg")])
    with pytest.warns(UserWarning, match="NEXTVideo.*NExTVideo") as record:
        samples = load_v2p_release(v2p_release)
    assert len([w for w in record if "case-insensitive" in str(w.message)]) == 1  # once per folder
    assert samples[1].turns[0].parts[2].path == str(v2p_release / "frames/NExTVideo/vid1_1.jpg")


def test_every_bad_row_is_listed_with_its_line(v2p_release: Path):
    lines = [
        _row(),
        '{"video_id": "broken"',
        {k: v for k, v in _row().items() if k != "source"},
        _row(duration="12"),
        _row(answer="D", question=_question("Q?", ["a", "b", "c"])),
        _row(dimension=8),
        _row(video_path="NExTVideo/missing.mp4"),
        _row(frame_path=["NExTVideo/vid1_0.jpg", "NExTVideo/gone.jpg"]),
        _row(question="Q? no options here"),
    ]
    _write(v2p_release, lines)
    with pytest.raises(DataErrors) as caught:
        load_v2p_release(v2p_release)
    message = str(caught.value)
    expected = {
        2: "malformed JSON",
        3: "field 'source': missing",
        4: "field 'duration': expected int or float",
        5: "field 'answer'",
        6: "field 'dimension': unknown dimension id 8",
        7: "field 'video_path': file not found",
        8: "field 'frame_path': file not found: frames/NExTVideo/gone.jpg",
        9: "field 'question'",
    }
    for line, text in expected.items():
        assert any(p.startswith(f"row {line}") and text in p for p in caught.value.problems), (line, message)
    assert "row 1," not in message and len(caught.value.problems) == len(expected)
    assert "dataset_info.jsonl" in message


def test_missing_files_allowed_when_not_required(tmp_path: Path):
    _write(tmp_path, [_row()])
    (sample,) = load_v2p_release(tmp_path, require_files=False)
    assert sample.turns[0].parts[0].path == str(tmp_path / "videos/NExTVideo/vid1.mp4")


def test_unknown_input_order_is_rejected(v2p_release: Path):
    _write(v2p_release, [_row()])
    with pytest.raises(ValueError, match="input_order"):
        load_v2p_release(v2p_release, input_order="question_last")


def test_write_then_load_and_row_round_trip(v2p_release: Path):
    rows = [_row(qid=f"q{i}", answer="ABCD"[i]) for i in range(4)]
    write_v2p_release(rows, v2p_release)
    assert [p.name for p in v2p_release.iterdir() if p.is_file()] == [
        "dataset_info.jsonl"
    ]  # no temp file left
    samples = load_v2p_release(v2p_release)
    assert [s.id for s in samples] == ["q0", "q1", "q2", "q3"]
    assert [s.meta["answer"] for s in samples] == list("ABCD")
    for sample in samples:
        assert Sample.from_row(json.loads(json.dumps(sample.to_row()))) == sample


def test_duplicate_ids_are_reported(v2p_release: Path):
    _write(v2p_release, [_row(id="same"), _row(id="same")])
    with pytest.raises(DataErrors, match="row 2, field 'id': duplicate"):
        load_v2p_release(v2p_release)
